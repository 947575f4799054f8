// picotron/comm.h — Comm: one process group, raw NCCL for CUDA tensors, MPI for CPU.
//
// Every collective is a few lines around the library call, so a student can see
// exactly what goes over the wire. Each public collective (comm_collectives.cpp) checks its
// tensors, records itself in the ledger, shortcuts a group of one, then calls its body:
//
//   CUDA tensor -> nccl_*: ncclAllReduce / ncclAllGather / ncclReduceScatter / ncclBroadcast /
//                  ncclSend + ncclRecv inside ncclGroupStart/End            (comm_nccl.cpp)
//   CPU tensor  -> mpi_*:  MPI_Iallreduce / MPI_Iallgather / MPI_Ireduce_scatter_block /
//                  MPI_Ibcast / MPI_Ialltoallv / MPI_Isend + MPI_Irecv, then a bounded wait
//                  (comm_mpi.cpp); all_to_all on CUDA is ncclSend + ncclRecv per peer in a group
//
// Counts are elements, never bytes. Tensors must be contiguous. A Comm made for CUDA
// still moves CPU tensors over MPI when MPI is up (not under a multi-process torchrun).
//
// A group of one moves nothing: all_reduce returns at once, all_gather / reduce_scatter
// copy `in` to `out` (nothing when they are the same memory), broadcast returns; none of
// them reaches the library or the ledger. (The arguments are still checked, so a bad call
// fails on one rank as it would on eight. Point-to-point and barrier are not shortcut.)
//
// The ledger. Every Comm has a name ("world", "tp", "cp", "pp", "dp", "cp_dp" in a Mesh)
// and counts, per collective kind, its calls and their elements, so the communication
// volume of a technique can be tested against its formula. Elements are those of the
// FULL buffer of the collective, the same on every rank of the group:
//
//   kind             elements per call                  e.g. p = 4 ranks, 10 elements each
//   all_reduce       n  (the tensor)                      10
//   all_gather       out.numel()  = p x the per-rank in   40
//   reduce_scatter   in.numel()   = p x the per-rank out  40
//   broadcast        n                                    10
//   send / recv      the elements sent / received: one entry per P2POp of a batch
//   all_to_all       the elements this rank sends to the OTHER ranks (its own rows stay)
//   barrier          0
//
// The ledger listens at the one seam where every communication is told (comm_listener.h):
// the world and every group split from it report to the same listeners, so --comm-report
// lists every group a run made. Async variants count when they are posted. Groups of one
// record nothing.
//
// Streams (CUDA). A synchronous call enqueues NCCL on the current stream and returns:
// stream order alone makes later kernels see the result, and the host keeps launching.
// An *_async call runs on the Comm's side stream (after the current stream's pending
// work, its tensors recordStream'ed), so backward kernels keep running while gradients
// travel; Work::wait() then makes the current stream wait for it.
//
// dtypes: float32, float64, bfloat16, float16, int32, int64. MPI has no bf16/fp16
// type: for reductions those are converted to fp32, reduced, and converted back
// (the sum is computed in fp32 and rounded once); for data movement (gather,
// broadcast, p2p) the raw 16-bit payload is sent as MPI_UINT16_T. kAvg is refused
// for integer tensors (an integer average would silently truncate).
//
// Failures never hang: every wait is bounded by the timeout given at creation.
// On timeout (a peer died or stopped answering) the wait throws CommError with the
// rank, the operation and the timeout; the caller (train.cpp's main) prints it and
// aborts the job. NCCL's asynchronous errors are polled (ncclCommGetAsyncError)
// while waiting, as PyTorch's watchdog does, and the communicator is aborted.
// A synchronous CUDA call has no host wait to bound: a watchdog thread of the
// communicator (comm_nccl.cpp) watches an event recorded after it, and past the
// timeout aborts the communicator, prints one line and ends the process.
//
// Test: ctest -R comm   (tests/mpi/comm_test.cpp; failure modes in tests/mpi/comm_failure.cpp)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <torch/types.h>

#include "picotron/comm_listener.h"

namespace picotron {

class Distributed;
namespace detail {
struct NcclComm;  // comm_nccl.cpp
}

// Thrown for communication failures (timeouts, library errors, bad arguments).
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ReduceOp { kSum, kAvg, kMax };

// One pending communication. wait() blocks (bounded by the Comm's timeout) until the
// operation has finished; for CUDA it then makes the current stream wait on the event
// recorded after the NCCL call. Safe to call twice. The destructor does not wait: an
// MPI operation still in flight then keeps its buffers alive until the process ends.
class Work {
 public:
  Work();  // empty: wait() returns at once
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  void wait();
  // Never blocks. MPI moves a non-blocking collective forward only while the process is
  // inside an MPI call, so a caller overlapping work with it (data parallelism's
  // backward) calls this now and then. NCCL progresses on its own: a no-op there.
  void progress();
  bool valid() const { return state_ != nullptr; }

