// runtime/observe/flight_recorder.cpp — the ring of a rank's last communications, and its file.
//
// The file, DIR/comms-rank<R>.json (scripts/hang_report.py reads it):
//
//   {"rank": 1, "world_size": 2, "reason": "...", "dumped_at_s": 12.5, "start_unix_s": ...,
//    "capacity": 4096, "recorded": 812,
//    "groups":  [{"id": 0, "name": "world", "ranks": [0, 1], "rank": 1}, ...],
//    "entries": [{"id": 800, "group": 3, "op": "send", "seq": 5, "elements": 8192,
//                 "dtype": "float32", "peer": 0, "peer_world": 0, "batch": 799, "async": false,
//                 "site": "pipeline_parallel/pipeline_parallel.cpp:230", "function": "exchange",
//                 "note": "...", "state": "waiting", "issued_s": 3.2, "waiting_s": 3.2,
//                 "completed_s": null}, ...]}    (state: issued, waiting (the host in Work::wait), completed)
//
// entries: oldest first. Written with plain open/write/rename: it runs on a dying process
// (a signal, the watchdog), where nothing may throw and nothing may wait for a peer.
//
// Test: ctest -L flight   (tests/cmake/flight_tests.cmake)
#include "runtime/observe/flight_recorder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <cstring>
#include <iostream>
#include <sstream>

#include "picotron/comm_internal.h"
#include "runtime/observe/comm_title.h"

namespace picotron {

namespace {
using Clock = std::chrono::steady_clock;

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

// The project's files as the report names them: "picotron/comm.cpp", not "/work/x/picotron/comm.cpp".
std::string site_of(const CallSite& at) {
  std::string file = at.file;
  for (const char* top : {"/picotron/", "/pipeline_parallel/", "/tensor_parallel/", "/data_parallel/",
                          "/context_parallel/", "/zero/", "/expert_parallel/", "/kernels/", "/runtime/", "/tests/"}) {
    const auto at_top = file.rfind(top);
    if (at_top != std::string::npos) {
      file = file.substr(at_top + 1);
      break;
    }
  }
  if (file.find('/') != std::string::npos && file.rfind("train.cpp") == file.size() - 9) file = "train.cpp";
  return file + ":" + std::to_string(at.line);
}

bool make_dirs(const std::string& dir) {  // mkdir -p
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') {
      const std::string part = dir.substr(0, i);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  return true;
}
}  // namespace

FlightRecorder::FlightRecorder(int world_rank, int world_size, int64_t capacity, int64_t timeout_s)
    : world_rank_(world_rank), world_size_(world_size), timeout_s_(timeout_s), start_(Clock::now()),
      start_unix_s_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()),
      capacity_(std::max<int64_t>(capacity, 1)), beat_([this] { watch_pauses(); }) {}

FlightRecorder::~FlightRecorder() {
  {
    std::lock_guard<std::mutex> lock(beat_mutex_);
    stopping_ = true;
  }
  beat_stop_.notify_all();
  beat_.join();
}

void FlightRecorder::watch_pauses() {
  std::unique_lock<std::mutex> lock(beat_mutex_);
  last_beat_s_.store(now_s());
  while (!beat_stop_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping_; })) {
    const double t = now_s(), gap = t - last_beat_s_.load();
    if (gap > longest_pause_s_.load()) {
      int64_t issued;
      {
        std::lock_guard<std::mutex> ring_lock(mutex_);
        issued = next_id_ - 1;  // (-1: none yet)
      }
      longest_pause_s_.store(gap);
      paused_after_.store(issued);
    }
    last_beat_s_.store(t);
  }
}

void FlightRecorder::set_dump_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  dir_ = std::move(dir);
  // The crash writer's paths, made now: a signal handler may not allocate.
  const std::string path = dir_ + "/comms-rank" + std::to_string(world_rank_) + ".json";
  crash_path_.assign(path.begin(), path.end());
  crash_path_.push_back('\0');
  crash_tmp_.assign(path.begin(), path.end());
  for (char c : std::string(".crash")) crash_tmp_.push_back(c);
  crash_tmp_.push_back('\0');
}

std::string FlightRecorder::hint() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dir_.empty()) return "";
  return ". Flight recorder: every rank's last communications are in " + dir_ +
         "/comms-rank*.json; read them with: scripts/hang_report.py " + dir_;
}

void FlightRecorder::joined(const CommGroup& group) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (size_t(group.id) >= groups_.size()) groups_.resize(size_t(group.id) + 1);
  groups_[size_t(group.id)] = group;
}

double FlightRecorder::now_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

