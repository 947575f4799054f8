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
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"

namespace {

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
    const auto p_ref = picotron::load_tensors(argv[3]), p_run = picotron::load_tensors(argv[4]);
    double worst_param = 0;
    std::string worst_name;
    for (const auto& [name, a] : p_ref) {
      const auto it = p_run.find(name);
      if (it == p_run.end() || !it->second.sizes().equals(a.sizes())) {
        std::cout << "FAIL: parameter " << name << " missing or of another shape\n";
        ++failures;
        continue;
      }
      const double scale = a.abs().max().item<double>();
      const double err = (it->second.to(a.scalar_type()) - a).abs().max().item<double>() / std::max(scale, 1e-300);
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
