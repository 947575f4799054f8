// picotron/comm_collectives.cpp — every collective and point-to-point call of Comm, each
// the same four steps:
//
//   Comm::all_reduce(t, op)
//     1. check_reduce(t, op)                     throws CommError on bad arguments
//     2. size_ == 1 ? return                     a group of one moves nothing
//     3. record(event("all_reduce", t, ...))     told to the listeners: the ledger, --explain, ...
//     4. t.is_cuda() ? nccl_all_reduce(...)      ncclAllReduce      (comm_nccl.cpp)
//                    : mpi_all_reduce(...)       MPI_Iallreduce     (comm_mpi.cpp)
//
// so every raw library call is one step away from here:
//   comm_mpi.cpp   CPU tensors: MPI_Iallreduce, ... and the bounded wait
//   comm_nccl.cpp  CUDA tensors: ncclAllReduce, ... on CUDA streams, and the watchdog
//                  that bounds synchronous calls (CUDA builds only)
// (The Comm object itself, its groups, the ledger and Work: comm.cpp. Argument checks and
// error messages: comm_checks.cpp.)
//
// Test: ctest -R comm   (tests/mpi/comm_test.cpp under mpirun at 1, 2, 3, 4 and 8 ranks)
#include "picotron/comm.h"

#include <utility>

#include "picotron/comm_internal.h"

namespace picotron {

using detail::comm_check;


namespace {
// A group of one: the gathered / reduced result is this rank's own input. out and in hold
// the same number of elements (checked); nothing to do when they are the same memory.
void copy_unless_same(torch::Tensor& out, const torch::Tensor& in) {
  if (out.data_ptr() != in.data_ptr()) out.view_as(in).copy_(in);
}

// The ledger entry of one call (elements: see comm.h), with its shapes and call site.
CommEvent event(const char* kind, const torch::Tensor& in, int64_t elements, bool async, CallSite at,
                const torch::Tensor* out = nullptr, ReduceOp op = ReduceOp::kSum, bool reduces = false) {
  CommEvent e;
  e.kind = kind;
  e.reduce = !reduces ? "" : op == ReduceOp::kSum ? "sum" : op == ReduceOp::kAvg ? "avg" : "max";
  e.in_shape = in.sizes();
  if (out) e.out_shape = out->sizes();
  e.dtype = in.scalar_type();
  e.elements = elements;
  e.async = async;
  e.at = at;
  return e;
}
}  // namespace

// ---- collectives: check, shortcut a group of one, record, then NCCL or MPI ----------
// Synchronous CUDA calls return once NCCL is enqueued on the current stream (the
// watchdog bounds them); synchronous CPU calls wait for MPI, bounded by the timeout.

void Comm::all_reduce(torch::Tensor& t, ReduceOp op, CallSite at) {
  check_reduce(t, op, "all_reduce");
  if (size_ == 1) return;  // the sum, max or average of one tensor is itself
  record(event("all_reduce", t, t.numel(), false, at, nullptr, op, true));
  if (t.is_cuda()) nccl_all_reduce(t, op, /*async=*/false);  // ncclAllReduce
  else completes_in(mpi_all_reduce(t, op)).wait();            // MPI_Iallreduce + bounded wait
}

void all_reduce_together(const std::vector<torch::Tensor>& tensors, Comm& group, ReduceOp op, CallSite at) {
  if (tensors.empty() || group.size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const auto& t : tensors) parts.push_back(t.reshape({-1}));
  auto flat = torch::cat(parts);  // [sum of numels]
  group.all_reduce(flat, op, at);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

Work Comm::all_reduce_async(torch::Tensor& t, ReduceOp op, CallSite at) {
  check_reduce(t, op, "all_reduce");
  if (size_ == 1) return Work();
  record(event("all_reduce", t, t.numel(), true, at, nullptr, op, true));
  return completes_in(t.is_cuda() ? nccl_all_reduce(t, op, /*async=*/true) : mpi_all_reduce(t, op));
}

void Comm::all_gather(torch::Tensor& out, const torch::Tensor& in, CallSite at) {  // [n] -> [size*n]
  check_all_gather(out, in);
  if (size_ == 1) return copy_unless_same(out, in);
  record(event("all_gather", in, out.numel(), false, at, &out));
  if (in.is_cuda()) nccl_all_gather(out, in, /*async=*/false);  // ncclAllGather
  else completes_in(mpi_all_gather(out, in)).wait();             // MPI_Iallgather + bounded wait
}

Work Comm::all_gather_async(torch::Tensor& out, const torch::Tensor& in, CallSite at) {
  check_all_gather(out, in);
  if (size_ == 1) {
    copy_unless_same(out, in);
    return Work();
  }
  record(event("all_gather", in, out.numel(), true, at, &out));
  return completes_in(in.is_cuda() ? nccl_all_gather(out, in, /*async=*/true) : mpi_all_gather(out, in));
}

void Comm::reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op, CallSite at) {  // [size*n] -> [n]
  check_reduce_scatter(out, in, op);
  if (size_ == 1) return copy_unless_same(out, in);
  record(event("reduce_scatter", in, in.numel(), false, at, &out, op, true));
  if (in.is_cuda()) nccl_reduce_scatter(out, in, op, /*async=*/false);  // ncclReduceScatter
  else completes_in(mpi_reduce_scatter(out, in, op)).wait();             // MPI_Ireduce_scatter_block
}

Work Comm::reduce_scatter_async(torch::Tensor& out, const torch::Tensor& in, ReduceOp op, CallSite at) {
  check_reduce_scatter(out, in, op);
  if (size_ == 1) {
    copy_unless_same(out, in);
    return Work();
  }
  record(event("reduce_scatter", in, in.numel(), true, at, &out, op, true));
  return completes_in(in.is_cuda() ? nccl_reduce_scatter(out, in, op, /*async=*/true)
                                   : mpi_reduce_scatter(out, in, op));
}

void Comm::broadcast(torch::Tensor& t, int root, CallSite at) {
  check_tensor(t, "broadcast");
  comm_check(root >= 0 && root < size_, "[rank ", world_rank_, "] broadcast: root ", root,
             " is not a rank of this group of ", size_);
  if (size_ == 1) return;  // the root already holds its own values
  CommEvent e = event("broadcast", t, t.numel(), false, at);
  e.peer = root;
  record(std::move(e));
  if (t.is_cuda()) nccl_broadcast(t, root);  // ncclBroadcast
  else completes_in(mpi_broadcast(t, root)).wait();  // MPI_Ibcast + bounded wait
}

void Comm::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& send_rows,
                      const std::vector<int64_t>& recv_rows, CallSite at) {
  check_tensor(in, "all_to_all");
  check_tensor(out, "all_to_all");
  const auto total = [](const std::vector<int64_t>& rows) { int64_t n = 0; for (int64_t r : rows) n += r; return n; };
  comm_check(int(send_rows.size()) == size_ && int(recv_rows.size()) == size_, "[rank ", world_rank_,
             "] all_to_all: one row count per rank of the group of ", size_, " (got ", send_rows.size(), " and ",
             recv_rows.size(), ")");
  comm_check(in.dim() >= 1 && out.dim() == in.dim() && in.size(0) == total(send_rows) && out.size(0) == total(recv_rows) &&
                 in.sizes().slice(1) == out.sizes().slice(1) && in.scalar_type() == out.scalar_type(),
             "[rank ", world_rank_, "] all_to_all: in ", in.sizes(), " and out ", out.sizes(),
             " do not match the row counts (", total(send_rows), " sent, ", total(recv_rows), " received)");
  if (size_ == 1) return copy_unless_same(out, in);
  int64_t row = 1;  // elements per row
  for (int64_t d : in.sizes().slice(1)) row *= d;
  record(event("all_to_all", in, (total(send_rows) - send_rows[rank_]) * row, false, at, &out));
  if (in.is_cuda()) {  // ncclSend + ncclRecv to and from every peer, in one group
    std::vector<P2POp> ops;
    int64_t sent = 0, received = 0;
    for (int p = 0; p < size_; ++p) {
      if (send_rows[p] > 0) ops.push_back({P2POp::kSend, in.narrow(0, sent, send_rows[p]), p});
      if (recv_rows[p] > 0) ops.push_back({P2POp::kRecv, out.narrow(0, received, recv_rows[p]), p});
      sent += send_rows[p], received += recv_rows[p];
    }
    if (!ops.empty()) nccl_batch_p2p(ops, /*async=*/false);
  } else {
    completes_in(mpi_all_to_all(out, in, send_rows, recv_rows)).wait();  // MPI_Ialltoallv + bounded wait
  }
}

