// picotron/comm_nccl.cpp — Comm's collectives for CUDA tensors: raw NCCL on CUDA streams.
// Compiled only in CUDA builds (PICOTRON_WITH_CUDA); comm.cpp has the stubs otherwise.
// The public entry points (comm_collectives.cpp) check the arguments, shortcut groups of one and
// keep the ledger, then call the nccl_* body here.
//
// Every function has the same shape: choose the stream, make the one NCCL call, return.
//
//   synchronous:  current stream ──[ncclAllReduce]──●done──> later kernels see the result
//                 (stream order is enough: the host does not wait; the watchdog watches `done`)
//
//   async (DP):   current stream ──●ready
//                 side stream        └─wait─[ncclAllReduce]──●done
//                 Work::wait(): the host polls `done` (cudaEventQuery) until the deadline,
//                 checking ncclCommGetAsyncError; on error or timeout ncclCommAbort and
//                 throw. Then the current stream waits on `done` (no host sync needed
//                 for ordering). The tensors are recordStream'ed on the side stream so the
//                 caching allocator does not hand their memory out while NCCL uses it.
//
// The watchdog that bounds the synchronous calls, and the communicator it belongs to:
// picotron/nccl_watchdog.h.
//
// NCCL's unique id (rank 0 creates it, every rank needs it before ncclCommInitRank):
//   MPI up (mpirun, srun, single)  MPI_Bcast of its 128 bytes
//   torchrun                        a c10d TCPStore at MASTER_ADDR:MASTER_PORT; rank 0 is
//                                   the server, unless torchrun's agent already runs one
//                                   (TORCHELASTIC_USE_AGENT_STORE): then all are clients and
//                                   keys live under /worker/attempt_<restart count>/
//
// Test (GPU machine): mpirun -np 2 build/tests/comm_tests --device cuda
//                    build/tests/unit_tests "[gpu]"   (the watchdog drains; skipped without a GPU)
#include <cstdlib>
#include <cstring>
#include <thread>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "picotron/comm.h"
#include "picotron/comm_internal.h"
#include "picotron/nccl_watchdog.h"
#include "picotron/distributed.h"

namespace picotron {


namespace {

ncclDataType_t nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kInt32: return ncclInt32;
    default: return ncclInt64;  // check_tensor allows nothing else
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;  // NCCL divides by the group size itself
    default: return ncclMax;
  }
}

// A pending async NCCL operation: the event recorded on the side stream after it.
struct NcclWork final : Work::State {
  std::shared_ptr<detail::NcclComm> nccl;  // keeps the communicator alive until we are done
  c10::cuda::CUDAEvent done;
  const char* op;
  int64_t numel;
  int rank;
  std::chrono::seconds timeout;

  void wait() override {
    const auto start = Clock::now();
    while (!done.query()) {
      ncclResult_t async_error = ncclSuccess;
      PICOTRON_NCCL_CHECK(rank, ncclCommGetAsyncError(nccl->comm, &async_error));
      if (async_error != ncclSuccess && async_error != ncclInProgress) {  // in progress: not an error
        nccl->abort();
        throw_nccl_error(async_error, op, __FILE__, __LINE__, rank);
      }
      if (Clock::now() - start > timeout) {
        nccl->abort();  // otherwise its kernel spins on the GPU forever
        throw CommError(detail::timeout_message(rank, op, timeout, c10::str(numel, " elements, NCCL")));
      }
      std::this_thread::yield();
    }
    done.block(c10::cuda::getCurrentCUDAStream());  // later kernels of the current stream follow
  }
  bool safe_to_destroy() override { return true; }  // the allocator knows (recordStream)
};

// Where an operation runs. Synchronous: the current stream. Async: the side stream,
// after everything already queued on the current stream (which produced the inputs).
cudaStream_t choose_stream(detail::NcclComm& nc, bool async, std::initializer_list<torch::Tensor> tensors) {
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  if (!async) return current.stream();
  c10::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(nc.side);
  for (const torch::Tensor& t : tensors) t.record_stream(nc.side.unwrap());
  return nc.side.stream();
}

