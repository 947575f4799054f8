// zero/zero_shard.h — what every ZeRO stage owns (zero1.h, zero2.h, zero3.h each hold one):
// the flat buffers the model's parameters live in, this rank's slice of them, and the
// update of that slice, which is plain AdamW (picotron/optim.h) run over the slice.
//
//   bucket b [padded], compute dtype (the model's tensors are views into it)
//   |  rank 0 part  |  rank 1 part  |  ...  | rank N-1 part |pad|     (zero/zero_layout.h)
//
//   my slice [P_pad / N]: my part of every bucket, end to end
//     grad                the averaged gradient of my part (each stage fills it its way)
//     master, m, v        AdamW's state for my part (master: the parameters themselves in
//                         fp32/fp64 runs; offload: all three in pinned CPU memory)
//
//   update(lr, c)         AdamW on my slice: one TrainableParam per stretch of it with the
//                         same weight-decay rule, so the update is AdamW's, element for element
//   all_gather_params(b)  everyone's updated part into everyone's bucket (stages 1 and 2)
//   average_over_replicas HSDP: my slice's gradient averaged over the shard groups
//   grad_norm             the squares of my slice's elements that count, over the world
//
// Test: build/tests/unit_tests "[zero]"; ctest -L zero
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/mesh_grid.h"
#include "picotron/optim.h"
#include "picotron/shard.h"
#include "zero/zero_groups.h"
#include "zero/zero_layout.h"

namespace picotron {

class ZeroShard {
 public:
  struct Options {
    int64_t bucket_capacity = INT64_MAX;  // elements per bucket (stage 3: one bucket per unit)
    std::vector<int> units;               // a new bucket wherever the id changes (zero_layout)
    bool whole_parameters = true;         // every rank keeps the whole parameters (stages 1, 2);
                                          // false: only its part, in a shard buffer (stage 3)
    bool offload = false;                 // ZeRO-Offload (arXiv 2101.06840): master and moments
                                          // in (pinned) CPU memory, AdamW on the CPU
  };
  // The model's parameters become views into the bucket buffers (their values kept).
  ZeroShard(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
            AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, Options options);
  ZeroShard(const ZeroShard&) = delete;
  ZeroShard& operator=(const ZeroShard&) = delete;

  // ---- the buffers ----
  ZeroGroups groups;                  // the shard group (cp x dp, or --zero-shard's), replicas, hpZ
  Comm& group;                        // = groups.shard(): the slices are 1/N of it
  ZeroLayout layout;
  std::vector<TrainableParam> params; // name, param, shard record, decay; main_grad: the stage's
  std::vector<torch::Tensor> bucket;  // per bucket [padded] compute dtype: the model's tensors are views
  torch::Tensor grad;                 // [P_pad / N] my slice of the averaged gradient
  torch::Tensor slice(const torch::Tensor& shard_buffer, size_t b) const;  // my part of bucket b in it
  torch::Tensor my_params(size_t b) const;  // my part of bucket b's parameters, compute dtype

  // ---- the update of my slice, and what moves it ----
  void update(double lr, double grad_scale);  // AdamW on my slice; stage 3: into my shard
  void all_gather_params(size_t b);           // everyone's updated part -> everyone's bucket b
  void average_over_replicas();               // HSDP: once per step, after the last micro-batch
  double grad_norm(Comm& world);

  // ---- for the state view (zero/zero_state.h) and tests ----
  const Options& options() const { return options_; }
  bool master_in_place() const { return master_in_place_; }
  AdamW& adamw() { return *adamw_; }
  const torch::Tensor& exp_avg() const { return exp_avg_; }      // [P_pad / N]
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  int64_t master_elements() const { return master_.defined() ? master_.numel() : 0; }
  torch::Tensor master_piece(const ZeroLayout::Piece& piece) const;   // my piece of a parameter's master
  torch::Tensor weights_piece(const ZeroLayout::Piece& piece) const;  // ... of its weights
  // With record_events on: stage 2 "launch bucket 3", "backward end"; stage 3 also
  // "gather layer 1", "forward layer 0", "forward end layer 0", "release layer 0",
  // "backward head" (the overlap and prefetch tests).
  void set_record_events(bool on) { record_events_ = on; }
  const std::vector<std::string>& events() const { return events_; }
  void record(const std::string& e) { if (record_events_) events_.push_back(e); }

 private:
  Options options_;
  torch::Tensor shard_params_;  // stage 3: [P_pad / N] compute dtype, my part of every bucket, kept for good
  torch::Tensor master_;        // [P_pad / N] fp32 for bf16/fp16 runs (and offload); else undefined
  bool master_in_place_ = false;  // fp32/fp64 without offload: the parameters are the masters
  torch::Tensor host_grad_;     // offload: [P_pad / N] the gradient slice, copied down
  torch::Tensor exp_avg_, exp_avg_sq_;  // [P_pad / N]
  struct Run {                  // a stretch of my slice [offset, offset + length) under the same rules
    int64_t offset, length;
    bool decay;                 // weight decay applies (matrices)
    bool counts;                // counts in the gradient norm (not a tp / pp copy counted elsewhere)
  };
  std::vector<Run> runs_;       // in slice order (padding is in none)
  std::unique_ptr<AdamW> adamw_;  // plain AdamW over my slice's stretches
  bool record_events_ = false;
  std::vector<std::string> events_;
};

// Elements of the state dtype (fp32, fp64 in fp64 runs) in a bucket of `bucket_mb` MiB.
int64_t zero_bucket_capacity(double bucket_mb, const std::vector<std::pair<std::string, torch::Tensor>>& named_params);

// What every stage shows the training loop (the step) and tests (its shard).
class ZeroOptimizer : public Optimizer {
 public:
  virtual ZeroShard& shard() = 0;
};

}  // namespace picotron
