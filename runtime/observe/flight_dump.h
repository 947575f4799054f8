// runtime/observe/flight_dump.h — when a run writes its flight recorder's files
// (runtime/observe/flight_recorder.h: every rank's last communications), and where.
//
//   a Comm's timeout (MPI)     the recorder writes them as the wait fails (Work::wait tells the
//                              listeners, picotron/comm_listener.h), before the error line
//   the NCCL watchdog          the same, then it ends the process (nccl_watchdog.h)
//   any other error            the same unwinding
//   SIGTERM / SIGINT           (mpirun sends SIGTERM to every rank when one fails) a thread
//                              of this object writes them, then the signal ends the process
//   a crash                    SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (a double free inside
//                              the MPI library, say): the handler writes the newest 256 entries
//                              itself, async-signal-safe, then the signal's old action runs
//   the end of the run         with --flight-dump-at-end
//
// Each rank writes DIR/comms-rank<R>.json alone (tmp + rename), without a message to
// anyone: it works when every other rank is dead. Every file names its run: an id that all
// ranks of one launch share (rank 0's, broadcast when the recorder starts) and the launch
// time, so scripts/hang_report.py reads one run's files from a folder several runs wrote. DIR is --flight-recorder, by default
// <--save-dir>/flight, else flight/ in the working directory; "off" records nothing.
// Then: scripts/hang_report.py DIR.
//
// Why a thread for the signals? A signal handler may only call async-signal-safe
// functions (write(2), not malloc or a mutex), and the ring is behind a mutex. So the
// handler writes the signal's number into a pipe (the self-pipe trick) and returns; the
// thread reading the pipe writes the file with ordinary code, then restores the default
// action and raises the signal again, so the process ends as the launcher expects.
//
// Test: ctest -L flight   (tests/cmake/flight_tests.cmake)
#pragma once

#include <csignal>
#include <memory>
#include <string>
#include <thread>

#include "picotron/comm.h"

namespace picotron {

class FlightRecorder;

// What the flight recorder reads of the run's flags (cut from them in runtime/cli/settings.h).
struct FlightSettings {
  std::string dir;  // --flight-recorder, else <--save-dir>/flight, else flight/ ("": off, --flight-recorder off)
  int64_t entries = 4096;  // --flight-entries: the communications each rank keeps
  int64_t timeout_s = 300;  // --timeout-s, recorded in the file (hang_report.py reads it)
  bool dump_at_end = false;  // --flight-dump-at-end: write the files after a run that went well too
};

class FlightDump {
 public:
  // Makes a recorder listen to `world` (and every group split from it) and starts
  // watching for SIGTERM / SIGINT. Off: does nothing.
  FlightDump(const FlightSettings& settings, Comm& world);
  FlightDump(const FlightDump&) = delete;
  FlightDump& operator=(const FlightDump&) = delete;
  ~FlightDump();  // unwinding an error, or --flight-dump-at-end: writes the file

 private:
  std::shared_ptr<FlightRecorder> recorder_;
  std::shared_ptr<CommListeners> listeners_;  // the world's, which the recorder listens to
  int rank_ = 0;
  bool at_end_ = false;
  int pipe_[2] = {-1, -1};           // the signal handler writes the signal's number into [1]
  std::thread signal_thread_;         // reads [0]: writes the file, then ends the process
  struct sigaction old_term_ {}, old_int_ {};
};

}  // namespace picotron