// After the NCCL call on `stream`. Synchronous: nothing to wait for, the watchdog watches
// it (and tells the listeners it completed when the GPU has run it). Async: a Work on the
// side stream's event (Comm::completes_in hands it the operations).
Work finish(const std::shared_ptr<detail::NcclComm>& nc, cudaStream_t stream, bool async, const char* op,
            int64_t numel, int rank, std::chrono::seconds timeout,
            const std::shared_ptr<CommListeners>& listeners, CommOps ops) {
  if (!async) {
    nc->watch(stream, op, numel, listeners, ops);
    return Work();
  }
  auto w = std::make_unique<NcclWork>();
  w->nccl = nc;
  w->done.record(nc->side);
  w->op = op;
  w->numel = numel;
  w->rank = rank;
  w->timeout = timeout;
  return Work(std::move(w));
}

// torchrun has no MPI: rank 0 publishes the id in a TCPStore and the others read it.
// The store is returned so that rank 0's server outlives ncclCommInitRank (which returns
// only once every rank has joined, i.e. has read the id).
c10::intrusive_ptr<c10d::Store> share_id_through_store(const LaunchInfo& info, ncclUniqueId& id,
                                                       std::chrono::seconds timeout) {
  const std::string key = "picotron/nccl_unique_id";
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(info.master_port);
    options.isServer = info.rank == 0 && !info.agent_store;  // torchrun's agent may already serve
    options.waitWorkers = false;
    options.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(info.master_addr, options);
    if (info.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(info.restart_count), store);
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    if (info.rank == 0) {
      store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      std::vector<uint8_t> value = store->get(key);  // waits up to `timeout` for rank 0
      detail::comm_check(value.size() == sizeof(id), "[rank ", info.rank, "] ", key, " has ", value.size(),
                         " bytes, expected ", sizeof(id));
      std::memcpy(&id, value.data(), sizeof(id));
    }
    return store;
  } catch (const c10::Error& e) {
    throw CommError(c10::str("[rank ", info.rank, "] could not share NCCL's unique id through the TCPStore at ",
                             info.master_addr, ":", info.master_port, ": ", e.what_without_backtrace()));
  }
}

}  // namespace

// ---- creation and teardown ----------------------------------------------------

void Comm::nccl_init_world(const Distributed& dist) {
  if (device_.has_index()) c10::cuda::set_device(device_.index());
  device_ = torch::Device(torch::kCUDA, c10::cuda::current_device());
  ncclUniqueId id;
  if (rank_ == 0) PICOTRON_NCCL_CHECK(world_rank_, ncclGetUniqueId(&id));
  c10::intrusive_ptr<c10d::Store> store;  // torchrun only; kept until every rank has joined
  if (mpi_ != MPI_COMM_NULL)
    PICOTRON_MPI_CHECK(world_rank_, MPI_Bcast(&id, sizeof(id), MPI_BYTE, /*root=*/0, mpi_));
  else
    store = share_id_through_store(dist.info(), id, timeout_);
  ncclComm_t comm;
  PICOTRON_NCCL_CHECK(world_rank_, ncclCommInitRank(&comm, size_, id, rank_));
  nccl_ = std::make_shared<detail::NcclComm>(comm, device_.index(), world_rank_, timeout_);
}

void Comm::nccl_split(Comm& sub, int color, int key) {
  c10::cuda::CUDAGuard guard(device_.index());
  ncclComm_t comm;
  PICOTRON_NCCL_CHECK(world_rank_, ncclCommSplit(nccl_->comm, color, key, &comm, /*config=*/nullptr));
  sub.nccl_ = std::make_shared<detail::NcclComm>(comm, device_.index(), world_rank_, timeout_);
  if (sub.mpi_ == MPI_COMM_NULL) {  // no MPI to tell us: ask NCCL
    PICOTRON_NCCL_CHECK(world_rank_, ncclCommUserRank(comm, &sub.rank_));
    PICOTRON_NCCL_CHECK(world_rank_, ncclCommCount(comm, &sub.size_));
  }
}

