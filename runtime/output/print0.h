// runtime/output/print0.h — a line on the terminal from rank 0 only.
//
// Every rank runs the same program; what the run says about itself (the launch line, the
// step line, the summaries) is said once. Errors are every rank's own
// (picotron/distributed.h: report_error).
#pragma once

#include <iostream>
#include <string>

namespace picotron {

// Print a line (with a newline, flushed) on rank 0 only.
inline void print0(int rank, const std::string& line) {
  if (rank != 0) return;
  std::cout << line << std::endl;
}

}  // namespace picotron
