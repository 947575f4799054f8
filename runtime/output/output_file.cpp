// runtime/output/output_file.cpp — see output_file.h.
#include "runtime/output/output_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace picotron {

namespace fs = std::filesystem;

std::string output_path_problem(const std::string& flag, const std::string& path, bool directory,
                                const std::string& data_path) {
  const std::string name = flag + " " + path;
  if (path.empty()) return flag + ": empty path";
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (fs::exists(status)) {
    if (directory && !fs::is_directory(status)) return name + ": exists and is not a directory";
    if (!directory && fs::is_directory(status)) return name + ": is a directory (give a file path)";
    if (!directory && !fs::is_regular_file(status))
      return name + ": not a regular file (a device, FIFO or socket): give a file path";
    if (!directory && !data_path.empty() && fs::exists(data_path, ec) && fs::equivalent(path, data_path, ec))
      return name + ": is the --data file, which it would overwrite";
  }
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (directory)  // a directory output is created with its missing parents: the nearest existing one counts
    while (!fs::exists(parent, ec) && parent.has_parent_path() && parent.parent_path() != parent) parent = parent.parent_path();
  if (!fs::is_directory(parent, ec))
    return name + ": " + (fs::exists(parent, ec) ? parent.string() + " is not a directory"
                                                 : "directory " + parent.string() + " does not exist");
  if (::access(parent.c_str(), W_OK) != 0)
    return name + ": directory " + parent.string() + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

OutputFile::OutputFile(std::string flag, std::string path) : flag_(std::move(flag)), path_(std::move(path)) {
  const std::string tmp = path_ + ".tmp";
  // A stale (or planted) <path>.tmp goes first; unlink removes a symlink itself, never
  // what it points to. Then the file is created fresh and exclusively, not through a
  // symlink: a link planted in between fails the open instead of redirecting the write.
  ::unlink(tmp.c_str());
  fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(flag_ + " " + path_ + ": cannot create " + tmp + ": " + std::strerror(errno));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : flag_(std::move(other.flag_)), path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    flag_ = std::move(other.flag_), path_ = std::move(other.path_), fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::fail(const std::string& what, int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink((path_ + ".tmp").c_str());  // no partial file is left to be mistaken for a whole one
  throw std::runtime_error(flag_ + " " + path_ + ": " + what + ": " + std::strerror(error));
}

void OutputFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) return;
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed", n < 0 ? errno : ENOSPC);
    p += n, bytes -= size_t(n);
  }
}

void OutputFile::commit() {
  if (fd_ < 0) return;
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("write failed (fsync)", errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("write failed (close)", errno);
  }
  fd_ = -1;
  if (::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) fail("cannot rename the finished file into place", errno);
}

void write_file(const std::string& flag, const std::string& path, const std::string& contents) {
  OutputFile f(flag, path);
  f.write(contents);
  f.commit();
}

std::ifstream open_input_file(const std::string& name, const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);  // follows symlinks
  if (!fs::exists(status) && fs::is_symlink(fs::symlink_status(path, ec)))
    throw std::runtime_error(name + ": a symbolic link to " + fs::read_symlink(path, ec).string() + ", which does not exist");
  if (!fs::exists(status)) throw std::runtime_error(name + ": no such file");
  if (!fs::is_regular_file(status)) throw std::runtime_error(name + ": not a regular file (a FIFO, device, socket or directory)");
  // The JSON inputs are configs, manifests, tokenizers and small batches: one past 1 GiB
  // is not one of them, and parsing it would take the memory of the run.
  if (fs::file_size(path, ec) > (uintmax_t(1) << 30))
    throw std::runtime_error(name + ": " + std::to_string(fs::file_size(path, ec) >> 20) + " MiB, more than the 1 GiB a JSON input may have");
  std::ifstream in(path);
  if (!in) throw std::runtime_error(name + ": cannot open for reading: " + std::strerror(errno));
  return in;
}

namespace {
template <typename Input>
nlohmann::json parse_bounded(Input&& input, const std::string& name) {
  const auto no_deeper = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kMaxJsonDepth)
      throw std::runtime_error(name + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (refused)");
    return true;
  };
  return nlohmann::json::parse(std::forward<Input>(input), no_deeper);
}
}  // namespace

nlohmann::json parse_json(std::istream& in, const std::string& name) { return parse_bounded(in, name); }
nlohmann::json parse_json(const std::string& text, const std::string& name) { return parse_bounded(text, name); }

}  // namespace picotron
