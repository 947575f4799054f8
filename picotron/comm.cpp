// picotron/comm.cpp — the Comm object: creation, sub-groups, teardown, Work, the ledger,
// and the entry point of every collective. (Argument checks and error messages:
// comm_checks.cpp.)
//
// Each public collective is a few lines, always the same four steps:
//
//   Comm::all_reduce(t, op)
//     1. check_reduce(t, op)                     throws CommError on bad arguments
//     2. size_ == 1 ? return                     a group of one moves nothing
//     3. record(event("all_reduce", t, ...))     the ledger (calls, elements); --explain sees it
//     4. t.is_cuda() ? nccl_all_reduce(...)      ncclAllReduce      (comm_nccl.cpp)
//                    : mpi_all_reduce(...)       MPI_Iallreduce     (comm_mpi.cpp)
//
// so every raw library call is one step away from here:
//   comm_mpi.cpp   CPU tensors: MPI_Iallreduce, ... and the bounded wait
//   comm_nccl.cpp  CUDA tensors: ncclAllReduce, ... on CUDA streams, and the watchdog
//                  that bounds synchronous calls (CUDA builds only)
//
// Life of a communicator:
//   Comm::world(dist, device)     MPI_Comm_dup(MPI_COMM_WORLD)  (+ ncclCommInitRank for CUDA)
//        |
//   comm.split(color, key, name)  MPI_Comm_split                (+ ncclCommSplit)
//        |                        ranks with the same color form a group, ordered by key
//   ~Comm                         MPI_Comm_free                 (+ ncclCommDestroy, or
//                                                                  ncclCommAbort after abort())
//
// Test: ctest -R comm   (tests/comm_test.cpp under mpirun at 1, 2, 3, 4 and 8 ranks)
#include "picotron/comm.h"

#include <exception>
#include <numeric>
#include <utility>

#include "picotron/comm_internal.h"
#include "picotron/distributed.h"
#include "picotron/flight_recorder.h"

namespace picotron {

using detail::comm_check;

// ---- Work ----------------------------------------------------------------------

Work::Work() = default;  // here, where State is complete (unique_ptr needs its destructor)
Work::Work(std::unique_ptr<State> s) : state_(std::move(s)) {}
Work::Work(Work&& other) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->safe_to_destroy()) (void)state_.release();  // leaked on purpose
    state_ = std::move(other.state_);
  }
  return *this;
}
Work::~Work() {
  if (state_ && !state_->safe_to_destroy()) (void)state_.release();  // leaked on purpose
}
void Work::progress() {
  if (state_) state_->progress();
}

void Work::wait() {
  if (!state_) return;
  if (state_->flight) state_->flight->waiting(state_->mark);
  try {
    state_->wait();
  } catch (const CommError& e) {  // a timeout: the line also says where every rank's history is
    if (state_->flight) throw CommError(e.what() + state_->flight->hint());
    throw;
  }
  if (state_->flight) state_->flight->completed(state_->mark);
  state_.reset();  // a second wait() is a no-op
}

// ---- creation and teardown ----------------------------------------------------

Comm Comm::world(const Distributed& dist, torch::Device device, std::chrono::seconds timeout) {
  Comm c;
  c.rank_ = c.world_rank_ = dist.rank();
  c.size_ = dist.world_size();
  c.timeout_ = timeout;
  c.device_ = device;
  c.name_ = "world";
  if (dist.has_mpi()) {
    PICOTRON_MPI_CHECK(c.world_rank_, MPI_Comm_dup(MPI_COMM_WORLD, &c.mpi_));
    c.owns_mpi_ = true;
    // Return error codes (our checks turn them into CommError) instead of aborting.
    PICOTRON_MPI_CHECK(c.world_rank_, MPI_Comm_set_errhandler(c.mpi_, MPI_ERRORS_RETURN));
    // Open MPI raises a failed request's error (MPI_Testall: a collective whose ranks disagree
    // on the count, MPI_ERR_TRUNCATE) on MPI_COMM_WORLD's handler: return those too, so that
    // the rank throws, writes its flight recorder and says why, instead of dying inside MPI.
    PICOTRON_MPI_CHECK(c.world_rank_, MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  } else if (!device.is_cuda()) {
    throw CommError("[rank " + std::to_string(c.world_rank_) + "] --device cpu with " + std::to_string(c.size_) +
                    " ranks: CPU runs need mpirun (or srun): torchrun provides no MPI");
  }
  if (device.is_cuda()) c.nccl_init_world(dist);  // NCCL's unique id goes over MPI or a TCPStore
  return c;
}

Comm Comm::split(int color, int key, std::string name) {
  comm_check(color >= 0, "[rank ", world_rank_, "] Comm::split: color ", color, " must be >= 0");
  Comm sub;
  sub.world_rank_ = world_rank_;
  sub.timeout_ = timeout_;
  sub.device_ = device_;
  sub.name_ = name.empty() ? name_ + "/split" : std::move(name);
  sub.observer_ = observer_;
  if (mpi_ != MPI_COMM_NULL) {
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_split(mpi_, color, key, &sub.mpi_));
    sub.owns_mpi_ = true;
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_rank(sub.mpi_, &sub.rank_));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_size(sub.mpi_, &sub.size_));
  }
  if (nccl_) nccl_split(sub, color, key);  // ncclCommSplit (sets rank/size when there is no MPI)
  if (flight_) sub.set_flight_recorder(flight_);
  return sub;
}

