// tests/gdb_tensor_demo.cpp — the program the gdb test stops (tests/gdb_tensor_printer.sh,
// ctest -L debug): show() receives a contiguous tensor, then a transposed (strided) one,
// and scripts/picotron_gdb.py must print each as one readable line.
#include <cstdio>

#include <torch/torch.h>

#include "runtime/debug_text.h"

__attribute__((noinline)) double show(const at::Tensor& x) { return x.sum().item<double>(); }

int main() {
  const at::Tensor x = torch::arange(24, torch::kFloat32).reshape({2, 3, 4});  // [2, 3, 4]
  const at::Tensor t = x.transpose(1, 2);                                       // [2, 4, 3], strides (12, 1, 4)
  std::printf("%g\n", show(x) + show(t));
  std::printf("%s\n", picotron::tensor_text(t).c_str());  // the same line without a debugger
  return 0;
}
