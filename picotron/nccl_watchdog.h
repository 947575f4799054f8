// picotron/nccl_watchdog.h — one NCCL communicator (RAII), the side stream its
// async operations run on, and the watchdog thread that bounds its synchronous
// operations. Included by comm_nccl.cpp only (CUDA builds); the collectives are there.
//
// The watchdog (why a thread?). A synchronous call only enqueues NCCL's kernel and
// returns; nobody on the host ever waits for it. If a peer died, that kernel spins
// forever, the next .item() or checkpoint blocks in CUDA forever, and the job hangs
// with no message: the design's rule "no collective waits forever" would not hold. So,
// as PyTorch's ProcessGroupNCCL does with its watchdog thread, each communicator
// records a cheap event (timing disabled) after every synchronous call and hands
// (event, op, elements, deadline = now + timeout) to a thread of its own:
//
//   main thread:  ncclAllReduce ─ cudaEventRecord(e) ─ push {e, "all_reduce", n, deadline}
//                                                          │ (mutex; the main thread only pushes)
//   watchdog:     every 2 ms:  ncclCommGetAsyncError(comm)   NCCL saw an error -> die
//                              oldest entry: cudaEventQuery   done -> drop it, look at the next
//                                            past deadline    -> die
//   die:          the listeners told (comm_listener.h: the flight recorder writes its file), then one
//                 write(2) to stderr: "[rank R] error: all_reduce timed out after T s: a peer
//                 died or stopped answering (N elements, NCCL watchdog). Flight recorder: ...",
//                 ncclCommAbort (the kernels stop without waiting for peers), std::_Exit(1).
//   (an entry done: the listeners told it completed)
//
// Why end the process rather than throw? The error is found on the watchdog thread,
// while the main thread may be stuck inside a CUDA call that will never return; no
// exception can reach it. _Exit skips destructors (ncclCommDestroy, a CUDA sync would
// block again), and under mpirun a rank that exits non-zero takes the job down. The
// line is written before the abort so that it is seen even if the abort were to stall.
// Entries complete in order on one stream, so the oldest pending entry has the nearest
// deadline: the watchdog only ever looks at the front of its queue.
//
// Test (GPU machine): build/tests/unit_tests "[gpu]"   (the watchdog drains; skipped without a GPU)
#pragma once

#include <unistd.h>  // write(2)

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include "picotron/comm.h"
#include "picotron/comm_internal.h"
#include "picotron/comm_listener.h"

