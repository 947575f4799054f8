// picotron/data_mapped.cpp — MappedSource (picotron/data.h): token files and text read
// through a memory map, and what guards that map: a file is described from its first
// bytes before it is mapped, checked whole (small corpora) or token by token, and its
// size checked before every batch, with a SIGBUS handler for the instant after.
#include "picotron/data.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace picotron {

namespace fs = std::filesystem;

namespace {

// A file shortened while it is mapped: reading a page past its new end raises SIGBUS,
// which would end the rank with no word. rows() checks the files' sizes before every
// batch (one line naming the file, on every rank that reads it); for the instant between
// that check and the read, this handler names the file and exits. The table is the one
// piece of global state here: a signal handler can reach nothing else.
struct MappedRange {
  const char* begin = nullptr;
  size_t bytes = 0;
  char path[512] = {};
};
MappedRange g_mapped[1024];
volatile sig_atomic_t g_mapped_count = 0;

void on_sigbus(int, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  const char* name = "a memory-mapped --data file";
  for (int i = 0; i < g_mapped_count; ++i)
    if (at >= g_mapped[i].begin && at < g_mapped[i].begin + g_mapped[i].bytes) name = g_mapped[i].path;
  const char* parts[] = {"error: --data ", name, ": the file changed under the run (shortened?): reading its memory map failed\n"};
  for (const char* part : parts)
    if (::write(2, part, std::strlen(part)) < 0) break;  // (async-signal-safe: write, strlen, _exit)
  ::_exit(1);
}

void watch_mapping(const void* base, size_t bytes, const std::string& path) {
  static const bool installed = [] {
    struct sigaction action = {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    return ::sigaction(SIGBUS, &action, nullptr) == 0;
  }();
  if (!installed || g_mapped_count >= int(sizeof(g_mapped) / sizeof(g_mapped[0]))) return;
  MappedRange& r = g_mapped[g_mapped_count];
  r.begin = static_cast<const char*>(base), r.bytes = bytes;
  std::strncpy(r.path, path.c_str(), sizeof(r.path) - 1);
  g_mapped_count = g_mapped_count + 1;
}

}  // namespace

MappedSource::File MappedSource::describe_file(const std::string& name, bool token_file) {
  const fs::path path(name);
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (fs::is_symlink(fs::symlink_status(path, ec)) && !fs::exists(status))
    throw data_error(name + ": a symbolic link to " + fs::read_symlink(path, ec).string() + ", which does not exist");
  if (fs::is_directory(status)) throw data_error(name + ": is a directory, not a token file");
  if (!fs::is_regular_file(status)) throw data_error(name + ": not a regular file (a FIFO, device or socket)");
  const auto size = int64_t(fs::file_size(path, ec));
  if (ec) throw data_error(name + ": cannot read its size: " + ec.message());
  if (size == 0) throw data_error(name + ": file is empty");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw data_error(name + ": cannot open (" + std::strerror(errno) + ")");
  MappedSource::File f{name, 0, 1, size};
  if (!token_file) return f;  // text
  char head[24] = {};
  in.read(head, std::min<int64_t>(size, 24));
  if (size >= int64_t(sizeof(kTokenFileMagic)) && std::memcmp(head, kTokenFileMagic, sizeof(kTokenFileMagic)) == 0) {
    if (size < kTokenFileHeaderBytes) throw data_error(name + ": truncated header (" + std::to_string(size) + " bytes)");
    uint32_t width = 0;
    uint64_t count = 0;
    std::memcpy(&width, head + 8, 4);
    std::memcpy(&count, head + 16, 8);
    if (width != 2 && width != 4) throw data_error(name + ": bytes per token is " + std::to_string(width) + ", expected 2 or 4");
    const uint64_t data_bytes = uint64_t(size - kTokenFileHeaderBytes);
    if (count > data_bytes / width || count * width != data_bytes)  // (no overflow: count is checked first)
      throw data_error(name + ": truncated or corrupt: header says " + std::to_string(count) + " tokens of " +
                       std::to_string(width) + " bytes but the file has " + std::to_string(size) + " bytes");
    if (count == 0) throw data_error(name + ": holds no tokens");
    return {name, kTokenFileHeaderBytes, int(width), int64_t(count)};
  }
  if (size % 2 != 0) throw data_error(name + ": truncated: raw uint16 file has an odd size (" + std::to_string(size) + " bytes)");
  return {name, 0, 2, size / 2};  // nanoGPT: headerless little-endian uint16
}

MappedSource::MappedSource(const std::vector<File>& files, int64_t vocab_size, std::string description)
    : vocab_size_(vocab_size), description_(std::move(description)) {
  for (const auto& f : files) {
    const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw data_error(f.path + ": cannot open (" + std::strerror(errno) + ")");
    const size_t bytes = size_t(f.header_bytes + f.count * f.width);
    void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);  // the mapping stays
    if (base == MAP_FAILED) throw data_error(f.path + ": cannot map it into memory (" + std::strerror(error) + ")");
    ::madvise(base, bytes, MADV_RANDOM);  // windows at random offsets: no read-ahead
    watch_mapping(base, bytes, f.path);
    maps_.push_back({f, base, bytes});
    first_token_.push_back(total_);
    total_ += f.count;
  }
  // A corpus small enough is checked whole now (every token below the vocabulary); a
  // larger one token by token as windows are read, so that opening it reads nothing.
  if (total_ <= (int64_t(1) << 26))
    for (int64_t i = 0; i < total_; ++i) token(i);
  description_ += " (" + std::to_string(total_) + " tokens, memory-mapped)";
}

