// runtime/checkpoint/safetensors.cpp — see safetensors.h.
#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runtime/output/output_file.h"
#include "picotron/dtype.h"
#include "picotron/format.h"

namespace picotron {

namespace {

const std::vector<std::pair<std::string, torch::ScalarType>>& dtype_names() {
  static const std::vector<std::pair<std::string, torch::ScalarType>> names = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"BF16", torch::kBFloat16}, {"F16", torch::kFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},     {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};
  return names;
}


}  // namespace

std::string safetensors_dtype(torch::ScalarType t) {
  for (const auto& [name, type] : dtype_names())
    if (type == t) return name;
  throw std::runtime_error(std::string("safetensors: no name for dtype ") + c10::toString(t));
}

torch::ScalarType scalar_type_of_safetensors(const std::string& name) {
  for (const auto& [n, type] : dtype_names())
    if (n == name) return type;
  throw std::runtime_error("unsupported safetensors dtype '" + name + "'");
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t basis) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = basis;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;  // the 64-bit FNV prime
  return h;
}

uint64_t fnv1a64(const torch::Tensor& t, uint64_t basis) {
  TORCH_CHECK(t.is_contiguous() && t.device().is_cpu(), "fnv1a64: a contiguous CPU tensor");
  return fnv1a64(t.data_ptr(), t.nbytes(), basis);
}

SumMatch match_fnv1a64(const void* data, size_t bytes, const std::string& want) {
  auto text = [](uint64_t v) {
    char s[24];
    std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
    return std::string(s);
  };
  if (text(fnv1a64(data, bytes)) == want) return SumMatch::kStandard;
  if (text(fnv1a64(data, bytes, kOlderFnvOffsetBasis)) == want) return SumMatch::kOlder;
  return SumMatch::kNone;
}

SumMatch match_fnv1a64(const torch::Tensor& t, const std::string& want) {
  TORCH_CHECK(t.is_contiguous() && t.device().is_cpu(), "fnv1a64: a contiguous CPU tensor");
  return match_fnv1a64(t.data_ptr(), t.nbytes(), want);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, const std::string& flag) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const int64_t bytes = int64_t(c.nbytes());
    header[name] = {{"dtype", safetensors_dtype(c.scalar_type())}, {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  OutputFile out(flag, path);
  const uint64_t n = text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = (unsigned char)(n >> (8 * i));  // little-endian
  out.write(length, 8);
  out.write(text);
  for (const auto& c : data) out.write(c.data_ptr(), c.nbytes());
  out.commit();
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw std::runtime_error(path + ": no such file");
  const int64_t size = int64_t(std::filesystem::file_size(path, ec));
  if (ec) throw std::runtime_error(path + ": cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  unsigned char length[8] = {};
  if (size < 8 || !in.read(reinterpret_cast<char*>(length), 8))
    throw std::runtime_error(path + ": truncated: " + std::to_string(size) + " bytes, not even the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  if (n > uint64_t(size - 8))
    throw std::runtime_error(path + ": truncated or not safetensors: the header length says " + std::to_string(n) +
                             " bytes but the file has " + std::to_string(size) + " bytes");
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  data_start_ = 8 + int64_t(n);
  nlohmann::json header;
  try {
    header = parse_json(text, path_ + ": the safetensors header");
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": corrupt header (not JSON): " + std::string(e.what()).substr(0, 120));
  }
  if (!header.is_object()) throw std::runtime_error(path + ": corrupt header (not a JSON object)");
  const int64_t data_size = size - data_start_;
  for (const auto& [name, value] : header.items()) {
    try {
      if (name == "__metadata__") {
        for (const auto& [k, v] : value.items()) metadata_[k] = v.get<std::string>();
        continue;
      }
      Entry e;
      e.dtype = scalar_type_of_safetensors(value.at("dtype").get<std::string>());
      e.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<int64_t>>();
      if (offsets.size() != 2) throw std::runtime_error("data_offsets is not [begin, end]");
      e.begin = offsets[0], e.end = offsets[1];
      // A shape that cannot be: a negative dimension, or more bytes than 2^63 (named
      // here, before LibTorch is asked to allocate it).
      int64_t numel = 1, bytes = 0;
      for (int64_t d : e.shape)
        if (d < 0) throw std::runtime_error("impossible shape " + shape_text(e.shape) + ": a negative dimension");
      for (int64_t d : e.shape)
        if (__builtin_mul_overflow(numel, d, &numel))
          throw std::runtime_error("impossible shape " + shape_text(e.shape) + ": more than 2^63 elements");
      if (__builtin_mul_overflow(numel, int64_t(c10::elementSize(e.dtype)), &bytes))
        throw std::runtime_error("impossible shape " + shape_text(e.shape) + ": more than 2^63 bytes");
      if (e.begin < 0 || e.end - e.begin != bytes)
        throw std::runtime_error("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                 ") do not hold its dtype x shape");
      if (e.end > data_size)
        throw std::runtime_error("truncated: its data ends at byte " + std::to_string(data_start_ + e.end) +
                                 " but the file has " + std::to_string(size) + " bytes");
      entries_[name] = e;
    } catch (const std::runtime_error& err) {
      throw std::runtime_error(path + ": tensor '" + name + "': " + err.what());
    } catch (const std::exception& err) {
      throw std::runtime_error(path + ": tensor '" + name + "': corrupt header entry (" +
                               std::string(err.what()).substr(0, 100) + ")");
    }
  }
  // Each tensor has bytes of its own: two that share bytes would load as each other.
  std::vector<std::pair<int64_t, const std::string*>> starts;  // (begin, name) of tensors with bytes
  for (const auto& [name, e] : entries_)
    if (e.end > e.begin) starts.emplace_back(e.begin, &name);
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    const Entry& before = entries_.at(*starts[i - 1].second);
    if (starts[i].first < before.end)
      throw std::runtime_error(path + ": tensors '" + *starts[i - 1].second + "' and '" + *starts[i].second +
                               "' overlap (bytes " + std::to_string(starts[i].first) + " to " + std::to_string(before.end) +
                               " of the data): corrupt or crafted header");
  }
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw std::runtime_error(path_ + ": no tensor '" + name + "'");
  const Entry& e = it->second;
  auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(data_start_ + e.begin);
  if (!in.read(static_cast<char*>(t.data_ptr()), std::streamsize(e.end - e.begin)))
    throw std::runtime_error(path_ + ": tensor '" + name + "': read failed (truncated?)");
  return t;
}

}  // namespace picotron