// The ring: entry `id` lives in slot (id - first_id_) % capacity. It grows with what it holds
// (one slot per entry until capacity), so a large --flight-entries costs nothing up front.
const FlightEntry* FlightRecorder::slot_of(int64_t id) const {
  const int64_t i = (id - first_id_) % capacity_;
  return size_t(i) < ring_.size() && ring_[size_t(i)].id == id ? &ring_[size_t(i)] : nullptr;
}

void FlightRecorder::issued(const CommGroup& /*group*/, const CommEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (first_id_ < 0) first_id_ = e.id;
  const size_t i = size_t((e.id - first_id_) % capacity_);
  if (i == ring_.size()) ring_.emplace_back();
  FlightEntry& slot = ring_[i];
  slot.id = e.id;
  slot.group = e.group;
  slot.op = e.kind;
  slot.reduce = e.reduce;
  slot.seq = e.seq;
  slot.elements = e.elements;
  slot.dtype = e.dtype;
  slot.peer = e.peer;
  slot.batch = e.batch;
  slot.async = e.async;
  slot.at = e.at;
  slot.place = e.place;
  slot.backward = e.backward;
  slot.state = FlightEntry::kIssued;
  slot.issued_s = now_s();
  slot.waiting_s = slot.completed_s = 0;
  next_id_ = e.id + 1;
  ++recorded_;
}

void FlightRecorder::waiting(CommOps ops) { set_state(ops, FlightEntry::kWaiting); }
void FlightRecorder::completed(CommOps ops) { set_state(ops, FlightEntry::kCompleted); }

std::string FlightRecorder::failing(const std::string& why, bool /*ending*/) {
  // Written now, before the error line that points to it: the process may end without
  // unwinding (the NCCL watchdog), and the line names the files only if they are there.
  const std::string path = dump("timeout or communication error: " + why);
  if (path.empty()) return dump_dir().empty() ? "" : ". Flight recorder: could not write its file in " + dump_dir() + " (the line above says why)";
  return hint();
}

bool FlightRecorder::written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return written_;
}

void FlightRecorder::set_run(std::string id, double launched_unix_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  run_id_ = std::move(id);
  launched_unix_s_ = launched_unix_s;
}

void FlightRecorder::set_state(CommOps ops, FlightEntry::State state) {
  if (ops.first < 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const double t = now_s();
  for (int64_t id = ops.first; id < ops.first + ops.count; ++id) {
    auto* slot = first_id_ < 0 || id < first_id_ ? nullptr : const_cast<FlightEntry*>(slot_of(id));  // (ours to change)
    if (!slot) continue;  // overwritten since (or issued before the recorder listened)
    slot->state = state;
    (state == FlightEntry::kWaiting ? slot->waiting_s : slot->completed_s) = t;
  }
}

int64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recorded_;
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out.precision(6);
  out << std::fixed;
  out << "{\"rank\": " << world_rank_ << ", \"world_size\": " << world_size_ << ", \"reason\": " << json_string(reason)
      << ", \"run_id\": " << json_string(run_id_) << ", \"launched_unix_s\": " << launched_unix_s_
      << ", \"dumped_at_s\": " << now_s() << ", \"start_unix_s\": " << start_unix_s_ << ", \"capacity\": " << capacity_
      << ", \"recorded\": " << recorded_ << ", \"timeout_s\": " << timeout_s_;
  // The longest pause, or the one going on now (the watch has not woken since it began).
  const double now = now_s(), since_beat = now - last_beat_s_.load();
  const bool pausing = since_beat > longest_pause_s_.load();
  out << ", \"paused_s\": " << (pausing ? since_beat : longest_pause_s_.load())
      << ", \"paused_after\": " << (pausing ? next_id_ - 1 : paused_after_.load()) << ",\n \"groups\": [";
  for (size_t i = 0; i < groups_.size(); ++i) {
    const CommGroup& g = groups_[i];
    out << (i ? ",\n  " : "\n  ") << "{\"id\": " << i << ", \"name\": " << json_string(g.name) << ", \"ranks\": [";
    for (size_t r = 0; r < g.world_ranks.size(); ++r) out << (r ? ", " : "") << g.world_ranks[r];
    out << "], \"rank\": " << g.rank << ", \"size\": " << g.size << "}";
  }
  out << "],\n \"entries\": [";
  bool first = true;
  for (int64_t id = std::max<int64_t>(std::max<int64_t>(first_id_, 0), next_id_ - capacity_); id < next_id_; ++id) {  // oldest first
    const FlightEntry* slot = slot_of(id);
    if (!slot || slot->group < 0 || size_t(slot->group) >= groups_.size()) continue;
    const FlightEntry& e = *slot;
    const CommGroup& g = groups_[size_t(e.group)];
    const int peer_world = e.peer >= 0 && size_t(e.peer) < g.world_ranks.size() ? g.world_ranks[size_t(e.peer)] : -1;
    out << (first ? "\n  " : ",\n  ") << "{\"id\": " << e.id << ", \"group\": " << e.group << ", \"op\": \"" << e.op
        << "\", \"reduce\": \"" << e.reduce << "\", \"seq\": " << e.seq << ", \"elements\": " << e.elements
        << ", \"dtype\": \"" << detail::dtype_name(e.dtype) << "\", \"peer\": " << e.peer
        << ", \"peer_world\": " << peer_world << ", \"batch\": " << e.batch
        << ", \"async\": " << (e.async ? "true" : "false") << ", \"site\": " << json_string(site_of(e.at))
        << ", \"function\": " << json_string(e.at.function) << ", \"note\": " << json_string(comm_title(e.place, e.backward, e.at.carries, /*with_micro_batch=*/true))
        << ", \"state\": \""
        << (e.state == FlightEntry::kCompleted ? "completed" : e.state == FlightEntry::kWaiting ? "waiting" : "issued")
        << "\", \"issued_s\": " << e.issued_s << ", \"waiting_s\": ";
    if (e.state != FlightEntry::kIssued) out << e.waiting_s;
    else out << "null";
    out << ", \"completed_s\": ";
    if (e.state == FlightEntry::kCompleted) out << e.completed_s;
    else out << "null";
    out << "}";
    first = false;
  }
  out << "]}\n";
  return out.str();
}

