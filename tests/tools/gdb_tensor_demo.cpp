// tests/tools/gdb_tensor_demo.cpp — the program the gdb test stops (tests/scripts/gdb_tensor_printer.sh,
// ctest -L debug): show() receives one tensor after another, and scripts/picotron_gdb.py,
// reading the program's memory, must print each as the program itself does
// (runtime/observe/debug_text.cpp's tensor_text, printed as "want: ..." before each call):
// contiguous, transposed, offset, more than 5 dimensions (sizes kept out of line), every
// dtype the printer reads, requires_grad, undefined, empty, a scalar, sparse.
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "runtime/observe/debug_text.h"

// LibTorch's autograd classes for the demo's DWARF (scripts/picotron_gdb.py's LAYOUT is
// compared with it): a class is written out only where something refers to it.
[[maybe_unused]] torch::autograd::DifferentiableViewMeta* view_meta_for_the_dwarf = nullptr;
[[maybe_unused]] std::optional<torch::autograd::ViewInfo>* view_info_for_the_dwarf = nullptr;

// The stop: gdb prints x here. It only looks at x, so any dtype and layout can come.
__attribute__((noinline)) int64_t show(const at::Tensor& x) { return x.defined() ? x.dim() : -1; }

int main() {
  const at::Tensor x = torch::arange(24, torch::kFloat32).reshape({2, 3, 4});  // [2, 3, 4]
  const at::Tensor t = x.transpose(1, 2);                                       // [2, 4, 3], strides (12, 1, 4)
  const at::Tensor ramp = torch::linspace(-2, 3, 10, torch::kFloat64);          // [10]: -2, -1.444, ...
  const at::Tensor leaf = torch::linspace(0.5, 1, 3, torch::requires_grad());   // requires_grad_ set
  const at::Tensor computed = leaf * 2;                                         // grad_fn set
  at::Tensor view;
  {
    torch::NoGradGuard no_grad;  // as in an autograd Function's forward: a view of its input
    view = computed.reshape({3, 1});  // neither flag: requires_grad through its base
  }
  std::vector<at::Tensor> all = {
      x,
      t,
      x.narrow(/*dim=*/2, /*start=*/1, /*length=*/2),                        // storage_offset 1
      x[1],                                                                     // storage_offset 12
      torch::arange(128, torch::kFloat32).reshape({2, 2, 2, 2, 2, 2, 2}).permute({6, 5, 4, 3, 2, 1, 0}),
      ramp,
      ramp.to(torch::kFloat32),
      ramp.to(torch::kBFloat16),
      ramp.to(torch::kFloat16),
      ramp.to(torch::kFloat8_e4m3fn),
      ramp.to(torch::kFloat8_e5m2),
      ramp.to(torch::kFloat8_e4m3fnuz),
      ramp.to(torch::kFloat8_e5m2fnuz),
      (ramp * 40).to(torch::kInt64),
      (ramp * 40).to(torch::kInt32),
      (ramp * 40).to(torch::kInt16),
      (ramp * 40).to(torch::kInt8),
      (ramp * 40 + 100).to(torch::kUInt8),
      ramp > 0,                                                                 // Bool
      torch::tensor({1.0f, -INFINITY, INFINITY, NAN, -0.0f, 1e-5f, 123456.0f}),
      leaf,
      computed,
      view,
      at::Tensor(),                                                             // undefined
      torch::zeros({0, 3}),                                                     // no elements
      torch::tensor(3.5),                                                       // 0 dimensions
      torch::eye(3).to_sparse(),                                                // no strides
  };
  for (const at::Tensor& each : all) {
    std::printf("want: %s\n", picotron::tensor_text(each).c_str());
    show(each);
  }
  return 0;
}
