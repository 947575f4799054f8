// picotron/comm_listener.cpp — the listeners of a world's groups, and the ledger (see comm_listener.h).
#include "picotron/comm_listener.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace picotron {

void CommListeners::add(std::shared_ptr<CommListener> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const CommGroup& g : groups_) listener->joined(g);
  listeners_.push_back(std::move(listener));
}

void CommListeners::remove(const CommListener* listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [&](const std::shared_ptr<CommListener>& l) { return l.get() == listener; }),
                   listeners_.end());
}

int CommListeners::join(CommGroup group) {
  std::lock_guard<std::mutex> lock(mutex_);
  group.id = int(groups_.size());
  Counters c;
  c.sent.assign(size_t(std::max(group.size, 1)), 0);
  c.received = c.sent;
  counters_.push_back(std::move(c));
  groups_.push_back(std::move(group));
  for (const auto& l : listeners_) l->joined(groups_.back());
  return groups_.back().id;
}

int64_t CommListeners::issue(int group, CommEvent e, int64_t batch) {
  std::lock_guard<std::mutex> lock(mutex_);
  Counters& c = counters_.at(size_t(group));
  const bool is_send = std::strcmp(e.kind, "send") == 0, is_recv = std::strcmp(e.kind, "recv") == 0;
  const bool peer_ok = e.peer >= 0 && size_t(e.peer) < c.sent.size();
  e.group = group;
  e.id = next_id_++;
  e.seq = is_send && peer_ok ? ++c.sent[size_t(e.peer)] : is_recv && peer_ok ? ++c.received[size_t(e.peer)]
                                                                           : ++c.collectives;
  e.batch = batch;
  if (e.place.micro_batch < 0 && e.place.layer < 0 && e.place.part == Part::kNone && e.place.from_stage < 0)
    e.place = current_place();  // (a pipeline message brings its own)
  e.backward = in_backward();
  CommCount& n = c.ledger[e.kind];
  n.calls += 1;
  n.elements += e.elements;
  for (const auto& l : listeners_) l->issued(groups_[size_t(group)], e);
  return e.id;
}

void CommListeners::waiting(CommOps ops) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& l : listeners_) l->waiting(ops);
}

void CommListeners::completed(CommOps ops) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& l : listeners_) l->completed(ops);
}

std::string CommListeners::failing(const std::string& why, bool ending) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string words;
  for (const auto& l : listeners_) words += l->failing(why, ending);
  return words;
}

// ---- the ledger ------------------------------------------------------------------------

std::vector<CommGroup> CommListeners::groups() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_;
}

std::map<std::string, CommCount> CommListeners::ledger(int group) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_.at(size_t(group)).ledger;
}

void CommListeners::reset_ledger(int group) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_.at(size_t(group)).ledger.clear();
}

void CommListeners::reset_ledgers() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Counters& c : counters_) c.ledger.clear();
}

std::string CommListeners::report(int world_rank, int64_t steps) const {
  if (steps < 1) throw std::invalid_argument("comm_report: steps must be at least 1, got " + std::to_string(steps));
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "communication of rank " << world_rank << " over " << steps << " step" << (steps == 1 ? "" : "s")
      << " (elements of the full buffer, see comm.h)\n";
  auto per_step = [&](int64_t total) {  // an integer when it divides, else one decimal
    std::ostringstream v;
    if (total % steps == 0) v << total / steps;
    else v << std::fixed << std::setprecision(1) << double(total) / double(steps);
    return v.str();
  };
  // One row per (group name, size, kind), in the order the groups were made. A rank is in one
  // group of each name; a group made again over the same ranks (say by two optimizers) is
  // summed with the first.
  std::vector<std::pair<std::string, int>> names;  // (name, size)
  std::map<std::pair<std::string, int>, std::map<std::string, CommCount>> by_name;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const std::pair<std::string, int> key{groups_[i].name, groups_[i].size};
    if (!by_name.count(key)) names.push_back(key), by_name[key];
    for (const auto& [kind, n] : counters_[i].ledger) {
      CommCount& sum = by_name[key][kind];
      sum.calls += n.calls, sum.elements += n.elements;
    }
  }
  int width = 8;  // the group column: as wide as the longest name ("cp_dp_replicas")
  for (const auto& key : names) width = std::max(width, int(key.first.size()) + 1);
  std::ostringstream rows;
  for (const auto& key : names) {
    const auto& ledger = by_name.at(key);
    for (const char* kind : kCommKinds) {
      auto it = ledger.find(kind);
      if (it == ledger.end() || it->second.calls == 0) continue;
      const CommCount& n = it->second;
      rows << std::left << std::setw(width) << key.first << std::right << std::setw(4) << key.second << "  " << std::left
           << std::setw(16) << kind << std::right << std::setw(8) << n.calls << std::setw(14) << n.elements
           << std::setw(12) << per_step(n.calls) << std::setw(15) << per_step(n.elements) << "\n";
    }
  }
  if (rows.str().empty()) return out.str() + "no communication: every ledger is empty\n";
  out << std::left << std::setw(width) << "group" << std::right << std::setw(4) << "size" << "  " << std::left
      << std::setw(16) << "kind" << std::right << std::setw(8) << "calls" << std::setw(14) << "elements"
      << std::setw(12) << "calls/step" << std::setw(15) << "elements/step" << "\n";
  return out.str() + rows.str();
}

}  // namespace picotron
