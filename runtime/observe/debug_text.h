// runtime/observe/debug_text.h — a tensor as one line of text, for a debugger.
//
//   [2, 32, 64] Double cpu strides (2048, 64, 1) {0.0132, -0.871, 0.25, 1.5, -0.003, 0.9, ...}
//
// In gdb a LibTorch tensor is an intrusive pointer to a TensorImpl: nothing a student can
// read. scripts/picotron_gdb.py (a gdb pretty-printer) prints the line above by reading the
// tensor from the stopped program's memory, calling nothing in it. This is the same line
// written in C++: debug.gdb_tensor_printer compares the two on a small program
// (tests/tools/gdb_tensor_demo.cpp). build/train does not link it.
//
// Test: ctest -L debug   (debug.gdb_tensor_printer: gdb in batch mode on a small program)
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

namespace picotron {

// Shape, dtype, device, strides and the first `values` elements (row-major).
std::string tensor_text(const at::Tensor& t, int values = 6);

}  // namespace picotron
