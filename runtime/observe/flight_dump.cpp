// runtime/observe/flight_dump.cpp — the flight recorder's files: on an error, a signal, or
// at the end (see the header).
#include "runtime/observe/flight_dump.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>

#include "runtime/observe/flight_recorder.h"

namespace picotron {

namespace {
// The globals: a signal handler reaches nothing else. The write end of the pipe (SIGTERM, SIGINT).
volatile std::sig_atomic_t g_signal_pipe = -1;

// A crash (SIGSEGV, SIGABRT, ...): the recorder writes what it has from the handler itself
// (FlightRecorder::write_from_signal: async-signal-safe), then the action there was before
// (Open MPI's, which prints a backtrace, or the default) takes the signal again.
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
std::atomic<const FlightRecorder*> g_crash_recorder{nullptr};
struct sigaction g_crash_old[5];

extern "C" void on_crash(int sig) {
  if (const FlightRecorder* r = g_crash_recorder.exchange(nullptr)) r->write_from_signal(sig);
  for (size_t i = 0; i < 5; ++i)
    if (kCrashSignals[i] == sig) sigaction(sig, &g_crash_old[i], nullptr);
  raise(sig);  // taken when this returns: the old action now
}

extern "C" void on_signal(int sig) {  // async-signal-safe: one write(2)
  const unsigned char number = static_cast<unsigned char>(sig);
  if (g_signal_pipe >= 0) {
    const ssize_t written = ::write(g_signal_pipe, &number, 1);
    (void)written;
  }
}
}  // namespace

FlightDump::FlightDump(const FlightSettings& settings, Comm& world)
    : rank_(world.rank()), at_end_(settings.dump_at_end) {
  const std::string& dir = settings.dir;
  if (dir.empty()) return;
  recorder_ = std::make_shared<FlightRecorder>(world.rank(), world.size(), settings.entries, settings.timeout_s);
  // The run's id, the same on every rank of this launch: rank 0's random number and clock,
  // broadcast (before the recorder listens: it is not one of the run's communications).
  auto run = torch::zeros({2}, torch::TensorOptions().dtype(torch::kInt64).device(world.device()));  // [id, launched ms]
  if (world.rank() == 0) {
    std::random_device entropy;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    run[0] = int64_t((uint64_t(entropy()) << 31) ^ uint64_t(entropy())) & ((int64_t(1) << 62) - 1);
    run[1] = int64_t(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
  }
  world.broadcast(run, /*root=*/0, carries("the flight recorder: this run's id and launch time"));
  const auto got = run.to(torch::kCPU);
  char id[24];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(got[0].item<int64_t>()));
  recorder_->set_run(id, double(got[1].item<int64_t>()) / 1000.0);
  std::error_code ignored;  // absolute: the timeout line's path works from any directory
  const std::filesystem::path absolute = std::filesystem::absolute(dir, ignored);
  recorder_->set_dump_dir(absolute.empty() ? dir : absolute.lexically_normal().string());
  listeners_ = world.listeners();
  world.listen(recorder_);  // every group of the run, those split later too
  g_crash_recorder = recorder_.get();
  struct sigaction crash {};
  crash.sa_handler = on_crash;
  sigemptyset(&crash.sa_mask);
  for (size_t i = 0; i < 5; ++i) sigaction(kCrashSignals[i], &crash, &g_crash_old[i]);
  if (::pipe2(pipe_, O_CLOEXEC) != 0) return;  // no signal watch; errors and the end still write
  g_signal_pipe = pipe_[1];
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &old_term_);
  sigaction(SIGINT, &action, &old_int_);
  signal_thread_ = std::thread([this] {
    unsigned char sig = 0;
    while (::read(pipe_[0], &sig, 1) < 0 && errno == EINTR) {
    }
    if (sig == 0) return;  // the destructor: the run is over
    const std::string path = recorder_->dump(std::string("signal ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") +
                                             ": the launcher or a user ended this rank");
    if (!path.empty()) std::cerr << "[rank " << rank_ << "] flight recorder: wrote " << path << std::endl;
    std::signal(sig, SIG_DFL);  // and end as the signal would have
    std::raise(sig);
  });
}

FlightDump::~FlightDump() {
  if (!recorder_) return;
  std::string path;
  if (std::uncaught_exceptions() > 0) {  // run() is unwinding an error: its line follows
    if (!recorder_->written())  // (a timeout wrote its own as it failed)
      path = recorder_->dump("error: the run ended with an error (this rank's error line says which)");
  } else if (at_end_)
    path = recorder_->dump("end of the run (--flight-dump-at-end)");
  if (!path.empty()) std::cerr << "[rank " << rank_ << "] flight recorder: wrote " << path << std::endl;
  if (listeners_) listeners_->remove(recorder_.get());
  if (g_crash_recorder.exchange(nullptr))  // the crash handlers go with the recorder
    for (size_t i = 0; i < 5; ++i) sigaction(kCrashSignals[i], &g_crash_old[i], nullptr);
  if (signal_thread_.joinable()) {  // stop watching: the old actions back, the thread woken and joined
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    g_signal_pipe = -1;
    const unsigned char stop = 0;
    const ssize_t written = ::write(pipe_[1], &stop, 1);
    (void)written;
    signal_thread_.join();
  }
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

}  // namespace picotron
