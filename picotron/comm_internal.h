// picotron/comm_internal.h — shared by picotron/comm*.cpp, distributed.cpp and
// comm_checks.cpp, never needed by a caller of Comm: the MPI return-code check, message
// helpers, and a Work's state.
//
// The project has two macros for library return codes, both throwing CommError with
// the rank, file:line and the library's own error string:
//   PICOTRON_MPI_CHECK  (here)             PICOTRON_NCCL_CHECK  (picotron/nccl_watchdog.h)
// CUDA runtime calls use LibTorch's C10_CUDA_CHECK.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <c10/util/StringUtil.h>
#include <mpi.h>

#include "picotron/comm.h"

namespace picotron::detail {

[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line, int rank);

// "[rank 3] all_reduce timed out after 300 s: a peer died or stopped answering (details)"
// — the message every bounded wait throws on expiry.
std::string timeout_message(int rank, const char* op, std::chrono::seconds timeout, const std::string& details);

// "float32", "bfloat16", ... (c10's own names print as "Float", "BFloat16").
inline std::string dtype_name(c10::ScalarType t) { return c10::getDtypeNames(t).first; }

// all_gather / reduce_scatter: `whole` must hold `size` chunks shaped like `chunk`.
void check_chunks(int rank, const char* op, const char* whole_name, const torch::Tensor& whole,
                  const torch::Tensor& chunk, int size);

// Like TORCH_CHECK, but throws CommError (one line, no C++ backtrace).
template <class... Args>
void comm_check(bool ok, const Args&... message) {
  if (!ok) throw CommError(c10::str(message...));
}

}  // namespace picotron::detail

#define PICOTRON_MPI_CHECK(rank, call)                                                       \
  do {                                                                                       \
    const int picotron_mpi_code_ = (call);                                                   \
    if (picotron_mpi_code_ != MPI_SUCCESS)                                                   \
      ::picotron::detail::throw_mpi_error(picotron_mpi_code_, #call, __FILE__, __LINE__, (rank)); \
  } while (0)

// One pending operation. MPI (comm_mpi.cpp) and NCCL (comm_nccl.cpp) each derive their own.
struct picotron::Work::State {
  virtual ~State() = default;
  // Blocks until the operation is complete, at most the Comm's timeout; throws CommError.
  virtual void wait() = 0;
  // Lets the library advance the operation without blocking (see Work::progress).
  virtual void progress() {}
  // The listeners, told of this operation's waiting and completion (comm_listener.h).
  std::shared_ptr<CommListeners> listeners;
  CommOps ops;
  // False while a library may still write into buffers this state keeps alive: the
  // Work's destructor then leaks the state on purpose rather than free them under MPI.
  virtual bool safe_to_destroy() = 0;
};
