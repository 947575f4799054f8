// zero/zero1.h — ZeRO-1 (Rajbhandari et al., arXiv 1910.02054, section 5.1): each of the
// N ranks of the cp×dp group keeps the optimizer state of a 1/N slice of the parameters.
//
// Plain data parallelism keeps, on every rank, the same fp32 master weights and the same
// two AdamW moments, and every rank runs the same update. ZeRO-1 lays this rank's
// parameters end to end in buckets (zero/zero_layout.h), pads each bucket to a multiple
// of N and gives rank r the r-th 1/N of each. Rank r keeps master weights and moments for
// its slice only, and updates only its slice:
//
//   bucket parameters [padded], compute dtype (the model's tensors are views into them)
//   |  rank 0 part  |  rank 1 part  |  ...  | rank N-1 part |pad|
//
//   backward:    every rank accumulates the FULL fp32 gradient of its micro-batches
//   sync:        reduce-scatter(avg)  [padded] -> [padded / N]: the averaged gradient of my part
//   norm:        squares of my slice (each element counted once), all-reduced over the world
//   step:        AdamW on my slice of master, m, v                      [P_pad / N]
//   all-gather:  my updated part -> every rank's bucket parameters      [padded]
//
// A reduce-scatter followed by an all-gather moves exactly what one all-reduce moves (the
// ring all-reduce IS those two), so stage 1 costs no extra communication and saves
// 2 x 4 bytes (moments) + 4 bytes (master, for bf16) per parameter, times (N-1)/N.
// Parameters straddle slice boundaries freely: the slice is elementwise, AdamW is
// elementwise, and the weight-decay and norm-counting rules become per-element runs.
//
// ZeRO-2 (zero/zero2.h) and ZeRO-3 (zero/zero3.h) derive from this class and change
// where the gradients and the parameters live; the update is this file's.
//
// Test: build/tests/unit_tests "[zero]"; ctest -R "zero|data_parallel.overlap"
#pragma once

#include <cstdint>
#include <functional>
#include <map>
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

