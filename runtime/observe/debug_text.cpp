// runtime/observe/debug_text.cpp — see debug_text.h.
// The line scripts/picotron_gdb.py prints for a tensor in gdb, as the program itself
// writes it: the printer reads the same fields from memory (it calls nothing in the
// program), and tests/tools/gdb_tensor_demo.cpp prints this text beside each tensor gdb prints,
// so that debug.gdb_tensor_printer compares the two line by line.
#include "runtime/observe/debug_text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <sstream>

namespace picotron {

std::string tensor_text(const at::Tensor& t, int values) {
  if (!t.defined()) return "undefined tensor";
  std::ostringstream out;
  const auto list = [&](at::IntArrayRef v, const char* open, const char* close) {
    out << open;
    for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
    out << close;
  };
  list(t.sizes(), "[", "]");
  out << " " << c10::toString(t.scalar_type()) << " " << t.device().str();
  if (t.layout() == at::kStrided) {
    out << " strides ";
    list(t.strides(), "(", ")");
  }
  if (t.requires_grad()) out << " requires_grad";
  at::NoGradGuard no_grad;  // reading the values must not touch any graph
  const int64_t n = std::min<int64_t>(values, t.numel());
  if (t.layout() == at::kStrided && n > 0) {
    const auto first = t.reshape({-1}).narrow(0, 0, n).to(at::kCPU, at::kDouble);
    out << " {";
    char buf[32];
    for (int64_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof buf, "%.4g", first[i].item<double>());
      out << (i ? ", " : "") << buf;
    }
    out << (t.numel() > n ? ", ...}" : "}");
  }
  return out.str();
}

}  // namespace picotron
