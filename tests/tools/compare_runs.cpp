// compare_runs — the judge of the equivalence contract.
//
//   compare_runs REF.jsonl RUN.jsonl REF.params RUN.params RTOL
//
// Passes when every step's loss and grad norm (and validation loss, on the steps that
// have one: --val-data) of RUN match REF within relative error RTOL, a mixture of experts'
// routing metric (tokens_per_expert: the global batch's tokens per expert) is the same counts
// on every step, and every final
// parameter matches: max |run - ref| <= RTOL * max |ref| per
// tensor. Prints the worst errors either way.
//
// It reads the parameter files (safetensors, runtime/checkpoint/safetensors.h) itself, in double,
// without LibTorch: the suite runs it once per equivalence case (about 200 times), and
// loading LibTorch costs each process more than the comparison.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;  // every element, widened to double
};

double widen(const char* p, const std::string& dtype) {  // one little-endian element
  if (dtype == "F64") { double v; std::memcpy(&v, p, 8); return v; }
  if (dtype == "F32") { float v; std::memcpy(&v, p, 4); return v; }
  if (dtype == "BF16") {  // the top half of a float32
    uint32_t bits = uint32_t(uint8_t(p[0])) << 16 | uint32_t(uint8_t(p[1])) << 24;
    float v; std::memcpy(&v, &bits, 4); return v;
  }
  if (dtype == "F16") {  // sign, 5 exponent bits (bias 15), 10 mantissa bits
    const unsigned h = unsigned(uint8_t(p[0])) | unsigned(uint8_t(p[1])) << 8;
    const int e = (h >> 10) & 31, m = h & 1023;
    const double mag = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -mag : mag;
  }
  throw std::runtime_error("parameter dtype " + dtype + " is not compared (F64, F32, BF16, F16 are)");
}

// A safetensors file: an 8-byte header length, the JSON header, then the raw data.
std::map<std::string, Tensor> read_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open parameter file " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  if (bytes.size() < 8 || (std::memcpy(&n, bytes.data(), 8), n > bytes.size() - 8))
    throw std::runtime_error(path + ": not a safetensors file");
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const char* data = bytes.data() + 8 + n;
  const size_t data_size = bytes.size() - 8 - n;
  const std::map<std::string, size_t> width = {{"F64", 8}, {"F32", 4}, {"BF16", 2}, {"F16", 2}};
  std::map<std::string, Tensor> out;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = entry.at("dtype");
    const size_t begin = entry.at("data_offsets")[0], end = entry.at("data_offsets")[1];
    Tensor t{entry.at("shape").get<std::vector<int64_t>>(), {}};
    const size_t w = width.count(dtype) ? width.at(dtype) : 1;
    if (end < begin || end > data_size || (end - begin) % w)
      throw std::runtime_error(path + ": tensor " + name + "'s offsets fall outside the file");
    for (size_t at = begin; at < end; at += w) t.values.push_back(widen(data + at, dtype));
    out.emplace(name, std::move(t));
  }
  return out;
}

struct StepMetrics {
  double loss, grad_norm;
  bool has_val;  // --val-data: a validation loss on this step
  double val_loss;
  std::vector<double> tokens_per_expert;  // a mixture of experts: the step's routing, else empty
};

double field(const std::string& line, const std::string& key) {
  const auto j = nlohmann::json::parse(line);
  if (!j.contains(key)) throw std::runtime_error("metrics line lacks \"" + key + "\": " + line);
  return j[key].is_null() ? NAN : j[key].get<double>();  // null: non-finite
}

std::vector<StepMetrics> read_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open metrics file " + path);
  std::vector<StepMetrics> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      const bool has_val = j.contains("val_loss");
      out.push_back({field(line, "loss"), field(line, "grad_norm"), has_val, has_val ? field(line, "val_loss") : NAN,
                     j.value("tokens_per_expert", std::vector<double>{})});
    }
  return out;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(a), 1e-300); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: compare_runs REF.jsonl RUN.jsonl REF.params RUN.params RTOL\n";
    return 2;
  }
  try {
    const double rtol = std::stod(argv[5]);
    const auto ref = read_metrics(argv[1]), run = read_metrics(argv[2]);
    int failures = 0;
    if (ref.size() != run.size() || ref.empty()) {
      std::cout << "FAIL: " << ref.size() << " reference steps vs " << run.size() << " steps\n";
      return 1;
    }
    double worst_loss = 0, worst_norm = 0;
    for (size_t s = 0; s < ref.size(); ++s) {
      const double el = rel(ref[s].loss, run[s].loss), en = rel(ref[s].grad_norm, run[s].grad_norm);
      worst_loss = std::max(worst_loss, el);
      worst_norm = std::max(worst_norm, en);
      std::cout << "step " << s + 1 << ": loss " << ref[s].loss << " vs " << run[s].loss << " (rel " << el
                << "), grad norm rel " << en << (el > rtol || en > rtol ? "  <-- FAIL" : "") << "\n";
      failures += (el > rtol) + (en > rtol);
      if (ref[s].has_val != run[s].has_val) {
        std::cout << "step " << s + 1 << ": a validation loss in only one of the runs  <-- FAIL\n";
        ++failures;
      } else if (ref[s].has_val) {
        const double ev = rel(ref[s].val_loss, run[s].val_loss);
        std::cout << "step " << s + 1 << ": val loss " << ref[s].val_loss << " vs " << run[s].val_loss << " (rel " << ev
                  << ")" << (ev > rtol ? "  <-- FAIL" : "") << "\n";
        failures += ev > rtol;
      }
      if (ref[s].tokens_per_expert != run[s].tokens_per_expert) {  // counts: equal, whatever the mesh
        std::cout << "step " << s + 1 << ": tokens per expert differ (the routing metric of the step line)  <-- FAIL\n";
        ++failures;
      }
    }
    const auto p_ref = read_params(argv[3]), p_run = read_params(argv[4]);
    double worst_param = 0;
    std::string worst_name;
    for (const auto& [name, a] : p_ref) {
      const auto it = p_run.find(name);
      if (it == p_run.end() || it->second.shape != a.shape) {
        std::cout << "FAIL: parameter " << name << " missing or of another shape\n";
        ++failures;
        continue;
      }
      double scale = 0, diff = 0;  // max |ref|, max |run - ref|
      for (size_t i = 0; i < a.values.size(); ++i) {
        scale = std::max(scale, std::abs(a.values[i]));
        const double d = std::abs(it->second.values[i] - a.values[i]);
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      }
      const double err = diff / std::max(scale, 1e-300);
      if (err > worst_param) { worst_param = err; worst_name = name; }
      if (err > rtol) { std::cout << "FAIL: parameter " << name << " rel error " << err << "\n"; ++failures; }
    }
    if (p_run.size() != p_ref.size()) { std::cout << "FAIL: parameter count differs\n"; ++failures; }
    std::cout << "worst relative error: loss " << worst_loss << ", grad norm " << worst_norm << ", parameters "
              << worst_param << " (" << worst_name << ", " << p_ref.size() << " tensors); tolerance " << rtol << "\n";
    std::cout << (failures ? "EQUIVALENCE FAILED" : "EQUIVALENT") << "\n";
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "compare_runs: " << e.what() << "\n";
    return 2;
  }
}