MappedSource::~MappedSource() {
  for (const auto& m : maps_) ::munmap(m.base, m.bytes);
}

size_t MappedSource::file_of(int64_t i) const {
  return size_t(std::upper_bound(first_token_.begin(), first_token_.end(), i) - first_token_.begin()) - 1;
}

int64_t MappedSource::token(int64_t i) const {
  const size_t k = file_of(i);
  const Mapped& m = maps_[k];
  const auto* p = static_cast<const unsigned char*>(m.base) + m.file.header_bytes + (i - first_token_[k]) * m.file.width;
  int64_t t = 0;
  if (m.file.width == 1) t = p[0];
  else if (m.file.width == 2) { uint16_t v; std::memcpy(&v, p, 2); t = v; }
  else { uint32_t v; std::memcpy(&v, p, 4); t = v; }
  if (t >= vocab_size_)
    throw data_error(m.file.path + ": holds token " + std::to_string(t) + " (token " + std::to_string(i - first_token_[k]) +
                     " of the file) but --vocab-size is " + std::to_string(vocab_size_));
  return t;
}

torch::Tensor MappedSource::rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row,
                                 int64_t num_rows, int64_t row_len) const {
  auto starts = window_starts(seed, step, total_, row_len, global_rows);  // [G]
  auto out = torch::empty({num_rows, row_len}, torch::kInt64);           // [rows, S+1]
  auto o = out.accessor<int64_t, 2>();
  auto s = starts.accessor<int64_t, 1>();
  // The files these windows read (a window may span several) must still be as long as
  // when they were mapped: a read past a file's new end would raise SIGBUS.
  std::vector<bool> checked(maps_.size(), false);
  for (int64_t r = 0; r < num_rows; ++r)
    for (size_t k = file_of(s[first_row + r]); k <= file_of(s[first_row + r] + row_len - 1); ++k) {
      if (checked[k]) continue;
      checked[k] = true;
      struct stat now {};
      const bool there = ::stat(maps_[k].file.path.c_str(), &now) == 0;
      if (!there || size_t(now.st_size) < maps_[k].bytes)
        throw data_error(maps_[k].file.path + ": the file changed under the run (now " +
                         (there ? std::to_string(now.st_size) + " bytes" : std::string("gone")) + ", mapped " +
                         std::to_string(maps_[k].bytes) + "): give it back or restart");
    }
  for (int64_t r = 0; r < num_rows; ++r)
    for (int64_t j = 0; j < row_len; ++j) o[r][j] = token(s[first_row + r] + j);
  return out;
}

}  // namespace picotron
