// runtime/preflight/startup.cpp — see startup.h.
#include "runtime/preflight/startup.h"

#include "runtime/cli/flags.h"

#include <algorithm>
#include <functional>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <sys/prctl.h>
#include <unistd.h>
#include <tuple>

#include "kernels/fp8.h"
#include "runtime/checkpoint/checkpoint_format.h"
#include "runtime/planner/memory_estimate.h"
#include "runtime/output/output_file.h"
#include "runtime/checkpoint/safetensors.h"
#include "picotron/format.h"
#include "runtime/observe/measure.h"
#include "runtime/cli/train_config.h"

#include <nlohmann/json.hpp>

#ifdef PICOTRON_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace picotron {

#ifdef PICOTRON_WITH_CUDA
constexpr bool kFusedKernelsBuilt = true;  // the .cu kernels are compiled with the CUDA parts
#else
constexpr bool kFusedKernelsBuilt = false;
#endif

namespace {

// Free memory of the GPU this rank will use (local_rank % device count), or -1 when it
// cannot be read. cudaMemGetInfo: what is free now, other processes' use excluded.
double gpu_free_bytes(int local_rank) {
#ifdef PICOTRON_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return -1;
  size_t free = 0, total = 0;
  if (cudaSetDevice(local_rank % count) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return double(free);
#else
  (void)local_rank;
  return -1;
#endif
}

}  // namespace

namespace {
namespace fs = std::filesystem;
// Where a path really leads: absolute, with symlinks, "." and ".." resolved as far as it
// exists (an output need not exist yet; a symlink to an input is that input).
fs::path real_path(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p), ec);
  r = (ec ? fs::absolute(p) : r).lexically_normal();
  return r.filename().empty() ? r.parent_path() : r;  // "dir/" and "dir/." are "dir"
}
bool within(const fs::path& inner, const fs::path& outer) {  // inner is outer, or under it
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}
// The files a folder output writes: --export-hf D its config.json and model.safetensors,
// --save-dir D its lock and step-NNNNNN folders, --profile D its trace-rankN.json. Returns
// the name `file` has there when `file` is one of them ("" otherwise), so that a file
// output aimed at one (--save-params D/model.safetensors --export-hf D) is refused
// instead of one replacing the other.
std::string written_inside(const std::string& flag, const fs::path& dir, const fs::path& file) {
  if (!within(file, dir) || file == dir) return "";
  const fs::path rel = file.lexically_relative(dir);
  const std::string first = rel.begin()->string();
  const bool hit = (flag == "--export-hf" && rel.string() == first && (first == "config.json" || first == "model.safetensors")) ||
                   (flag == "--save-dir" && (first == ".picotron-lock" || first.rfind("step-", 0) == 0)) ||
                   (flag == "--profile" && rel.string() == first && first.rfind("trace-rank", 0) == 0);
  return hit ? rel.string() : "";
}
}  // namespace

std::vector<std::string> output_problems(const TrainConfig& cfg) {
  std::vector<std::string> problems;
  // Paths compared where they really lead (real_path: through symlinks and "dir/."). Two
  // outputs on one path would overwrite each other; an output on an input, or on a file
  // inside an input folder, would destroy it. --save-dir may be the --resume folder: a
  // run goes on in place.
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"--eval", cfg.eval},       {"--init-from", cfg.init_from}, {"--resume", cfg.resume},
      {"--data", cfg.data},       {"--val-data", cfg.val_data},   {"--tokenizer", cfg.tokenizer}};
  std::vector<std::tuple<std::string, fs::path, std::string>> seen;  // (flag, real path, as given) of the outputs so far
  for (const auto& [flag, path, directory] :
       {std::tuple{"--metrics-file", cfg.metrics_file, false}, {"--memory-trace", cfg.memory_trace, false},
        {"--save-params", cfg.save_params, false}, {"--pp-trace", cfg.pp_trace, false},
        {"--eval-logits", cfg.eval_logits, false}, {"--save-dir", cfg.save_dir, true},
        {"--export-hf", cfg.export_hf, true}, {"--profile", cfg.profile, true}}) {
    if (path.empty()) continue;
    if (auto p = output_path_problem(flag, path, directory, cfg.data); !p.empty()) {
      problems.push_back(p);
      continue;
    }
    const fs::path out = real_path(path);
    std::error_code ec;
    for (const auto& [input_flag, input] : inputs) {
      if (input.empty() || !fs::exists(input, ec) || (std::string(flag) == "--save-dir" && input_flag == "--resume")) continue;
      const fs::path in = real_path(input);
      if (out == in)
        problems.push_back(std::string(flag) + " " + path + ": is the " + input_flag + " input, which it would overwrite");
      else if (fs::is_directory(in, ec) && within(out, in) && fs::exists(out, ec))
        problems.push_back(std::string(flag) + " " + path + ": is a file of the " + input_flag + " folder " + input +
                           ", which it would overwrite");
    }
    // A --save-dir that holds finished checkpoints belongs to the run they came from: only
    // that run, resumed from one of them, goes on saving there (else pruning would delete
    // this run's checkpoints in favour of the other's, and --resume D would continue the other).
    if (std::string(flag) == "--save-dir" && fs::is_directory(out, ec)) {
      const auto steps = checkpoint_format::finished_steps(out);
      if (!steps.empty() && (cfg.resume.empty() || !within(real_path(cfg.resume), out)))
        problems.push_back("--save-dir " + path + ": holds the checkpoints of another run (newest " +
                           checkpoint_format::step_name(steps.back()) + "): give another folder, or --resume " + path +
                           " to continue that run");
    }
    for (const auto& [other_flag, other, other_given] : seen)
      if (out == other)
        problems.push_back(std::string(flag) + " " + path + ": is also the " + other_flag +
                           " path; give each output its own file");
      else if (const std::string f = written_inside(other_flag, other, out); !f.empty())
        problems.push_back(std::string(flag) + " " + path + ": is the file " + f + " that " + other_flag + " " +
                           other_given + " writes; give each output its own file");
      else if (const std::string f = written_inside(flag, out, other); !f.empty())
        problems.push_back(other_flag + " " + other_given + ": is the file " + f + " that " + flag + " " + path +
                           " writes; give each output its own file");
    seen.emplace_back(flag, out, path);
  }
  return problems;
}