  struct State;  // comm_internal.h: MPI requests or a CUDA event, plus buffers to keep alive
  explicit Work(std::unique_ptr<State> s);

 private:
  friend class Comm;  // tells the state which operations it completes (Comm::completes_in)
  std::unique_ptr<State> state_;
};

// One point-to-point operation of a batch (rings, pipelines).
struct P2POp {
  enum Kind { kSend, kRecv } kind;
  torch::Tensor tensor;  // contiguous; recv writes into it
  int peer;              // rank within this Comm
  int tag = 0;           // MPI: messages between two ranks match in posting order per tag
                         // (NCCL has no tags: it matches in posting order)
  // For the listeners only (comm_listener.h), when the ops of one batch differ: what this
  // message carries ("": the call site's words), and its micro-batch and stages (a pipeline's).
  const char* carries = "";
  StepPlace place = {};
};

class Comm {
 public:
  // The world communicator. Every rank of the job calls it. `device` decides whether
  // an NCCL communicator is created too (CUDA: on device.index() if given, else on the
  // current device) or only MPI is used (CPU). MPI_COMM_WORLD is duplicated, so our
  // traffic never mixes with anyone else's.
  static Comm world(const Distributed& dist, torch::Device device, std::chrono::seconds timeout);

  Comm() = default;  // an empty Comm (not part of any group)
  Comm(Comm&&) noexcept;
  Comm& operator=(Comm&&) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();  // frees the communicators (ncclCommDestroy / MPI_Comm_free)

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::seconds timeout() const { return timeout_; }
  torch::Device device() const { return device_; }
  const std::string& name() const { return name_; }  // "world", "tp", ... (for reports)

  // ---- the seam (comm_listener.h): who hears of every communication --------------------
  // Shared by the world and every group split from it. Adding a listener to any of them
  // adds it to all, the groups split later included.
  void listen(std::shared_ptr<CommListener> listener) const;
  void stop_listening(const CommListener* listener) const;
  const std::shared_ptr<CommListeners>& listeners() const { return listeners_; }
  int group_id() const { return group_id_; }  // this group's id among them (-1: an empty Comm)

  // ---- the ledger (a listener that always listens): calls and elements per kind ----------
  std::map<std::string, CommCount> ledger() const;
  void reset_ledger();

  // Synchronous NCCL operations enqueued but not yet seen complete by the watchdog
  // (comm_nccl.cpp); 0 for a CPU Comm. For tests: it drains once the GPU has run them.
  size_t pending_sync_ops() const;

