// runtime/checkpoint/safetensors.h — the safetensors file format, read and written by hand, so
// that checkpoints and parameter files open in Python (`safetensors.torch.load_file`)
// and Hugging Face's files open here.
//
//   bytes 0-7   N: the header's length, uint64 little-endian
//   bytes 8..   the header: JSON {"name": {"dtype": "F32", "shape": [2, 3],
//               "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "text"}}
//               (padded with spaces to a multiple of 8)
//   then        the raw little-endian data; offsets count from the end of the header
//
// Every read checks what it trusts: the header length against the file size, the JSON,
// each tensor's offsets against the data there is and against its dtype x shape.
//
// Test: build/tests/unit_tests "[safetensors]"
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace picotron {

// Writes `tensors` (moved to the CPU, made contiguous) in the given order, with string
// metadata. Throws one line naming the path if it cannot.
// Written to "<path>.tmp" and renamed when whole (runtime/output/output_file.h); `flag` names
// the file in errors.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, const std::string& flag = "writing");

// An open safetensors file: the header is read and checked at construction; tensors are
// read one at a time, so a rank reads only what it needs.
class SafetensorsFile {
 public:
  struct Entry {
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // byte offsets in the data section
  };
  explicit SafetensorsFile(const std::string& path);  // throws "<path>: <problem>"
  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  torch::Tensor read(const std::string& name) const;  // [shape], its dtype, CPU

 private:
  std::string path_;
  int64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// "F32", "BF16", ... and back (throws naming the dtype it does not know).
std::string safetensors_dtype(torch::ScalarType t);
torch::ScalarType scalar_type_of_safetensors(const std::string& name);

// FNV-1a, 64 bits (Fowler-Noll-Vo: h = basis; for each byte h = (h ^ byte) * 0x100000001b3,
// with the standard offset basis 0xcbf29ce484222325 = 14695981039346656037), of a tensor's
// bytes (contiguous CPU): the checksums of checkpoints, as any FNV-1a 64 implementation
// computes them.
constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
// Checkpoints saved before 2026-11-28 used 1469598103934665603 (the standard basis with its
// last digit lost): their sums are still accepted on reading, and named as such.
constexpr uint64_t kOlderFnvOffsetBasis = 1469598103934665603ULL;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t basis = kFnvOffsetBasis);
uint64_t fnv1a64(const torch::Tensor& t, uint64_t basis = kFnvOffsetBasis);
// Which sum `want` (16 hex digits) is of these bytes: the standard one, the older one, or none.
enum class SumMatch { kNone, kStandard, kOlder };
SumMatch match_fnv1a64(const void* data, size_t bytes, const std::string& want);
SumMatch match_fnv1a64(const torch::Tensor& t, const std::string& want);

}  // namespace picotron