std::vector<std::string> machine_problems(const TrainConfig& cfg) {
  std::vector<std::string> problems;
  if (cfg.device == "cuda" && !torch::cuda::is_available())
    problems.push_back("--device cuda: no CUDA device is visible to this process");
  if (cfg.kernels == "fused" && !kFusedKernelsBuilt)
    problems.push_back("--kernels fused: this build has no CUDA kernels (configure with a CUDA toolkit and a CUDA "
                       "LibTorch), use --kernels aten");
  if (cfg.zero_offload && !torch::cuda::is_available())  // --device auto on a CPU machine
    problems.push_back("--zero-offload moves the optimizer from the GPU to the CPU: it needs a GPU, and none is "
                       "visible to this process");
  return problems;
}

GpuFacts gpu_facts(int local_rank) {
  GpuFacts gpu;
#ifdef PICOTRON_WITH_CUDA
  int count = 0;
  cudaDeviceProp p{};
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return gpu;
  if (cudaGetDeviceProperties(&p, local_rank % count) != cudaSuccess) return gpu;
  gpu = {true, p.major, p.minor, p.name};
#else
  (void)local_rank;
#endif
  return gpu;
}

std::string fp8_device_problem(const TrainConfig& cfg, const GpuFacts& gpu) {
  const bool on_gpu = cfg.device == "cuda" || (cfg.device == "auto" && gpu.visible);
  if (!cfg.fp8 || !on_gpu || !gpu.visible) return "";  // (--device cuda without a GPU: machine_problems)
  const std::string p = fp8::device_problem(gpu.major, gpu.minor, gpu.name);
  return p.empty() || cfg.device == "cuda" ? p : p + " (--device auto chose this GPU; --device cpu emulates fp8)";
}

std::string memory_problem(const TrainConfig& cfg, const LaunchInfo& launch, const ShardPlanOf& shard_plan_of) {
  const bool on_cpu = cfg.device == "cpu" || (cfg.device == "auto" && !torch::cuda::is_available());
  TrainConfig resolved = cfg;
  if (!cfg.dtype_given) resolved.dtype = on_cpu ? Precision::kFP32 : Precision::kBF16;  // what run() picks
  resolved.device = on_cpu ? "cpu" : "cuda";  // (--kernels auto's choice follows the device)
  const MeshCoords here = coords_of(MeshShape{cfg.dp, cfg.pp, cfg.cp, cfg.tp}, launch.rank);
  const double need = estimate_memory(resolved, here, shard_plan_of(here)).peak_bytes();
  double available = 0;
  std::string where;
  if (on_cpu) {  // the node's memory, shared by its ranks
    const int ranks_here = std::max(1, launch.local_world_size);
    available = double(available_memory_bytes()) / ranks_here;
    where = "(MemAvailable / " + std::to_string(ranks_here) + " rank(s) on this node)";
  } else {  // one GPU per rank
    available = gpu_free_bytes(launch.local_rank);
    where = "(free on its GPU, cudaMemGetInfo)";
  }
  if (available <= 0 || need <= available) return "";
  return "this rank needs about " + human_bytes(need) + " of memory (--dry-run shows where it goes) but " +
         human_bytes(available) + " is available to it " + where +
         ": lower --micro-batch-size or --seq-len, use --recompute, --zero or more --tp/--pp ranks, or a smaller --model";
}