std::string FlightRecorder::dump(const std::string& reason) const {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    dir = dir_;
  }
  if (dir.empty()) return "";
  std::lock_guard<std::mutex> one_at_a_time(dump_mutex_);
  try {
    const std::string text = to_json(reason);
    const std::string path = dir + "/comms-rank" + std::to_string(world_rank_) + ".json";
    const std::string tmp = path + ".tmp";
    const auto fail = [&](const char* what) {
      std::cerr << "[rank " << world_rank_ << "] flight recorder: could not write " << path << ": " << what << ": "
                << std::strerror(errno) << std::endl;
      return std::string();
    };
    if (!make_dirs(dir)) return fail("mkdir");
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail("open");
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n <= 0) {
        ::close(fd);
        return fail("write");
      }
      done += size_t(n);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");  // atomic: never half a file
    std::lock_guard<std::mutex> lock(mutex_);
    written_ = true;
    return path;
  } catch (const std::exception& e) {  // (out of memory while formatting)
    std::cerr << "[rank " << world_rank_ << "] flight recorder: " << e.what() << std::endl;
    return "";
  }
}

// ---- written from a signal handler (a crash) ------------------------------------------------
// Only async-signal-safe calls (open, write, rename, clock_gettime) and no allocation, no lock:
// the process is dying, perhaps inside malloc or holding the ring's mutex. The entries are read
// as they are (a call being recorded by another thread may show half-written). Numbers are
// formatted by hand into a fixed buffer; the file has the fields the report reads, the note
// being the call site's own words (the title is composed with strings: not here).
namespace {
struct SignalWriter {
  int fd = -1;
  char buf[4096];
  size_t n = 0;
  void flush() {
    for (size_t done = 0; done < n;) {
      const ssize_t w = ::write(fd, buf + done, n - done);
      if (w <= 0) break;
      done += size_t(w);
    }
    n = 0;
  }
  void put(const char* s) {
    for (; *s; ++s) {
      if (n == sizeof buf) flush();
      buf[n++] = *s;
    }
  }
  void str(const char* s) {  // a JSON string
    put("\"");
    for (; s && *s; ++s) {
      const char c = static_cast<unsigned char>(*s) < 0x20 ? ' ' : *s;
      const char one[2] = {c, '\0'};
      if (c == '"' || c == '\\') put("\\");
      put(one);
    }
    put("\"");
  }
  void num(int64_t v) {
    char d[24];
    int i = 23;
    d[i] = '\0';
    const bool neg = v < 0;
    uint64_t u = neg ? uint64_t(-(v + 1)) + 1 : uint64_t(v);
    do { d[--i] = char('0' + u % 10); u /= 10; } while (u);
    if (neg) d[--i] = '-';
    put(d + i);
  }
  void seconds(double s) {  // microseconds, as a fixed-point number
    const int64_t us = int64_t(s * 1e6 + (s >= 0 ? 0.5 : -0.5));
    num(us / 1000000);
    put(".");
    char f[7] = {0};
    int64_t r = us % 1000000;
    if (r < 0) r = -r;
    for (int i = 5; i >= 0; --i) f[i] = char('0' + r % 10), r /= 10;
    put(f);
  }
};
const char* dtype_text(torch::ScalarType t) {  // as c10::getDtypeNames names them, without a string
  switch (t) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kBFloat16: return "bfloat16";
    case torch::kHalf: return "float16";
    case torch::kLong: return "int64";
    case torch::kInt: return "int32";
    default: return "other";
  }
}
const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}
}  // namespace

