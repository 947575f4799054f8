// tests/mpi_check.h — the tiny harness of the tests that run under mpirun (Catch2 runs
// in one process): count checks, print each failure with its rank, and end with the
// line ctest's PASS_REGULAR_EXPRESSION reads: "[rank r] N passed, M failed".
#pragma once

#include <iostream>
#include <string>

namespace picotron::testing {

inline int passed = 0, failed = 0;

inline void check(bool ok, const std::string& what, int rank) {
  (ok ? passed : failed)++;
  if (!ok) std::cerr << "[rank " << rank << "] FAILED: " << what << std::endl;
}

// Prints the summary line; the process's exit code.
inline int summary(int rank) {
  std::cout << "[rank " << rank << "] " << passed << " passed, " << failed << " failed" << std::endl;
  return failed ? 1 : 0;
}

}  // namespace picotron::testing
