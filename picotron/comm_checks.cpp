// picotron/comm_checks.cpp — what Comm checks before any library call, and the error
// messages every failure carries: one line, starting with "[rank R]", naming the
// operation and the numbers (CommError, never a C++ backtrace).
//
// Test: ctest -R comm   (tests/mpi/comm_test.cpp: bad arguments are refused on every rank)
#include <climits>

#include "picotron/comm.h"
#include "picotron/comm_internal.h"

namespace picotron {

using detail::comm_check;

// ---- errors --------------------------------------------------------------------

void detail::throw_mpi_error(int code, const char* call, const char* file, int line, int rank) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw CommError("[rank " + std::to_string(rank) + "] " + call + " failed at " + file + ":" +
                  std::to_string(line) + ": " + std::string(text, length));
}

std::string detail::timeout_message(int rank, const char* op, std::chrono::seconds timeout,
                                    const std::string& details) {
  return "[rank " + std::to_string(rank) + "] " + op + " timed out after " + std::to_string(timeout.count()) +
         " s: a peer died or stopped answering (" + details + ")";
}

// ---- checks ----------------------------------------------------------------------

void Comm::check_tensor(const torch::Tensor& t, const char* op) const {
  const int r = world_rank_;
  comm_check(t.defined(), "[rank ", r, "] ", op, ": undefined tensor");
  comm_check(t.is_contiguous(), "[rank ", r, "] ", op, ": tensor must be contiguous (call .contiguous())");
  const auto dt = t.scalar_type();
  comm_check(dt == torch::kFloat32 || dt == torch::kFloat64 || dt == torch::kBFloat16 || dt == torch::kFloat16 ||
                 dt == torch::kInt32 || dt == torch::kInt64,
             "[rank ", r, "] ", op, ": dtype ", detail::dtype_name(dt),
             " is not supported (float32, float64, bfloat16, float16, int32, int64)");
  if (t.is_cuda())
    comm_check(nccl_ && t.device() == device_, "[rank ", r, "] ", op, ": tensor on ", t.device(),
               ", but this Comm's NCCL communicator is ", (nccl_ ? device_.str() : "absent (a CPU Comm)"));
  else
    comm_check(mpi_ != MPI_COMM_NULL, "[rank ", r, "] ", op,
               ": CPU tensor, but this Comm has no MPI (torchrun launched several processes)");
  comm_check(t.numel() <= INT_MAX, "[rank ", r, "] ", op, ": ", t.numel(), " elements, but MPI and NCCL ",
             "counts here are int: split the tensor");
}

void Comm::check_reduce(const torch::Tensor& t, ReduceOp reduce, const char* op) const {
  check_tensor(t, op);
  comm_check(reduce != ReduceOp::kAvg || t.is_floating_point(), "[rank ", world_rank_, "] ", op,
             ": ReduceOp::kAvg on a ", detail::dtype_name(t.scalar_type()),
             " tensor would truncate; use kSum and divide in floating point");
}

void Comm::check_all_gather(const torch::Tensor& out, const torch::Tensor& in) const {
  check_tensor(in, "all_gather");
  check_tensor(out, "all_gather");
  detail::check_chunks(world_rank_, "all_gather", "out", out, in, size_);
}

void Comm::check_reduce_scatter(const torch::Tensor& out, const torch::Tensor& in, ReduceOp op) const {
  check_reduce(in, op, "reduce_scatter");
  check_tensor(out, "reduce_scatter");
  detail::check_chunks(world_rank_, "reduce_scatter", "in", in, out, size_);
}

void Comm::check_p2p(const std::vector<P2POp>& ops) const {
  for (const P2POp& p : ops) {  // everything is checked before anything is posted
    check_tensor(p.tensor, "batch_p2p");
    comm_check(p.peer >= 0 && p.peer < size_, "[rank ", world_rank_, "] batch_p2p: peer ", p.peer,
               " is not a rank of this group of ", size_);
    comm_check(p.tag >= 0 && p.tag < 32768, "[rank ", world_rank_, "] batch_p2p: tag ", p.tag,
               " is outside [0, 32767] (the smallest MPI_TAG_UB MPI allows)");
    comm_check(p.tensor.is_cuda() == ops.front().tensor.is_cuda(), "[rank ", world_rank_,
               "] batch_p2p: CPU and CUDA tensors in one batch (they go over MPI and NCCL respectively)");
  }
}

void detail::check_chunks(int rank, const char* op, const char* whole_name, const torch::Tensor& whole,
                          const torch::Tensor& chunk, int size) {
  comm_check(whole.numel() == size * chunk.numel() && whole.scalar_type() == chunk.scalar_type(), "[rank ", rank,
             "] ", op, ": ", whole_name, " has ", whole.numel(), " ", dtype_name(whole.scalar_type()),
             " elements, expected ", size, " x ", chunk.numel(), " ", dtype_name(chunk.scalar_type()));
}

}  // namespace picotron