void FlightRecorder::write_from_signal(int sig) const {
  if (crash_path_.empty() || crash_path_.size() > 4096) return;
  char dirs[4096];  // mkdir -p of the file's folder (mkdir is async-signal-safe)
  for (size_t i = 1; i < crash_path_.size(); ++i) {
    if (crash_path_[i] != '/') continue;
    std::memcpy(dirs, crash_path_.data(), i);
    dirs[i] = '\0';
    ::mkdir(dirs, 0755);
  }
  const int fd = ::open(crash_tmp_.data(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const double now = double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9 -
                     std::chrono::duration<double>(start_.time_since_epoch()).count();
  SignalWriter w;
  w.fd = fd;
  w.put("{\"rank\": "), w.num(world_rank_), w.put(", \"world_size\": "), w.num(world_size_);
  w.put(", \"reason\": \"crash: "), w.put(signal_name(sig));
  w.put(" inside this rank (written from the signal handler: its last communications, as they were)\"");
  w.put(", \"run_id\": "), w.str(run_id_.c_str()), w.put(", \"launched_unix_s\": "), w.seconds(launched_unix_s_);
  w.put(", \"dumped_at_s\": "), w.seconds(now), w.put(", \"start_unix_s\": "), w.seconds(start_unix_s_);
  w.put(", \"capacity\": "), w.num(capacity_), w.put(", \"recorded\": "), w.num(recorded_);
  w.put(", \"timeout_s\": "), w.num(timeout_s_), w.put(", \"paused_s\": 0, \"paused_after\": -1,\n \"groups\": [");
  for (size_t i = 0; i < groups_.size(); ++i) {
    const CommGroup& g = groups_[i];
    w.put(i ? ",\n  {\"id\": " : "\n  {\"id\": "), w.num(int64_t(i)), w.put(", \"name\": "), w.str(g.name.c_str());
    w.put(", \"ranks\": [");
    for (size_t r = 0; r < g.world_ranks.size(); ++r) w.put(r ? ", " : ""), w.num(g.world_ranks[r]);
    w.put("], \"rank\": "), w.num(g.rank), w.put(", \"size\": "), w.num(g.size), w.put("}");
  }
  w.put("],\n \"entries\": [");
  const int64_t last = std::min<int64_t>(256, capacity_);  // the newest, enough to see where it was
  bool first = true;
  for (int64_t id = std::max<int64_t>(std::max<int64_t>(first_id_, 0), next_id_ - last); id < next_id_; ++id) {
    const int64_t i = (id - first_id_) % capacity_;
    if (first_id_ < 0 || size_t(i) >= ring_.size()) continue;
    const FlightEntry& e = ring_[size_t(i)];
    if (e.id != id || e.group < 0 || size_t(e.group) >= groups_.size()) continue;
    const CommGroup& g = groups_[size_t(e.group)];
    const int peer_world = e.peer >= 0 && size_t(e.peer) < g.world_ranks.size() ? g.world_ranks[size_t(e.peer)] : -1;
    w.put(first ? "\n  {\"id\": " : ",\n  {\"id\": "), w.num(e.id), w.put(", \"group\": "), w.num(e.group);
    w.put(", \"op\": "), w.str(e.op), w.put(", \"reduce\": "), w.str(e.reduce), w.put(", \"seq\": "), w.num(e.seq);
    w.put(", \"elements\": "), w.num(e.elements), w.put(", \"dtype\": "), w.str(dtype_text(e.dtype));
    w.put(", \"peer\": "), w.num(e.peer), w.put(", \"peer_world\": "), w.num(peer_world), w.put(", \"batch\": "), w.num(e.batch);
    w.put(", \"async\": "), w.put(e.async ? "true" : "false"), w.put(", \"site\": \""), w.put(e.at.file), w.put(":"), w.num(e.at.line);
    w.put("\", \"function\": "), w.str(e.at.function), w.put(", \"note\": "), w.str(e.at.carries);
    w.put(", \"state\": "), w.str(e.state == FlightEntry::kCompleted ? "completed" : e.state == FlightEntry::kWaiting ? "waiting" : "issued");
    w.put(", \"issued_s\": "), w.seconds(e.issued_s), w.put(", \"waiting_s\": ");
    if (e.state != FlightEntry::kIssued) w.seconds(e.waiting_s); else w.put("null");
    w.put(", \"completed_s\": ");
    if (e.state == FlightEntry::kCompleted) w.seconds(e.completed_s); else w.put("null");
    w.put("}");
    first = false;
  }
  w.put("]}\n");
  w.flush();
  ::close(fd);
  ::rename(crash_tmp_.data(), crash_path_.data());
}

}  // namespace picotron