  // ---- collectives (in place where the shapes allow) ---------------------------
  void all_reduce(torch::Tensor& t, ReduceOp op = ReduceOp::kSum, CallSite at = CallSite::here());  // [n] -> [n]
  void all_gather(torch::Tensor& out, const torch::Tensor& in, CallSite at = CallSite::here());  // [n] -> [size*n]
  void reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op = ReduceOp::kSum,
                      CallSite at = CallSite::here());  // in: [size*n] -> out: [n]
  void broadcast(torch::Tensor& t, int root, CallSite at = CallSite::here());
  // Rows of `in` to every rank, rows from every rank into `out` (expert parallelism's
  // dispatch and combine): rank r's send_rows[p] rows (in rank order along dim 0) go to
  // rank p, which receives them as its recv_rows[r] rows, in rank order.
  // in [sum send_rows, ...] -> out [sum recv_rows, ...]; the same trailing shape.
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& send_rows,
                  const std::vector<int64_t>& recv_rows, CallSite at = CallSite::here());
  void send(const torch::Tensor& t, int peer, CallSite at = CallSite::here());
  void recv(torch::Tensor& t, int peer, CallSite at = CallSite::here());
  void batch_p2p(const std::vector<P2POp>& ops, CallSite at = CallSite::here());  // posted together, then waited
  void barrier(CallSite at = CallSite::here());  // every rank's host has reached this call (MPI_Ibarrier; NCCL-only: a
                   // one-element all-reduce); GPU work already queued is not waited for

  // ---- asynchronous variants: return a handle; do not read or write the tensors -----
  // ---- before wait() (the Work keeps what the library uses alive) --------------------
  Work all_reduce_async(torch::Tensor& t, ReduceOp op = ReduceOp::kSum, CallSite at = CallSite::here());
  Work all_gather_async(torch::Tensor& out, const torch::Tensor& in, CallSite at = CallSite::here());
  Work reduce_scatter_async(torch::Tensor& out, const torch::Tensor& in, ReduceOp op = ReduceOp::kSum,
                            CallSite at = CallSite::here());
  Work batch_p2p_async(const std::vector<P2POp>& ops, CallSite at = CallSite::here());

  // Split into sub-groups: ranks with the same color form a group, ordered by key
  // (MPI_Comm_split / ncclCommSplit). Collective over this Comm. The sub-group is
  // called `name` (default: this Comm's name + "/split") and starts with an empty ledger.
  Comm split(int color, int key, std::string name = "");

  // Tear down without waiting for peers (ncclCommAbort); used on error paths.
  void abort();

 private:
  // Checks shared by both paths: defined, contiguous, a supported dtype, the Comm's
  // device, no integer average; throws CommError naming the rank, op and numbers.
  void check_tensor(const torch::Tensor& t, const char* op) const;
  void check_reduce(const torch::Tensor& t, ReduceOp reduce, const char* op) const;
  // The argument checks of each collective (comm_checks.cpp), shared by its sync and async forms.
  void check_all_gather(const torch::Tensor& out, const torch::Tensor& in) const;
  void check_reduce_scatter(const torch::Tensor& out, const torch::Tensor& in, ReduceOp op) const;
  void check_p2p(const std::vector<P2POp>& ops) const;
  // One more call, told to the listeners (the ledger first); a batch's operations share
  // `batch` = the first one's id (-1 for the first). issuing_ says which operations the call
  // has, until it completes.
  int64_t record(CommEvent event, int64_t batch = -1);
  void record_batch(const std::vector<P2POp>& ops, bool async, CallSite at);  // record() per op
  // The listeners hear that the call's operations (issuing_) completed when `w` is waited for.
  Work completes_in(Work w);
  // Tells the listeners this group exists (world() and split()).
  void join_listeners();

  // The CPU path, one function per MPI call (comm_mpi.cpp). Each posts the non-blocking
  // MPI call and returns a Work whose wait() is bounded by the timeout. Arguments are
  // already checked (comm_collectives.cpp).
  Work mpi_all_reduce(torch::Tensor& t, ReduceOp op);
  Work mpi_all_gather(torch::Tensor& out, const torch::Tensor& in);
  Work mpi_reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op);
  Work mpi_broadcast(torch::Tensor& t, int root);
  Work mpi_all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& send_rows,
                      const std::vector<int64_t>& recv_rows);
  Work mpi_batch_p2p(const std::vector<P2POp>& ops);
  Work mpi_barrier();

  // The CUDA path, one function per NCCL call (comm_nccl.cpp; without CUDA they only
  // throw). async=false: the current stream, no host wait, the watchdog bounds it.
  // async=true: a side stream, and the returned Work waits on its event. Arguments are
  // already checked (comm_collectives.cpp).
  void nccl_init_world(const Distributed& dist);
  void nccl_split(Comm& sub, int color, int key);
  void nccl_abort();
  Work nccl_all_reduce(torch::Tensor& t, ReduceOp op, bool async);
  Work nccl_all_gather(torch::Tensor& out, const torch::Tensor& in, bool async);
  Work nccl_reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op, bool async);
  void nccl_broadcast(torch::Tensor& t, int root);
  Work nccl_batch_p2p(const std::vector<P2POp>& ops, bool async);
  size_t nccl_pending_sync_ops() const;

  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;  // this process's global rank: every error message starts with it
  std::chrono::seconds timeout_{300};
  std::string name_;                            // "world", "tp", ...
  std::shared_ptr<CommListeners> listeners_;   // shared with the world and its groups
  int group_id_ = -1;                           // this group's id among them
  CommOps issuing_;                             // the operations of the call being issued (record())
  torch::Device device_{torch::kCPU};
  MPI_Comm mpi_ = MPI_COMM_NULL;  // CPU path (null when torchrun launched several processes)
  bool owns_mpi_ = false;         // mpi_ is ours to MPI_Comm_free
  // The ncclComm_t, its side stream and its watchdog (nccl.h stays out of this header).
  // Shared with the Works in flight, so a communicator outlives the operations using it.
  std::shared_ptr<detail::NcclComm> nccl_;
};

// Several tensors reduced over `group` in ONE call: flattened into one buffer, reduced,
// copied back in place. For small gradients fixed up after the sync (the norm gains over
// tp, the experts over their copies), where a call each would pay a latency each.
void all_reduce_together(const std::vector<torch::Tensor>& tensors, Comm& group, ReduceOp op = ReduceOp::kSum,
                         CallSite at = CallSite::here());

}  // namespace picotron
