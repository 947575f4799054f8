// runtime/debug_text.h — a tensor as one line of text, for a debugger.
//
//   [2, 32, 64] Double cpu strides (2048, 64, 1) {0.0132, -0.871, 0.25, 1.5, -0.003, 0.9, ...}
//
// In gdb a LibTorch tensor is an intrusive pointer to a TensorImpl: nothing a student can
// read. scripts/picotron_gdb.py (a gdb pretty-printer) prints every at::Tensor by calling
// picotron_tensor_text in the stopped process, so `print x` shows the line above. It is
// compiled into build/train (CMakeLists.txt) even though no code calls it.
//
// Test: ctest -L debug   (debug.gdb_tensor_printer: gdb in batch mode on a small program)
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace picotron {

// Shape, dtype, device, strides and the first `values` elements (row-major).
std::string tensor_text(const at::Tensor& t, int values = 6);

}  // namespace picotron

// For the debugger: tensor_text of the at::Tensor at `tensor`, or of the tensor whose
// c10::TensorImpl is at `impl` (what a tensor returned by value, not in memory, still
// shows), in a buffer that the next call overwrites.
extern "C" const char* picotron_tensor_text(const void* tensor);
extern "C" const char* picotron_tensor_impl_text(const void* impl);
