// picotron/comm_mpi.cpp — Comm's collectives for CPU tensors: MPI, with a bounded wait.
// The public entry points (comm_collectives.cpp) check the arguments, shortcut groups of one and
// keep the ledger, then call the mpi_* body here (CUDA tensors go to comm_nccl.cpp).
//
// Every CPU collective takes the same three steps:
//   1. the tensors were checked by the entry point (contiguous, dtype, sizes);
//   2. mpi_*: post the non-blocking MPI call (MPI_Iallreduce, ...), which returns an
//      MPI_Request, and hand it back in a Work;
//   3. Work::wait: wait with a deadline: MPI_Testall in a loop (each call also drives
//      MPI's progress), yielding the core between polls. Past the deadline a peer died
//      or stopped answering: throw CommError. A blocking MPI_Allreduce would wait forever.
//
// What the collectives compute, for a group of p ranks holding x_0 .. x_{p-1}:
//   all_reduce      every rank:  y = x_0 + x_1 + ... + x_{p-1}       (or max, or sum / p)
//   all_gather      every rank:  y = [x_0 | x_1 | ... | x_{p-1}]     (concatenated)
//   reduce_scatter  rank r:      y = chunk r of (x_0 + ... + x_{p-1})
//   broadcast       every rank:  y = x_root
//   batch_p2p       every MPI_Isend / MPI_Irecv of the batch posted, then all waited
//
// MPI has no 16-bit float types. bf16/fp16 reductions run on an fp32 copy (converted
// back when the operation completes); data movement sends the raw bits as MPI_UINT16_T.
// kAvg is MPI_SUM followed by a division by p (floating point only).
//
// Test: ctest -R comm   (tests/mpi/comm_test.cpp under mpirun at 1, 2, 3, 4 and 8 ranks)
#include <functional>
#include <thread>

#include "picotron/comm.h"
#include "picotron/comm_internal.h"

namespace picotron {

using Clock = std::chrono::steady_clock;

namespace {

// A pending MPI operation: its requests, the buffers MPI uses, and what to do once done.
struct MpiWork final : Work::State {
  const char* op;                      // for the error message: "all_reduce", ...
  int64_t numel;                       //   how many elements of which dtype
  c10::ScalarType dtype;
  int rank, group_rank, group_size;    //   global rank, and rank / size in the group
  std::chrono::seconds timeout;
  std::vector<MPI_Request> requests;
  std::vector<torch::Tensor> buffers;  // alive until MPI is done with them
  std::function<void()> on_complete;   // e.g. fp32 copy -> bf16, or sum -> average

