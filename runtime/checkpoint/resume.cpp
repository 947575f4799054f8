// runtime/checkpoint/resume.cpp — see resume.h: which pieces a rank owns, and the atomic save.
// Reading a checkpoint back: resume_load.cpp.
#include "runtime/checkpoint/resume.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ftw.h>
#include <unistd.h>
#include <sys/file.h>
#include <fcntl.h>
#include <cerrno>
#include <cstring>

#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/output/output_file.h"
#include "picotron/dtype.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"
#include "runtime/output/print0.h"

namespace picotron {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_format;

namespace {

// rm -rf, by hand: libtorch.so exports its own std::filesystem::remove_all, which the
// dynamic linker may pick over libstdc++'s and which crashes on a non-empty directory.
int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
void remove_tree(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw std::runtime_error("cannot remove " + path.string() + ": " + std::strerror(errno));
}

// Every rank learns whether any rank failed (a collective: all ranks must call it).
bool all_succeeded(bool ok, Comm& world) {
  auto flag = torch::tensor({ok ? 0.0 : 1.0}, torch::TensorOptions().dtype(torch::kFloat64).device(world.device()));
  world.all_reduce(flag, ReduceOp::kMax);
  return flag.item<double>() == 0.0;
}

// Test hook: the last rank writes half of its file for this step and kills itself, as a
// job killed mid-save would (tests/cmake/checkpoint_tests.cmake: the previous checkpoint resumes).
bool killed_during_save(int64_t step, int rank, int world_size) {
  const char* at = std::getenv("PICOTRON_FAULT_KILL_DURING_SAVE");
  return at && std::atoll(at) == step && rank == world_size - 1;
}

}  // namespace

// 1. rank 0 makes an empty step-NNNNNN.tmp/ (collective). Returns its path.
std::string begin_save(const std::string& dir, int64_t step, Comm& world) {
  const fs::path tmp = fs::path(dir) / (step_name(step) + ".tmp");
  std::string problem;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec) try { remove_tree(tmp); } catch (const std::exception&) { ec = std::make_error_code(std::errc::io_error); }
    if (!ec) fs::create_directories(tmp, ec);
    if (ec) problem = "--save-dir " + dir + ": cannot create " + tmp.string() + ": " + ec.message();
  }
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "--save-dir " + dir + ": rank 0 could not create the checkpoint directory"
                                             : problem);
  return tmp.string();
}

// 2. this rank writes what it owns (CPU tensors), with the pieces described in the file's
//    metadata. Local: no collective, so it may run on a background thread. Returns "" or
//    the problem.
std::string write_rank_file(const std::string& tmp, int64_t step, int rank, int world_size,
                            const std::vector<StatePiece>& owned) {
  try {
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    json pieces = json::array();
    for (const auto& piece : owned) {
      auto cpu = piece.data.detach().to(torch::kCPU).contiguous();  // [flat_length]
      const auto slice = piece.record.slice();
      pieces.push_back({{"key", piece.key},
                        {"full_shape", piece.record.full_shape},
                        {"split_dim", piece.record.split_dim},
                        {"offset", slice.offset},
                        {"length", slice.length},
                        {"flat_first", piece.flat_first},
                        {"flat_length", piece.flat_length},
                        {"dtype", safetensors_dtype(cpu.scalar_type())},
                        {"fnv1a64", hex(fnv1a64(cpu))}});
      tensors.emplace_back(piece.key, cpu);
    }
    const std::string path = (fs::path(tmp) / rank_file(rank)).string();
    write_safetensors(path, tensors, {{"format", kFormat}, {"pieces", pieces.dump()}}, "--save-dir");
    if (killed_during_save(step, rank, world_size)) {
      fs::resize_file(path, fs::file_size(path) / 2);
      std::raise(SIGKILL);
    }
  } catch (const std::exception& e) {
    return std::string("checkpoint ") + (fs::path(tmp).parent_path() / step_name(step)).string() + ": " + e.what();
  }
  return "";
}