// ---- point to point: never shortcut (a rank may send to itself) ----------------------

void Comm::send(const torch::Tensor& t, int peer, CallSite at) { batch_p2p({{P2POp::kSend, t, peer}}, at); }
void Comm::recv(torch::Tensor& t, int peer, CallSite at) { batch_p2p({{P2POp::kRecv, t, peer}}, at); }

namespace {
CommEvent p2p_event(const P2POp& p, bool async, CallSite at) {
  if (*p.carries) at.carries = p.carries;  // the op's own words, where a batch mixes messages
  CommEvent e = event(p.kind == P2POp::kSend ? "send" : "recv", p.tensor, p.tensor.numel(), async, at);
  e.peer = p.peer;
  e.place = p.place;
  return e;
}
}  // namespace

// One event per operation; the batch's operations share the first one's id.
void Comm::record_batch(const std::vector<P2POp>& ops, bool async, CallSite at) {
  int64_t first = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t id = record(p2p_event(ops[i], async, at), first);
    if (i == 0) first = id;
  }
}

void Comm::batch_p2p(const std::vector<P2POp>& ops, CallSite at) {
  check_p2p(ops);
  if (ops.empty()) return;
  record_batch(ops, /*async=*/false, at);
  if (ops.front().tensor.is_cuda()) nccl_batch_p2p(ops, /*async=*/false);  // ncclSend/ncclRecv in a group
  else completes_in(mpi_batch_p2p(ops)).wait();                             // MPI_Isend/MPI_Irecv
}

Work Comm::batch_p2p_async(const std::vector<P2POp>& ops, CallSite at) {
  check_p2p(ops);
  if (ops.empty()) return Work();
  record_batch(ops, /*async=*/true, at);
  return completes_in(ops.front().tensor.is_cuda() ? nccl_batch_p2p(ops, /*async=*/true) : mpi_batch_p2p(ops));
}

void Comm::barrier(CallSite at) {
  CommEvent e;
  e.kind = "barrier";
  e.at = at;
  record(std::move(e));
  if (mpi_ != MPI_COMM_NULL) return completes_in(mpi_barrier()).wait();  // MPI_Ibarrier + bounded wait
  // torchrun (NCCL only): a one-element all-reduce on the side stream, waited by the host.
  torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(device_));
  completes_in(nccl_all_reduce(one, ReduceOp::kSum, /*async=*/true)).wait();
}

size_t Comm::pending_sync_ops() const { return nccl_ ? nccl_pending_sync_ops() : 0; }

}  // namespace picotron
