// Data parallelism under mpirun (ctest -R data_parallel):
//   * bucketed DP launches at least one bucket's all-reduce BEFORE backward ends (the
//     overlap), naive DP launches none before;
//   * no-sync micro-batches launch nothing;
//   * after the sync, every rank holds the gradient of the whole global batch, equal
//     (fp64, 1e-12) to a single-process backward over all rows computed here.
// Prints "N passed, N failed"; exits non-zero on any failure.
#include <torch/torch.h>

#include <iostream>

#include "data_parallel/data_parallel.h"
#include "picotron/comm.h"
#include "picotron/data.h"
#include "picotron/distributed.h"
#include "picotron/init.h"
#include "picotron/model.h"
#include "picotron/optim.h"

#include "mpi_check.h"

using namespace picotron;

namespace {

using testing::check;

LlamaConfig config() {
  LlamaConfig c = preset("tiny");
  c.hidden_size = 64; c.intermediate_size = 128; c.num_hidden_layers = 2;
  return c;
}

std::vector<std::pair<std::string, torch::Tensor>> named(LlamaForCausalLM& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

// Position of the first event starting with `prefix` (events.size() if none).
size_t first(const std::vector<std::string>& events, const std::string& prefix) {
  for (size_t i = 0; i < events.size(); ++i)
    if (events[i].rfind(prefix, 0) == 0) return i;
  return events.size();
}

}  // namespace

int main() {
  Distributed dist(detect_launch(process_environment()));
  torch::set_num_threads(1);
  Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(60));
  const int rank = world.rank(), size = world.size();
  auto source = open_data("arithmetic", 256, 16);
  BatchLoader loader(source, 9, 16, /*B=*/2, /*acc=*/1, /*dp=*/size);

  // Reference: one process, the whole global batch, fp64.
  LlamaForCausalLM ref(config());
  ref->to(torch::kFloat64);
  init_parameters(*ref, 5, 0.02);
  const auto global = loader.global_batch(0);
  ref->loss(global.inputs, global.targets).backward();

  for (DpMode mode : {DpMode::kBucketed, DpMode::kNaive}) {
    const std::string tag = std::string(dp_mode_name(mode)) + ": ";
    LlamaForCausalLM model(config());
    model->to(torch::kFloat64);
    init_parameters(*model, 5, 0.02);
    AdamW opt(named(model), {});
    DataParallel dp(world, opt.params(), mode, /*bucket_mb=*/0.05);
    const auto batch = loader.micro_batch(0, 0, rank);

    // A no-sync micro-batch (gradient accumulation): nothing is launched.
    dp.set_record_events(true);
    dp.prepare_backward(/*sync=*/false);
    (model->loss(batch.inputs, batch.targets) * 0.5).backward();
    opt.accumulate_grads();
    check(first(dp.events(), "launch") == dp.events().size(), tag + "no-sync backward launched nothing", rank);

    // The synchronising micro-batch.
    dp.prepare_backward(/*sync=*/true);
    (model->loss(batch.inputs, batch.targets) * 0.5).backward();
    opt.accumulate_grads();
    dp.finish_gradient_sync();
    const auto& ev = dp.events();
    const size_t launch = first(ev, "launch"), end = first(ev, "backward end");
    if (mode == DpMode::kBucketed) {
      check(dp.num_buckets() > 1, tag + "several buckets (" + std::to_string(dp.num_buckets()) + ")", rank);
      check(launch < end, tag + "a bucket all-reduce was launched before backward ended", rank);
      if (rank == 0) {
        std::cout << "bucketed events:";
        for (const auto& e : ev) std::cout << " [" << e << "]";
        std::cout << std::endl;
      }
    } else {
      check(launch > end && launch < ev.size(), tag + "all-reduces launched only after backward ended", rank);
    }
    // Every rank now holds the gradient of the whole global batch.
    double worst = 0;
    for (auto& p : opt.params()) {
      const auto& g_ref = ref->named_parameters()[p.name].grad();
      worst = std::max(worst, (p.main_grad - g_ref).abs().max().item<double>() /
                                  std::max(1e-300, g_ref.abs().max().item<double>()));
    }
    check(worst < 1e-12, tag + "averaged gradient equals the full-batch gradient (rel err " + std::to_string(worst) + ")", rank);
  }
  // A second backward without prepare_backward would launch buckets early: it throws.
  {
    LlamaForCausalLM model(config());
    model->to(torch::kFloat64);
    init_parameters(*model, 5, 0.02);
    AdamW opt(named(model), {});
    DataParallel dp(world, opt.params(), DpMode::kBucketed, /*bucket_mb=*/0.05);
    const auto batch = loader.micro_batch(0, 0, rank);
    dp.prepare_backward(/*sync=*/false);  // no-sync: nothing is launched, so no rank waits on another
    model->loss(batch.inputs, batch.targets).backward();
    std::string error;
    try {
      model->loss(batch.inputs, batch.targets).backward();
    } catch (const std::exception& e) {
      error = e.what();
    }
    check(error.find("arrived twice since prepare_backward()") != std::string::npos,
          "a second backward without prepare_backward throws (got: '" + error.substr(0, 80) + "')", rank);
  }
  world.barrier();
  return testing::summary(rank);
}