// 3. every rank says whether it wrote its file (collective); rank 0 writes the manifest
//    from every file's pieces, then renames: the checkpoint exists, whole, or not at all.
std::string finish_save(const std::string& dir, const CheckpointSettings& settings, const TrainingCounters& counters,
                        const std::string& write_problem, Comm& world) {
  const int rank = world.rank();
  const fs::path final_dir = fs::path(dir) / step_name(counters.step);
  const fs::path tmp = fs::path(dir) / (step_name(counters.step) + ".tmp");
  std::string problem = write_problem;
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "checkpoint " + final_dir.string() + ": another rank could not write its "
                                               "file (see its error)" : problem);
  if (rank == 0) {
    try {
      json manifest = {{"format", kFormat},
                       {"step", counters.step},
                       {"adam_steps", counters.adam_steps},
                       {"loss_scale", counters.loss_scale},
                       {"loss_scale_clean_steps", counters.loss_scale_clean_steps},
                       {"world_size", world.size()},
                       {"config", settings.run},
                       {"files", json::array()},
                       {"tensors", json::object()}};
      for (int r = 0; r < world.size(); ++r) {
        const SafetensorsFile file((tmp / rank_file(r)).string());
        manifest["files"].push_back(rank_file(r));
        for (auto piece : parse_json(file.metadata().at("pieces"), "checkpoint metadata")) {
          auto& tensor = manifest["tensors"][piece.at("key").get<std::string>()];
          tensor["full_shape"] = piece.at("full_shape");
          tensor["dtype"] = piece.at("dtype");
          piece.erase("full_shape");
          piece.erase("dtype");
          piece["file"] = rank_file(r);
          tensor["pieces"].push_back(piece);
        }
      }
      // The manifest's own checksum: an edited counter, dtype or shape is refused at resume.
      const std::string body = manifest.dump();
      manifest["manifest_fnv1a64"] = hex(fnv1a64(body.data(), body.size()));
      write_file("--save-dir", (tmp / "manifest.json").string(), manifest.dump(1) + "\n");
      remove_tree(final_dir);
      fs::rename(tmp, final_dir);
      // keep the newest --keep-checkpoints; unfinished saves of earlier steps go too
      const auto steps = finished_steps(dir);
      for (size_t i = 0; i + size_t(settings.keep) < steps.size(); ++i)
        remove_tree(fs::path(dir) / step_name(steps[i]));
      std::vector<fs::path> unfinished;  // (collected first: removing while iterating is undefined)
      for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        const bool digits = name.size() >= 15 && name.find_first_not_of("0123456789", 5) == name.size() - 4;
        if (name.rfind("step-", 0) == 0 && digits && name.substr(name.size() - 4) == ".tmp" && entry.path() != tmp)
          unfinished.push_back(entry.path());
      }
      for (const auto& path : unfinished) remove_tree(path);
    } catch (const std::exception& e) {
      problem = "checkpoint " + final_dir.string() + ": " + e.what();
    }
  }
  if (!all_succeeded(problem.empty(), world))
    throw std::runtime_error(problem.empty() ? "checkpoint " + final_dir.string() + ": rank 0 could not finish it" : problem);
  return final_dir.string();
}

std::string save_checkpoint(const std::string& dir, const CheckpointSettings& settings,
                            const TrainingCounters& counters, const std::vector<StatePiece>& owned, Comm& world) {
  const std::string tmp = begin_save(dir, counters.step, world);
  const std::string problem = write_rank_file(tmp, counters.step, world.rank(), world.size(), owned);
  return finish_save(dir, settings, counters, problem, world);
}

int64_t directory_bytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) total += int64_t(entry.file_size());
  return total;
}


int lock_save_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--save-dir " + dir + ": cannot create it: " + ec.message());
  const std::string path = (fs::path(dir) / ".picotron-lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw std::runtime_error("--save-dir " + dir + ": cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    throw std::runtime_error("--save-dir " + dir + ": another run is saving checkpoints there (pid " +
                             (n > 0 ? std::string(pid, size_t(n)) : std::string("?")) + "): give another folder, or wait for it");
  }
  const std::string mine = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mine.data(), mine.size(), 0) < 0) {}  // the pid is for the message only
  return fd;
}

bool checkpoint_due(const CheckpointSettings& settings, int64_t step_done, int64_t end_step) {
  if (settings.save_dir.empty()) return false;
  return (settings.save_every > 0 && step_done % settings.save_every == 0) || step_done == end_step;
}

void save_checkpoint(const CheckpointSettings& settings, const TrainingCounters& counters,
                     const std::vector<StatePiece>& owned, Comm& world) {
  const Timer clock;
  const std::string where = save_checkpoint(settings.save_dir, settings, counters, owned, world);
  print0(world.rank(), "saved checkpoint " + where + " (" + human_bytes(double(directory_bytes(where))) + ", " +
                           std::to_string(world.size()) + " file(s), " + seconds_text(clock.seconds()) + ")");
}

}  // namespace picotron