namespace picotron {

namespace {

[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* call, const char* file, int line, int rank) {
  throw CommError("[rank " + std::to_string(rank) + "] " + call + " failed at " + file + ":" + std::to_string(line) +
                  ": " + ncclGetErrorString(code) + " " + ncclGetLastError(nullptr));
}

}  // namespace

#define PICOTRON_NCCL_CHECK(rank, call)                                                    \
  do {                                                                                     \
    const ncclResult_t picotron_nccl_code_ = (call);                                       \
    if (picotron_nccl_code_ != ncclSuccess)                                                \
      throw_nccl_error(picotron_nccl_code_, #call, __FILE__, __LINE__, (rank));            \
  } while (0)

using Clock = std::chrono::steady_clock;

// One NCCL communicator, the side stream its async operations run on, and the watchdog
// thread that bounds its synchronous operations (RAII: the destructor joins the thread,
// then ncclCommDestroy).
struct detail::NcclComm {
  ncclComm_t comm;
  c10::cuda::CUDAStream side;
  c10::DeviceIndex device;
  int world_rank;                 // for the watchdog's message
  std::chrono::seconds timeout;   // the Comm's: how long a synchronous operation may take
  std::atomic<bool> aborted{false};

  NcclComm(ncclComm_t c, c10::DeviceIndex dev, int rank, std::chrono::seconds limit)
      : comm(c), side(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, dev)), device(dev),
        world_rank(rank), timeout(limit) {}
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() {
    // ncclCommDestroy waits for the communicator's pending work without any bound. So
    // first let the last synchronous operations finish within their deadlines; if one
    // cannot (a peer died), abort instead of destroying.
    const bool drained = wait_until_drained();
    stop_watchdog();
    if (aborted) return;
    if (drained) ncclCommDestroy(comm);
    else ncclCommAbort(comm);
  }
  // Kills the communicator's kernels without waiting for the peers (they may be dead).
  // The watchdog is stopped first: it must not touch a communicator that abort frees.
  void abort() {
    stop_watchdog();
    if (!aborted.exchange(true)) ncclCommAbort(comm);
  }

  // ---- the watchdog (see the file's header) ------------------------------------------
  struct SyncOp {
    cudaEvent_t done;               // recorded on the stream right after the NCCL call
    const char* op;                 // "all_reduce", ...
    int64_t numel;
    Clock::time_point deadline;     // enqueue time + timeout
    CommOps ops;                    // its operations, for the listeners (none: first = -1)
  };

  // Main thread, right after a synchronous NCCL call on `stream`.
  void watch(cudaStream_t stream, const char* op, int64_t numel, const std::shared_ptr<CommListeners>& told,
             CommOps ops) {
    cudaEvent_t done;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));  // timing off: cheaper
    C10_CUDA_CHECK(cudaEventRecord(done, stream));
    std::lock_guard<std::mutex> lock(mutex);
    if (told && !listeners) listeners = told;
    queue.push_back({done, op, numel, Clock::now() + timeout, ops});
    if (!thread.joinable()) thread = std::thread([this] { watchdog_loop(); });  // started lazily
  }

  size_t pending() const {
    std::lock_guard<std::mutex> lock(mutex);
    return queue.size();
  }

  // Until the watchdog has seen every synchronous operation complete, or the newest one
  // is past its deadline (false). Polls; the watchdog drains the queue meanwhile.
  bool wait_until_drained() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!queue.empty()) {
      if (Clock::now() > queue.back().deadline || !thread.joinable()) return false;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
    }
    return true;
  }

 private:
  mutable std::mutex mutex;         // guards queue and stopping
  std::condition_variable wake;
  std::deque<SyncOp> queue;         // oldest first
  std::shared_ptr<CommListeners> listeners;  // the Comm's listeners, once one op was watched
  bool stopping = false;
  std::thread thread;

  void stop_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (thread.joinable()) thread.join();
    for (SyncOp& s : queue) cudaEventDestroy(s.done);  // destroying a pending event is allowed
    queue.clear();
  }

  void watchdog_loop() {
    cudaSetDevice(device);  // this thread's CUDA calls go to the communicator's device
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      // Poll every 2 ms while something is pending; otherwise every 100 ms (async errors).
      const auto poll = queue.empty() ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2);
      if (wake.wait_for(lock, poll, [this] { return stopping; })) return;
      // 1. NCCL noticed an error by itself (a connection broke, ...).
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress)
        die(c10::str(queue.empty() ? "NCCL communicator" : queue.front().op, " failed: ",
                     ncclGetErrorString(async_error), " (",
                     queue.empty() ? 0 : queue.front().numel, " elements, NCCL watchdog)"));
      // 2. Drop what the GPU has finished, oldest first; stop at the first pending entry.
      while (!queue.empty()) {
        const SyncOp& oldest = queue.front();
        const cudaError_t state = cudaEventQuery(oldest.done);
        if (state == cudaSuccess) {
          if (listeners) listeners->completed(oldest.ops);
          cudaEventDestroy(oldest.done);
          queue.pop_front();
          continue;
        }
        if (state != cudaErrorNotReady)
          die(c10::str(oldest.op, " failed: CUDA error ", cudaGetErrorString(state), " (", oldest.numel,
                       " elements, NCCL watchdog)"));
        if (Clock::now() > oldest.deadline)
          die(c10::str(oldest.op, " timed out after ", timeout.count(), " s: a peer died or stopped answering (",
                       oldest.numel, " elements, NCCL watchdog)"));
        break;  // still running, within its deadline
      }
    }
  }

  // One line in one write(2) (ranks' lines never interleave), abort, end the process.
  [[noreturn]] void die(const std::string& what) {
    // First the listeners leave their evidence (the flight recorder writes its file): the
    // line below may point to it.
    const std::string where = listeners ? listeners->failing("NCCL watchdog: " + what, /*ending=*/true) : "";
    const std::string line = "[rank " + std::to_string(world_rank) + "] error: " + what + where + "\n";
    ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    (void)written;  // nothing more we could do if stderr is gone
    if (!aborted.exchange(true)) ncclCommAbort(comm);
    std::_Exit(1);
  }
};

}  // namespace picotron