class Zero1Optimizer : public Optimizer {
 public:
  // The model's parameters become views into the bucket buffers (their values kept).
  // `groups`: the group the slices are spread over (cp×dp; with --zero-shard, its shard
  // group, the slices replicated over the rest: zero/zero_groups.h). `here`: this rank's coordinates
  // (which copies count in the norm). `bucket_mb`: the buckets' size. `offload`
  // (ZeRO-Offload, arXiv 2101.06840): master weights and moments in (pinned) CPU memory,
  // AdamW on the CPU; the gradient slice is copied down, the weights up.
  Zero1Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb,
                 bool offload = false)
      : Zero1Optimizer(std::move(groups), named_params, opts, plan, here, bucket_mb, offload, /*stage=*/1, /*units=*/{}) {}
  Zero1Optimizer(const Zero1Optimizer&) = delete;
  Zero1Optimizer& operator=(const Zero1Optimizer&) = delete;

  // ---- the Optimizer interface (picotron/optim.h) ----
  // One entry per parameter (name, param, record). Stage 1: with its FULL gradient
  // (main_grad), which sequence parallelism and a pipeline's tied embedding fix up before
  // the sync. Master and moments live in the slice.
  std::vector<TrainableParam>& params() override { return params_; }
  void zero_main_grads() override;
  void prepare_backward(bool last_micro_batch) override {}
  void accumulate_grads() override;  // main_grad += grad (bf16/fp16; fp32 accumulates in place)
  // The registered sums on the full gradient, then reduce-scatter(avg) it into my slice,
  // bucket by bucket (HSDP: then averaged over the replicas).
  void sync_grads() override;
  double grad_norm(Comm& world, const MeshCoords& here) override;
  // AdamW on my slice from grad_scale * gradient, then every rank's parts to every rank.
  void step(double lr, double grad_scale) override;
  int64_t steps_taken() const override { return t_; }
  void set_steps_taken(int64_t t) override { t_ = t; }
  std::vector<StatePiece> owned_state(const MeshCoords& here) override;  // my pieces of each parameter
  void load_state(const StateReader& read) override;
  std::map<std::string, torch::Tensor> masters_by_name() override;  // all-gathered (collective)
  std::map<std::string, torch::Tensor> weights_by_name() override;
  torch::ScalarType state_dtype() const override { return grad_.scalar_type(); }  // fp32 (fp64)
  std::string summary() const override;  // the stage, N, and what this rank keeps

  // ---- for tests and tools ----
  const ZeroLayout& layout() const { return layout_; }
  // My slice of the AdamW moments [P_pad / N] (tests compare them with AdamW's).
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  // Bytes this rank keeps between steps (stage 2's transient bucket buffers not counted).
  struct Bytes {
    int64_t params, grads, master, optimizer;
    bool offloaded;  // master and optimizer in CPU memory
  };
  Bytes bytes() const;
  // With record_events on: stage 2 "launch bucket 3", "backward end"; stage 3 also
  // "gather layer 1", "forward layer 0", "forward end layer 0", "release layer 0",
  // "backward head" (the overlap and prefetch tests).
  void set_record_events(bool on) { record_events_ = on; }
  const std::vector<std::string>& events() const { return events_; }

 protected:
  // For the stages above: `full_gradient` false keeps no full gradient (stages 2, 3);
  // `units` (one id per parameter) starts a bucket wherever the id changes: stage 3's
  // units (one bucket each, whatever the size), stage 2's embedding alone in a pipeline.
  Zero1Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, double bucket_mb, bool offload,
                 int stage, const std::vector<int>& units);

  // HSDP (--zero-shard): my slice's gradient is the average over my shard group; the
  // replicas (my slice in every other shard group) average theirs with it: then it is the
  // average over the whole cp×dp group. Once per step, after the last micro-batch.
  void average_over_replicas();

  torch::Tensor slice_of(const torch::Tensor& shard_buffer, const ZeroLayout::Bucket& b) const;  // my part of b
  // My part of bucket b's parameters in the compute dtype (stage 3: in my shard).
  virtual torch::Tensor my_params(size_t bucket) const;
  // After the update of bucket b (my part `w`): stages 1 and 2 all-gather every rank's
  // part into every rank's parameters; stage 3 keeps only its shard.
  virtual void publish(size_t bucket, const torch::Tensor& w);
  // My piece of a parameter's weights (for checkpoints); whether the whole parameter is here.
  virtual torch::Tensor weights_piece(const ZeroLayout::Piece& piece) const;
  virtual bool keeps_whole_parameters() const { return true; }
  torch::Tensor master_piece(const ZeroLayout::Piece& piece) const;
  void record(const std::string& e) { if (record_events_) events_.push_back(e); }

  ZeroGroups groups_;  // the shard group (the whole cp×dp group without --zero-shard), replicas, hpZ
  Comm& group_;        // = groups_.shard(): the slices are 1/N of it
  AdamWOptions opts_;
  int stage_;
  bool offload_;
  ZeroLayout layout_;
  int64_t t_ = 0;
  std::vector<TrainableParam> params_;
  std::vector<torch::Tensor> bucket_param_;  // per bucket [padded] compute dtype: the model's tensors are views
  torch::Tensor flat_grad_;   // stage 1: [P_pad] fp32 (fp64), the full accumulated gradient
  torch::Tensor grad_;        // [P_pad / N] my slice of the averaged gradient
  torch::Tensor host_grad_;   // offload: [P_pad / N] its copy in CPU memory
  torch::Tensor master_;      // [P_pad / N] fp32 for bf16/fp16 runs (and offload); fp32/fp64 runs update my_params in place
  bool master_in_place_ = false;
  torch::Tensor exp_avg_, exp_avg_sq_;  // [P_pad / N]
  struct Run {                // a stretch of my slice [offset, offset + length) under the same rules
    int64_t offset, length;
    bool decay;               // weight decay applies (matrices)
    bool counts;              // counts in the gradient norm (not a tp / pp copy counted elsewhere)
  };
  std::vector<std::vector<Run>> runs_;  // per bucket, in slice order (padding is in none)
  bool record_events_ = false;
  std::vector<std::string> events_;
};

}  // namespace picotron
