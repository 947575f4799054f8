// runtime/checkpoint/async_save.cpp — see async_save.h.
#include "runtime/checkpoint/async_save.h"

#include <chrono>
#include <cstdlib>

namespace picotron {

namespace {
// Whether `mine` holds on every rank (a collective: all ranks must call it).
bool on_every_rank(bool mine, Comm& world) {
  auto not_yet = torch::tensor({mine ? 0.0 : 1.0}, torch::TensorOptions().dtype(torch::kFloat64).device(world.device()));
  world.all_reduce(not_yet, ReduceOp::kMax);  // 1 when any rank lacks it
  return not_yet.item<double>() == 0.0;
}
}  // namespace

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

void Checkpointer::after_step(int64_t step_done, int64_t end_step, const TrainingCounters& counters,
                              const std::vector<StatePiece>& owned) {
  if (!settings_.async) {  // in the step: training waits for the whole write
    if (checkpoint_due(settings_, step_done, end_step)) save_checkpoint(settings_, counters, owned, world_);
    return;
  }
  if (pending_ && on_every_rank(pending_->done.load(), world_)) complete();  // every rank's file is written
  if (!checkpoint_due(settings_, step_done, end_step)) return;
  if (pending_) complete();  // the next save waits for the previous one
  start(counters, owned);
}

void Checkpointer::finish() {
  if (pending_) complete();
}

void Checkpointer::start(const TrainingCounters& counters, const std::vector<StatePiece>& owned) {
  const Timer stall;
  pending_ = std::make_unique<Pending>();
  Pending& p = *pending_;
  p.counters = counters;
  // The state as it is at this step boundary: the next step's optimizer update must not
  // reach the file. (On the GPU this is the device-to-host copy.)
  for (const auto& piece : owned) {
    StatePiece copy = piece;
    copy.data = piece.data.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();  // [flat_length]
    p.host.push_back(std::move(copy));
  }
  p.tmp = begin_save(settings_.save_dir, counters.step, world_);
  p.stall_s = stall.seconds();
  p.started_s = clock_.seconds();
  p.thread = std::thread([&p, rank = world_.rank(), size = world_.size()] {
    if (const char* ms = std::getenv("PICOTRON_FAULT_SLOW_SAVE_MS"))  // test hook: a slow disk
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(ms)));
    p.problem = write_rank_file(p.tmp, p.counters.step, rank, size, p.host);  // local: hash + write
    p.done.store(true);
  });
}

void Checkpointer::complete() {
  Pending& p = *pending_;
  const Timer waited;
  p.thread.join();
  const double wait_s = waited.seconds(), written_s = clock_.seconds() - p.started_s;
  const std::string where = finish_save(settings_.save_dir, settings_, p.counters, p.problem, world_);
  print0(world_.rank(), "saved checkpoint " + where + " (" + human_bytes(double(directory_bytes(where))) + ", " +
                            std::to_string(world_.size()) + " file(s); in the background: the step waited " +
                            seconds_text(p.stall_s) + " for the copy, the write took " + seconds_text(written_s) +
                            (wait_s > 0.01 ? ", of which " + seconds_text(wait_s) + " waited for" : "") + ")");
  pending_.reset();
}

}  // namespace picotron
