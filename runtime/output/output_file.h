// runtime/output/output_file.h — how every output file of a run is written: never half.
//
//   start-up   output_path_problem(): the path is not empty, not a directory, device or
//              FIFO, its directory exists and is writable (a directory output: the nearest
//              existing ancestor, since it is created with its parents), and it is not the
//              --data file
//              (all checked before any training, on every rank)
//   writing    OutputFile writes to "<path>.tmp"; every write(2) is checked, and a
//              failure (a full disk: ENOSPC; a size limit: EFBIG) throws one line naming
//              the flag, the path and the OS error, after removing the partial file
//   the end    commit(): fsync, close, rename to <path>. A crash before it leaves the
//              previous <path> (if any) untouched and a "<path>.tmp" behind.
//
// Test: ctest -L reliability   (tests/cmake/reliability_tests.cmake)
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace picotron {

// One line naming the flag and the problem; empty when `path` can be written.
// `directory`: the output is a directory (--save-dir, --export-hf) rather than a file.
std::string output_path_problem(const std::string& flag, const std::string& path, bool directory,
                                const std::string& data_path);

class OutputFile {
 public:
  OutputFile() = default;  // inactive: writes nothing
  OutputFile(std::string flag, std::string path);  // opens "<path>.tmp"; throws one line
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  ~OutputFile();  // never throws; closes an uncommitted file (its .tmp stays, for a look)

  bool active() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  void write(const void* data, size_t bytes);  // all of it, or a throw
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();  // fsync + close + rename into place; throws one line

 private:
  [[noreturn]] void fail(const std::string& what, int error);
  std::string flag_, path_;
  int fd_ = -1;
};

// A whole file at once: OutputFile + write + commit.
void write_file(const std::string& flag, const std::string& path, const std::string& contents);

// An input file (a JSON config, index, manifest or --eval batch) opened for reading. A
// missing file, or one that is not a regular file, throws one line starting with `name`:
// opening a FIFO would block until some writer appears, past every timeout. So does a
// file over 1 GiB (these are JSON inputs: parsing one that size would take the run's memory).
std::ifstream open_input_file(const std::string& name, const std::string& path);

// JSON from a file nobody checked (a config, index, manifest, tokenizer, --eval batch):
// nested at most kMaxJsonDepth deep. A deeper document throws one line starting with
// `name` while it is being read, before it is built: printing or freeing a value nested
// a million deep recurses off the stack. Syntax errors throw nlohmann's own exception.
constexpr int kMaxJsonDepth = 64;
nlohmann::json parse_json(std::istream& in, const std::string& name);
nlohmann::json parse_json(const std::string& text, const std::string& name);

}  // namespace picotron