  void wait() override {
    const auto start = Clock::now();
    int done = 0;
    while (true) {
      PICOTRON_MPI_CHECK(rank, MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
      if (done) break;
      const auto waited = Clock::now() - start;
      if (waited > timeout)
        throw CommError(detail::timeout_message(
            rank, op, timeout,
            c10::str(numel, " ", detail::dtype_name(dtype), " elements, group rank ", group_rank, " of ", group_size)));
      // Poll hard for a millisecond (small messages finish in microseconds), then
      // sleep between polls so that a rank waiting for a slow peer leaves it the core.
      if (waited < std::chrono::milliseconds(1)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (on_complete) on_complete();
  }

  void progress() override {
    int done = 0;  // completion is acted on in wait(); here MPI only gets to move bytes
    PICOTRON_MPI_CHECK(rank, MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
  }

  bool safe_to_destroy() override {
    int finalised = 0, done = 0;
    MPI_Finalized(&finalised);
    if (finalised) return true;
    MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    return done;
  }
};

MPI_Datatype mpi_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kInt64: return MPI_INT64_T;
    default: return MPI_UINT16_T;  // bf16 / fp16 (check_tensor allows nothing else): raw bits
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }  // kAvg = sum, then / p

bool is_16bit_float(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat16;
}

// What a reduction works on: the tensor itself, or an fp32 copy of a bf16/fp16 tensor.
torch::Tensor reduction_buffer(const torch::Tensor& t) { return is_16bit_float(t) ? t.to(torch::kFloat32) : t; }

// Runs when a reduction completes: the average's division, and the copy back to 16 bits.
std::function<void()> finish_reduction(torch::Tensor result, torch::Tensor buffer, ReduceOp op, int size) {
  return [=]() mutable {
    if (op == ReduceOp::kAvg) buffer.div_(size);
    if (!buffer.is_same(result)) result.copy_(buffer);
  };
}

int mpi_count(const torch::Tensor& t) { return int(t.numel()); }  // check_tensor: numel <= INT_MAX

// A new MpiWork for `op` on `t`: what its timeout message will report.
std::unique_ptr<MpiWork> mpi_work(const char* op, const torch::Tensor& t, int world_rank, int rank, int size,
                                  std::chrono::seconds timeout) {
  auto w = std::make_unique<MpiWork>();
  w->op = op;
  w->numel = t.defined() ? t.numel() : 0;
  w->dtype = t.defined() ? t.scalar_type() : torch::kFloat32;
  w->rank = world_rank;
  w->group_rank = rank;
  w->group_size = size;
  w->timeout = timeout;
  return w;
}

}  // namespace

// ---- collectives (arguments already checked by the entry points in comm_collectives.cpp)

Work Comm::mpi_all_reduce(torch::Tensor& t, ReduceOp op) {
  torch::Tensor buf = reduction_buffer(t);  // [n]: t itself, or its fp32 copy
  auto w = mpi_work("all_reduce", t, world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  PICOTRON_MPI_CHECK(world_rank_, MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), mpi_count(buf), mpi_type(buf),
                                                 mpi_op(op), mpi_, &w->requests[0]));
  w->buffers = {t, buf};
  w->on_complete = finish_reduction(t, buf, op, size_);
  return Work(std::move(w));
}

Work Comm::mpi_all_gather(torch::Tensor& out, const torch::Tensor& in) {  // in: [n] -> out: [p*n]
  // In place when `in` already is this rank's slot of `out` (ZeRO's layout): MPI_IN_PLACE.
  const bool in_place = in.data_ptr() == static_cast<char*>(out.data_ptr()) + rank_ * in.nbytes();
  auto w = mpi_work("all_gather", in, world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  PICOTRON_MPI_CHECK(world_rank_, MPI_Iallgather(in_place ? MPI_IN_PLACE : in.data_ptr(), mpi_count(in),
                                                 mpi_type(in), out.data_ptr(), mpi_count(in), mpi_type(out),
                                                 mpi_, &w->requests[0]));
  w->buffers = {in, out};
  return Work(std::move(w));
}

Work Comm::mpi_reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op) {  // [p*n] -> [n]
  torch::Tensor in_buf = reduction_buffer(in);    // [p*n]
  torch::Tensor out_buf = reduction_buffer(out);  // [n]
  // In place (`out` is a slice of `in`, ZeRO's layout): MPI forbids overlapping buffers.
  if (in_buf.is_alias_of(out_buf)) in_buf = in_buf.clone();
  auto w = mpi_work("reduce_scatter", in, world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  PICOTRON_MPI_CHECK(world_rank_, MPI_Ireduce_scatter_block(in_buf.data_ptr(), out_buf.data_ptr(),
                                                            mpi_count(out_buf), mpi_type(out_buf), mpi_op(op),
                                                            mpi_, &w->requests[0]));
  w->buffers = {in, out, in_buf, out_buf};
  w->on_complete = finish_reduction(out, out_buf, op, size_);
  return Work(std::move(w));
}

Work Comm::mpi_broadcast(torch::Tensor& t, int root) {
  auto w = mpi_work("broadcast", t, world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  PICOTRON_MPI_CHECK(world_rank_, MPI_Ibcast(t.data_ptr(), mpi_count(t), mpi_type(t), root, mpi_, &w->requests[0]));
  w->buffers = {t};
  return Work(std::move(w));
}

// ---- point to point ----------------------------------------------------------------

Work Comm::mpi_batch_p2p(const std::vector<P2POp>& ops) {
  auto w = mpi_work("batch_p2p", ops.front().tensor, world_rank_, rank_, size_, timeout_);
  // Messages between two ranks with the same tag arrive in the order they were posted.
  for (const P2POp& p : ops) {
    MPI_Request req;
    if (p.kind == P2POp::kSend)
      PICOTRON_MPI_CHECK(world_rank_, MPI_Isend(p.tensor.data_ptr(), mpi_count(p.tensor), mpi_type(p.tensor),
                                                p.peer, p.tag, mpi_, &req));
    else
      PICOTRON_MPI_CHECK(world_rank_, MPI_Irecv(p.tensor.data_ptr(), mpi_count(p.tensor), mpi_type(p.tensor),
                                                p.peer, p.tag, mpi_, &req));
    w->requests.push_back(req);
    w->buffers.push_back(p.tensor);
  }
  return Work(std::move(w));
}

Work Comm::mpi_all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& send_rows,
                          const std::vector<int64_t>& recv_rows) {
  // Counts and displacements in elements of the MPI type (rows x row size), per rank.
  int64_t row = 1;  // elements of the MPI type per row
  for (int64_t d : in.sizes().slice(1)) row *= d;
  auto counts = torch::empty({4, size_}, torch::kInt32);  // send counts, send displs, recv counts, recv displs
  auto c = counts.accessor<int32_t, 2>();
  int64_t sent = 0, received = 0;
  for (int p = 0; p < size_; ++p) {
    c[0][p] = int32_t(send_rows[p] * row), c[1][p] = int32_t(sent * row);
    c[2][p] = int32_t(recv_rows[p] * row), c[3][p] = int32_t(received * row);
    sent += send_rows[p], received += recv_rows[p];
  }
  auto w = mpi_work("all_to_all", in, world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  int32_t* p = counts.data_ptr<int32_t>();
  PICOTRON_MPI_CHECK(world_rank_, MPI_Ialltoallv(in.data_ptr(), p, p + size_, mpi_type(in), out.data_ptr(),
                                                 p + 2 * size_, p + 3 * size_, mpi_type(out), mpi_, &w->requests[0]));
  w->buffers = {in, out, counts};  // the counts too: MPI reads them until the call completes
  return Work(std::move(w));
}

Work Comm::mpi_barrier() {
  auto w = mpi_work("barrier", torch::Tensor(), world_rank_, rank_, size_, timeout_);
  w->requests.resize(1);
  PICOTRON_MPI_CHECK(world_rank_, MPI_Ibarrier(mpi_, &w->requests[0]));
  return Work(std::move(w));
}

}  // namespace picotron