Comm::Comm(Comm&& other) noexcept { *this = std::move(other); }

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this == &other) return *this;
  if (owns_mpi_ && mpi_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_);
  rank_ = other.rank_;
  size_ = other.size_;
  world_rank_ = other.world_rank_;
  timeout_ = other.timeout_;
  device_ = other.device_;
  name_ = std::move(other.name_);
  ledger_ = std::move(other.ledger_);
  observer_ = std::move(other.observer_);
  flight_ = std::move(other.flight_);
  flight_group_ = other.flight_group_;
  issuing_ = other.issuing_;
  mpi_ = std::exchange(other.mpi_, MPI_COMM_NULL);
  owns_mpi_ = std::exchange(other.owns_mpi_, false);
  nccl_ = std::move(other.nccl_);
  return *this;
}

Comm::~Comm() {
  // Unwinding after an error: the job is about to be aborted, and freeing a communicator
  // whose peers are stuck could block. Leave it to MPI_Abort / process exit.
  if (std::uncaught_exceptions() > 0) {
    if (nccl_) nccl_abort();
    return;
  }
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (owns_mpi_ && mpi_ != MPI_COMM_NULL && !finalised) MPI_Comm_free(&mpi_);
  // nccl_ (shared with any Work still in flight) calls ncclCommDestroy when the last owner goes.
}

void Comm::abort() {
  if (nccl_) nccl_abort();  // ncclCommAbort: stop the kernels without waiting for peers
  // MPI has no per-communicator abort; the whole job goes down through MPI_Abort.
}


// ---- the ledger ------------------------------------------------------------------

int64_t Comm::record(CommEvent event, int64_t batch, bool last) {
  CommCount& count = ledger_[event.kind];
  count.calls += 1;
  count.elements += event.elements;
  if (observer_) observer_(*this, event);  // --explain
  if (!flight_) return -1;
  const int64_t id = flight_->issue(flight_group_, event, batch, last);  // the flight recorder
  issuing_ = batch < 0 ? FlightMark{id, 1} : FlightMark{issuing_.first, issuing_.count + 1};
  return id;
}

Work Comm::completes_in(Work w) {
  if (flight_ && w.state_) {
    w.state_->flight = flight_;
    w.state_->mark = issuing_;
  }
  return w;
}

void Comm::note(const std::string& what, CallSite at) const {
  if (observer_) observer_(*this, CommEvent{"note", "", {}, {}, torch::kFloat, 0, -1, false, at, what.c_str()});
  if (flight_) flight_->note(flight_group_, what);
}

// ---- the flight recorder ---------------------------------------------------------------

void Comm::set_flight_recorder(std::shared_ptr<FlightRecorder> recorder) {
  flight_ = std::move(recorder);
  if (!flight_) return;
  // The group's world ranks, so that every rank's file names the same group the same way.
  // MPI knows them without a message (MPI_Group_translate_ranks); NCCL alone (torchrun) does not.
  std::vector<int> world_ranks;
  if (mpi_ != MPI_COMM_NULL) {
    MPI_Group mine, world;
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_group(mpi_, &mine));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks(size_t(size_), 0);
    std::iota(ranks.begin(), ranks.end(), 0);
    world_ranks.resize(size_t(size_));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
  }
  flight_group_ = flight_->add_group(name_, world_ranks, rank_);
}

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
  CommEvent e = event(p.kind == P2POp::kSend ? "send" : "recv", p.tensor, p.tensor.numel(), async, at);
  e.peer = p.peer;
  return e;
}
}  // namespace

// One ledger entry per operation; for the flight recorder, the batch's ops share the first's id.
void Comm::record_batch(const std::vector<P2POp>& ops, bool async, CallSite at) {
  int64_t first = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t id = record(p2p_event(ops[i], async, at), first, /*last=*/i + 1 == ops.size());
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
  record(CommEvent{"barrier", "", {}, {}, torch::kFloat, 0, -1, false, at});
  if (mpi_ != MPI_COMM_NULL) return completes_in(mpi_barrier()).wait();  // MPI_Ibarrier + bounded wait
  // torchrun (NCCL only): a one-element all-reduce on the side stream, waited by the host.
  torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(device_));
  completes_in(nccl_all_reduce(one, ReduceOp::kSum, /*async=*/true)).wait();
}

size_t Comm::pending_sync_ops() const { return nccl_ ? nccl_pending_sync_ops() : 0; }

// ---- without CUDA: the NCCL path cannot be reached (world() makes no NCCL comm) ----
#ifndef PICOTRON_WITH_CUDA
namespace {
[[noreturn]] void no_cuda(int rank) {
  throw CommError("[rank " + std::to_string(rank) + "] this build has no CUDA/NCCL support: use --device cpu");
}
}  // namespace
void Comm::nccl_init_world(const Distributed&) { no_cuda(world_rank_); }
void Comm::nccl_split(Comm&, int, int) { no_cuda(world_rank_); }
void Comm::nccl_abort() {}
Work Comm::nccl_all_reduce(torch::Tensor&, ReduceOp, bool) { no_cuda(world_rank_); }
Work Comm::nccl_all_gather(torch::Tensor&, const torch::Tensor&, bool) { no_cuda(world_rank_); }
Work Comm::nccl_reduce_scatter(torch::Tensor&, const torch::Tensor&, ReduceOp, bool) { no_cuda(world_rank_); }
void Comm::nccl_broadcast(torch::Tensor&, int) { no_cuda(world_rank_); }
Work Comm::nccl_batch_p2p(const std::vector<P2POp>&, bool) { no_cuda(world_rank_); }
size_t Comm::nccl_pending_sync_ops() const { return 0; }
#endif

}  // namespace picotron
