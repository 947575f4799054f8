// picotron/comm.cpp — the Comm object: creation, sub-groups, teardown, Work, and the seam
// where its listeners hear of every communication (comm_listener.h). The collectives themselves (check, a group of one, record,
// then NCCL or MPI): comm_collectives.cpp. Argument checks and error messages:
// comm_checks.cpp.
//
// Life of a communicator:
//   Comm::world(dist, device)     MPI_Comm_dup(MPI_COMM_WORLD)  (+ ncclCommInitRank for CUDA)
//        |
//   comm.split(color, key, name)  MPI_Comm_split                (+ ncclCommSplit)
//        |                        ranks with the same color form a group, ordered by key
//   ~Comm                         MPI_Comm_free                 (+ ncclCommDestroy, or
//                                                                  ncclCommAbort after abort())
//
// Test: ctest -R comm   (tests/mpi/comm_test.cpp under mpirun at 1, 2, 3, 4 and 8 ranks)
#include "picotron/comm.h"

#include <exception>
#include <numeric>
#include <utility>

#include "picotron/comm_internal.h"
#include "picotron/distributed.h"

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
  if (state_->listeners) state_->listeners->waiting(state_->ops);
  try {
    state_->wait();
  } catch (const CommError& e) {  // a timeout: the listeners may add where the evidence is
    if (state_->listeners) throw CommError(e.what() + state_->listeners->failing(e.what(), /*ending=*/false));
    throw;
  }
  if (state_->listeners) state_->listeners->completed(state_->ops);
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
  c.listeners_ = std::make_shared<CommListeners>();
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
  c.join_listeners();
  return c;
}

Comm Comm::split(int color, int key, std::string name) {
  comm_check(color >= 0, "[rank ", world_rank_, "] Comm::split: color ", color, " must be >= 0");
  Comm sub;
  sub.world_rank_ = world_rank_;
  sub.timeout_ = timeout_;
  sub.device_ = device_;
  sub.name_ = name.empty() ? name_ + "/split" : std::move(name);
  sub.listeners_ = listeners_;
  if (mpi_ != MPI_COMM_NULL) {
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_split(mpi_, color, key, &sub.mpi_));
    sub.owns_mpi_ = true;
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_rank(sub.mpi_, &sub.rank_));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_size(sub.mpi_, &sub.size_));
  }
  if (nccl_) nccl_split(sub, color, key);  // ncclCommSplit (sets rank/size when there is no MPI)
  sub.join_listeners();
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
  listeners_ = std::move(other.listeners_);
  group_id_ = std::exchange(other.group_id_, -1);
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


// ---- the seam: the listeners (comm_listener.h) ------------------------------------------

void Comm::listen(std::shared_ptr<CommListener> listener) const {
  comm_check(bool(listeners_), "Comm::listen: an empty Comm has no listeners");
  listeners_->add(std::move(listener));
}

void Comm::stop_listening(const CommListener* listener) const {
  if (listeners_) listeners_->remove(listener);
}

std::map<std::string, CommCount> Comm::ledger() const {
  return listeners_ ? listeners_->ledger(group_id_) : std::map<std::string, CommCount>{};
}

void Comm::reset_ledger() {
  if (listeners_) listeners_->reset_ledger(group_id_);
}

int64_t Comm::record(CommEvent event, int64_t batch) {
  if (!listeners_) return -1;
  const int64_t id = listeners_->issue(group_id_, std::move(event), batch);
  issuing_ = batch < 0 ? CommOps{id, 1} : CommOps{issuing_.first, issuing_.count + 1};
  return id;
}

Work Comm::completes_in(Work w) {
  if (listeners_ && w.state_) {
    w.state_->listeners = listeners_;
    w.state_->ops = issuing_;
  }
  return w;
}

// The group's world ranks, so that every rank names the same group the same way. MPI knows
// them without a message (MPI_Group_translate_ranks); NCCL alone (torchrun) does not.
void Comm::join_listeners() {
  CommGroup g;
  g.name = name_;
  g.size = size_;
  g.rank = rank_;
  if (mpi_ != MPI_COMM_NULL) {
    MPI_Group mine, world;
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_group(mpi_, &mine));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> ranks(size_t(size_), 0);
    std::iota(ranks.begin(), ranks.end(), 0);
    g.world_ranks.resize(size_t(size_));
    PICOTRON_MPI_CHECK(world_rank_, MPI_Group_translate_ranks(mine, size_, ranks.data(), world, g.world_ranks.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
  } else if (size_ == 1) {
    g.world_ranks = {world_rank_};
  }
  group_id_ = listeners_->join(std::move(g));
}

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