std::string out_of_memory_message(const std::string& error, const TrainConfig& cfg) {
  const bool oom = error.find("out of memory") != std::string::npos ||       // CUDA, c10::OutOfMemoryError
                   error.find("can't allocate memory") != std::string::npos ||  // the CPU allocator
                   error.find("std::bad_alloc") != std::string::npos;
  if (!oom) return "";
  // What failed: "you tried to allocate 67108864 bytes" (CPU) or "Tried to allocate 2.00 GiB" (CUDA).
  std::string what = error.substr(0, error.find('\n'));
  if (const auto at = error.find("to allocate "); at != std::string::npos) {
    const auto rest = error.substr(at + 12);
    if (const auto bytes = rest.find(" bytes"); bytes != std::string::npos && bytes > 0 &&
                                                 rest.find_first_not_of("0123456789") == bytes)
      what = "an allocation of " + human_bytes(std::stod(rest.substr(0, bytes))) + " failed";
    else
      what = "an allocation of " + rest.substr(0, rest.find_first_of(".\n", rest.find(' ') + 1)) + " failed";
  }
  return "out of memory on " + cfg.device + ": " + what + "; the run needed more than --dry-run's estimate "
         "or than was free: lower --micro-batch-size (" + std::to_string(cfg.micro_batch_size) + ") or --seq-len (" +
         std::to_string(cfg.seq_len) + "), use --recompute full, --zero or more --tp/--pp ranks";
}

std::vector<std::string> run_problems(const TrainConfig& cfg, const LaunchInfo& launch, const ShardPlanOf& shard_plan_of,
                                      DataSources& data) {
  std::vector<std::string> problems = output_problems(cfg);  // every output writable: now, not after the run
  if (problems.empty() && !cfg.eval.empty()) {  // read after training: a missing one or a FIFO is named now
    try {
      open_input_file("--eval " + cfg.eval, cfg.eval);
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  if (problems.empty()) problems = machine_problems(cfg);    // a GPU, the CUDA kernels, where the flags need them
  if (problems.empty() && cfg.fp8)                           // --fp8: fp8 tensor cores on this rank's GPU
    if (auto p = fp8_device_problem(cfg, gpu_facts(launch.local_rank)); !p.empty()) problems.push_back(p);
  if (problems.empty())  // the memory this rank will need, before allocating any of it
    if (auto p = memory_problem(cfg, launch, shard_plan_of); !p.empty()) problems.push_back(p);
  if (problems.empty()) {
    try {
      data.train = open_data(cfg.data, cfg.llama.vocab_size, cfg.seq_len);
      if (!cfg.val_data.empty()) data.val = open_data(cfg.val_data, cfg.llama.vocab_size, cfg.seq_len);
    } catch (const std::exception& e) {
      std::string message = e.what();  // open_data names "--data"; the validation tokens are --val-data's
      if (data.train && message.rfind("--data ", 0) == 0) message.replace(0, 6, "--val-data");
      problems.push_back(message);
    }
  }
  return problems;
}

namespace {
bool debugger_attached() {  // /proc/self/status: "TracerPid:\t0" when no debugger is attached
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("TracerPid:", 0) == 0) return std::stol(line.substr(10)) != 0;
  return false;
}
}  // namespace

void wait_for_debugger(const TrainConfig& cfg, int rank) {
  if (cfg.wait_for_debugger != "all" && cfg.wait_for_debugger != std::to_string(rank)) return;
#ifdef PR_SET_PTRACER
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // any debugger of this user may attach
#endif
  std::cerr << "[rank " << rank << "] pid " << ::getpid() << " waits for a debugger: gdb -p " << ::getpid()
            << " (or VS Code's \"attach to a rank\"), then continue" << std::endl;
  while (!debugger_attached()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cerr << "[rank " << rank << "] debugger attached" << std::endl;
}

torch::Device choose_device(const TrainConfig& cfg, const Distributed& dist) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(cfg.threads > 0 ? cfg.threads : std::max(1, cores / dist.local_world_size()));
  return cfg.device == "cuda" ? torch::Device(torch::kCUDA, dist.select_cuda_device()) : torch::Device(torch::kCPU);
}

}  // namespace picotron
