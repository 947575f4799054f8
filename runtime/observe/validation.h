// runtime/observe/validation.h — --val-data: the validation loss, on any mesh.
//
// The mean next-token loss over the same K global batches of held-out tokens (batch k is
// drawn from the --val-data tokens as the training batch of step k is from --data),
// computed exactly as the training loss is: each rank's micro-batches forward only (a
// pipeline runs its schedule's forwards: Pipeline::evaluate), each micro-batch's mean
// divided by m, averaged over cp x dp. So it is the same number on every layout, like the
// training loss (ctest -R equivalence.val_). Cost: K forward passes of the global batch,
// no backward, no optimizer, one all-reduce of one element per batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/data.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "pipeline_parallel/pipeline_parallel.h"

namespace picotron {

// What --val-data's loss reads of the run's flags (cut from them in runtime/cli/settings.h).
struct ValidationSettings {
  int64_t every = 0;  // --eval-every (0: after the last step only)
  int64_t batches = 4;  // --eval-batches: the same K global batches each time
  uint64_t seed = 0;  // --seed, --seq-len, --micro-batch-size, --grad-acc-steps: the batches
  int64_t seq_len = 0;  //   are cut as the training batches are
  int64_t micro_batch_size = 0;
  int64_t grad_acc_steps = 0;
};

// The validation batches of this rank: --val-data's global batches cut as the training
// batches are (dp rank, micro-batches; cp: this rank's positions `cp_positions`), or
// nothing without --val-data. Rank 0 says what and how often.
std::optional<BatchLoader> validation_batches(const std::shared_ptr<TokenSource>& source,
                                              const ValidationSettings& settings, Mesh& mesh,
                                              const std::vector<int64_t>& cp_positions);
// "validation loss 4.7 (perplexity 110) over K global batches": --steps 0's report.
std::string validation_line(double loss, int64_t batches);
// `pipeline`: null unless pp > 1. Collective over the world.
double validation_loss(LlamaForCausalLM& model, Pipeline* pipeline, Mesh& mesh, const BatchLoader& val,
                       int64_t batches, int64_t grad_acc_steps, torch::Device device);
// Whether 1-based step `step` of a run ending at `last` evaluates: every `every` steps
// (0: never but the last), and the last.
inline bool evaluation_due(int64_t step, int64_t last, int64_t every) {
  return step == last || (every > 0 && step % every == 0);
}

}  // namespace picotron