void Comm::nccl_abort() { nccl_->abort(); }

size_t Comm::nccl_pending_sync_ops() const { return nccl_->pending(); }

// ---- collectives (arguments already checked by the entry points in comm_collectives.cpp)

Work Comm::nccl_all_reduce(torch::Tensor& t, ReduceOp op, bool async) {
  c10::cuda::CUDAGuard guard(t.device());
  cudaStream_t stream = choose_stream(*nccl_, async, {t});
  PICOTRON_NCCL_CHECK(world_rank_, ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), nccl_op(op),
                                                 nccl_->comm, stream));
  return finish(nccl_, stream, async, "all_reduce", t.numel(), world_rank_, timeout_, listeners_, issuing_);
}

Work Comm::nccl_all_gather(torch::Tensor& out, const torch::Tensor& in, bool async) {
  c10::cuda::CUDAGuard guard(in.device());
  cudaStream_t stream = choose_stream(*nccl_, async, {in, out});
  // sendcount = elements per rank; in place when `in` is this rank's slot of `out`.
  PICOTRON_NCCL_CHECK(world_rank_, ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in),
                                                 nccl_->comm, stream));
  return finish(nccl_, stream, async, "all_gather", out.numel(), world_rank_, timeout_, listeners_, issuing_);
}

Work Comm::nccl_reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp op, bool async) {
  c10::cuda::CUDAGuard guard(in.device());
  cudaStream_t stream = choose_stream(*nccl_, async, {in, out});
  // recvcount = elements per rank (out); rank r receives chunk r of the reduced `in`.
  PICOTRON_NCCL_CHECK(world_rank_, ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in),
                                                     nccl_op(op), nccl_->comm, stream));
  return finish(nccl_, stream, async, "reduce_scatter", in.numel(), world_rank_, timeout_, listeners_, issuing_);
}

void Comm::nccl_broadcast(torch::Tensor& t, int root) {
  c10::cuda::CUDAGuard guard(t.device());
  cudaStream_t stream = choose_stream(*nccl_, /*async=*/false, {t});
  PICOTRON_NCCL_CHECK(world_rank_, ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root,
                                                 nccl_->comm, stream));
  finish(nccl_, stream, /*async=*/false, "broadcast", t.numel(), world_rank_, timeout_, listeners_, issuing_);
}

// The sends and receives of one batch are posted inside one NCCL group: NCCL then runs
// them together, so a ring (everyone sends right and receives from the left) cannot
// deadlock on who goes first.
Work Comm::nccl_batch_p2p(const std::vector<P2POp>& ops, bool async) {
  int64_t numel = 0;  // for the messages: every element sent or received
  for (const P2POp& p : ops) numel += p.tensor.numel();
  c10::cuda::CUDAGuard guard(device_);
  cudaStream_t stream = choose_stream(*nccl_, async, {});
  PICOTRON_NCCL_CHECK(world_rank_, ncclGroupStart());
  for (const P2POp& p : ops) {
    if (async) p.tensor.record_stream(nccl_->side.unwrap());
    if (p.kind == P2POp::kSend)
      PICOTRON_NCCL_CHECK(world_rank_, ncclSend(p.tensor.data_ptr(), p.tensor.numel(), nccl_type(p.tensor), p.peer,
                                                nccl_->comm, stream));
    else
      PICOTRON_NCCL_CHECK(world_rank_, ncclRecv(p.tensor.data_ptr(), p.tensor.numel(), nccl_type(p.tensor), p.peer,
                                                nccl_->comm, stream));
  }
  PICOTRON_NCCL_CHECK(world_rank_, ncclGroupEnd());
  return finish(nccl_, stream, async, "batch_p2p", numel, world_rank_, timeout_, listeners_, issuing_);
}

}  // namespace picotron
