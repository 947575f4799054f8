// zero/zero.h — ZeRO (Rajbhandari et al., arXiv 1910.02054): data parallelism without
// N copies of the optimizer, the gradients, and (stage 3) the parameters.
//
// Plain data parallelism keeps, on each of the N ranks of the cp×dp group, the same
// fp32 master weights and the same two AdamW moments, and every rank runs the same
// update. ZeRO-1 lays this rank's parameters end to end in buckets, pads each bucket to
// a multiple of N and gives rank r the r-th 1/N of each. Rank r keeps master weights and
// moments for its slice only, and updates only its slice:
//
//   bucket parameters [padded], compute dtype (the model's tensors are views into them)
//   |  rank 0 part  |  rank 1 part  |  ...  | rank N-1 part |pad|
//
//   backward:     every rank accumulates the FULL fp32 gradient of its micro-batches
//   sync:         reduce-scatter(avg)  [padded] -> [padded / N]: the averaged gradient of my part
//   norm:         squares of my slice (each element counted once), all-reduced over the world
//   step:         AdamW on my slice of master, m, v                      [P_pad / N]
//   all-gather:   my updated part -> every rank's bucket parameters      [padded]
//
// A reduce-scatter followed by an all-gather moves exactly what one all-reduce moves
// (the ring all-reduce IS those two), so stage 1 costs no extra communication and saves
// 2 x 4 bytes (moments) + 4 bytes (master, for bf16) per parameter, times (N-1)/N.
// Parameters straddle slice boundaries freely: the slice is elementwise, AdamW is
// elementwise, and the weight-decay and norm-counting rules become per-element masks.
//
// ZeRO-2 also never keeps the full gradient: during each micro-batch's backward a hook
// copies every gradient into its bucket and frees it; a complete bucket is
// reduce-scattered at once (overlapping the rest of backward, as data_parallel/ does
// with all-reduce), and only my part of it is added into my slice. At most two buckets
// are in flight: the full gradient never exists. The price: with grad accumulation the
// gradients travel every micro-batch (m reduce-scatters instead of one).
//
// ZeRO-3 also never keeps the full parameters: rank r keeps only its slice of them. The
// buckets are the model's units (the embedding, each decoder layer, the head = final
// norm + lm_head), and a unit's parameters are views into one buffer [padded] whose
// storage is RELEASED (emptied) while the unit is not computing, and refilled by an
// all-gather of the N parts just before it is (through the model's layer and part runners):
//
//   forward of unit k:   wait for k's gather | launch k+1's gather (prefetch) | compute | release k
//   backward of unit k:  (a hook on k's output) wait for k's gather | launch k-1's | compute
//                        | k's gradients complete: release k, reduce-scatter them (as stage 2)
//   step:                AdamW on my slice of the parameters; no all-gather (forward gathers)
//
// Releasing empties the storage the views share (FSDP's trick), so the tensors autograd
// saved for backward are emptied too, and the backward gather refills them in place.
// The head, the last unit, is kept from its forward to its backward, which follows at
// once; a tied embedding (the head's matrix too) is kept from the head's forward to the
// end of backward, where its gradient completes. The price: one more all-gather of the
// parameters per micro-batch, about 3Ψ moved instead of 2Ψ: 1.5x plain data parallelism.
//
// Test: build/tests/unit_tests "[zero]"; ctest -R "zero|data_parallel.overlap"
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data_parallel/data_parallel.h"
#include "picotron/comm.h"
#include "picotron/mesh_grid.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/shard.h"

namespace picotron {

// Where each parameter sits in the flat buffer, and who owns which piece (pure).
// Parameters are laid end to end in buckets of about --dp-bucket-mb (stage 2
// reduce-scatters them as backward completes them; stage 1 after backward, one by one);
// `units` (stage 3: one id per parameter, equal ids consecutive) also starts a new
// bucket wherever the id changes. Each bucket is padded to a multiple of N, and rank r
// owns the r-th 1/N of every bucket; its slice is those parts, one after the other:
//
//   bucket 0 [a a a b b c|pad]   bucket 1 [d d d d]        N = 2
//   rank 0:  a a a               d d        -> slice [a a a d d]
//   rank 1:  b b c pad           d d        -> slice [b b c . d d]
struct ZeroLayout {
  struct Bucket {
    size_t first_param, end_param;  // parameters [first, end)
    int64_t offset, numel, padded;  // where it starts in the flat buffer, its size, padded to N
    int64_t shard_offset;           // where its part starts in every rank's slice
  };
  int ranks = 1;                 // N
  std::vector<Bucket> buckets;
  std::vector<int64_t> offsets;  // parameter i starts at flat offset offsets[i]
  int64_t numel = 0;             // sum of the parameters' sizes
  int64_t padded = 0;            // the flat buffer: the buckets, each padded to a multiple of N
  int64_t shard = 0;             // padded / N: each rank's slice
  // The part of parameter i inside rank r's slice: [first, first + length) of its
  // flattened elements, at `slice_offset` within the slice.
  struct Piece {
    size_t param;
    int64_t first, length, slice_offset;
  };
  std::vector<Piece> pieces(int rank) const;
};
ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N, int64_t bucket_capacity = INT64_MAX,
                       const std::vector<int>& units = {});
// ZeRO-3's unit of a parameter name: "embedding", "layer 3" or "head" (final norm, lm_head).
std::string zero3_unit(const std::string& param_name);

class ZeroOptimizer {
 public:
  // The model's parameters become views into one flat buffer (their values kept).
  // `group`: the cp×dp group the slices are spread over. `here`: this rank's coordinates
  // (which copies count in the norm). `stage` 1, 2 or 3; `bucket_mb`: the buckets' size
  // (stage 3: one bucket per unit). Stage 3 needs attach(model) before the first forward.
  // `offload` (ZeRO-Offload, arXiv 2101.06840): master weights and moments in (pinned) CPU
  // memory, AdamW on the CPU; the gradient slice is copied down, the weights up.
  ZeroOptimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, int stage, double bucket_mb,
                bool offload = false);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // One entry per parameter (name, param, record). Stage 1: with its FULL gradient
  // (main_grad), for the techniques that fix gradients up before the sync (sequence
  // parallelism's norm gains, the pipeline's tied embedding). Stage 2 keeps no full
  // gradient: main_grad is undefined. Master and moments live in the slice.
  std::vector<TrainableParam>& params() { return params_; }
  // Stage 3: run the model's embedding, layers and head through gather / release (its
  // layer_runner and part_runner wrap the ones it had; the destructor puts them back),
  // and release every unit. From now on the full parameters exist only while used.
  void attach(LlamaForCausalLM& model);
  torch::ScalarType state_dtype() const { return grad_.scalar_type(); }  // fp32 (fp64)
  void zero_main_grads();
  void prepare_backward();  // stage 2: every bucket waits for its gradients again
  // After each micro-batch's backward. Stage 1: main_grad += grad (bf16/fp16). Stage 2:
  // wait for this micro-batch's bucket reduce-scatters and add them into my slice.
  void accumulate_grads();
  // After the last backward. Stage 1: reduce-scatter(avg) the full gradient into my
  // slice. Stage 2: nothing left (done per micro-batch).
  void reduce_scatter_grads();
  // The global norm of the averaged gradient, every element counted once.
  double grad_norm(Comm& world) const;
  // AdamW on my slice from grad_scale * gradient, then all-gather the parameters.
  void step(double lr, double grad_scale);
  // The full master weights, per parameter name (collective over the group: every rank
  // gets them). For --save-params.
  std::map<std::string, torch::Tensor> full_masters();
  // The model's (local) parameters in the compute dtype, copied: stage 3 gathers each unit
  // for it (collective over the group). For sampling after training.
  std::map<std::string, torch::Tensor> full_parameters();

  const ZeroLayout& layout() const { return layout_; }
  // Checkpoints (picotron/resume.h): views of my piece of a parameter's master weights and
  // of its weights (stage 3: in my shard), and AdamW's step count.
  torch::Tensor master_piece(const ZeroLayout::Piece& piece) const;
  torch::Tensor weights_piece(const ZeroLayout::Piece& piece) const;
  int stage() const { return stage_; }
  int group_rank() const { return group_.rank(); }
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }
  // My slice of the AdamW moments [P_pad / N] (tests compare them with AdamW's).
  const torch::Tensor& exp_avg() const { return exp_avg_; }
  const torch::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  // Bytes this rank keeps between steps: parameters, gradients, master weights,
  // optimizer state (stage 2's transient bucket buffers not counted).
  struct Bytes {
    int64_t params, grads, master, optimizer;
    bool offloaded;  // master and optimizer in CPU memory
  };
  Bytes bytes() const;
  // One line: the stage, N, and what this rank keeps (printed at start by rank 0).
  std::string summary() const;
  // With record_events on: stage 2 "launch bucket 3", "backward end"; stage 3 also
  // "gather layer 1", "forward layer 0", "forward end layer 0", "release layer 0",
  // "backward head" (the overlap and prefetch tests).
  void set_record_events(bool on) { record_events_ = on; }
  const std::vector<std::string>& events() const { return events_; }

 private:
  torch::Tensor slice_of(const torch::Tensor& shard_buffer, const ZeroLayout::Bucket& b) const;  // my part of b
  torch::Tensor my_params(size_t bucket) const;  // my part of its parameters (stage 3: of my shard)
  void on_grad_ready(size_t param);   // stage 2's hook: the gradient into its bucket
  void launch_ready_buckets();        // in descending bucket order, the same on every rank
  void finish_oldest();               // wait for the oldest launched bucket, add it into my slice
  void record(const std::string& e) { if (record_events_) events_.push_back(e); }
  // Stage 3.
  void gather(size_t unit, bool wait);  // all-gather the unit's parameters (wait: until they are there)
  void release(size_t unit);            // empty the storage of the unit's parameters
  torch::Tensor run_pass(size_t pass, const std::function<torch::Tensor()>& compute);  // forward of a pass
  void before_backward(size_t pass);    // the hook on a pass's output: its units back, prefetch the previous

  Comm& group_;
  AdamWOptions opts_;
  int stage_;
  bool offload_;
  ZeroLayout layout_;
  int64_t t_ = 0;
  std::vector<TrainableParam> params_;
  std::vector<torch::Tensor> bucket_param_;  // per bucket [padded] compute dtype: the model's tensors are views
  torch::Tensor shard_param_;  // stage 3: [P_pad / N] compute dtype, my part of every bucket's parameters
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
  // Stage 2: per bucket, this micro-batch's gradients and their reduce-scatter in flight.
  struct InFlight {
    torch::Tensor full;   // [bucket padded] fp32: the micro-batch's gradients of the bucket
    torch::Tensor mine;   // [bucket padded / N] the reduce-scattered average of my part
    std::optional<Work> work;
    int pending = 0;      // gradients still to arrive
  };
  std::vector<InFlight> inflight_;
  std::vector<size_t> bucket_of_;
  int next_to_launch_ = -1;  // buckets launch last to first (backward's order)
  std::deque<size_t> launched_;  // launched, not yet added into my slice (at most 2)
  std::vector<GradReadyHook> hooks_;  // stage 2: one per parameter (data_parallel.h)
  // Stage 3: each unit (= bucket) released, being gathered, or gathered; the passes of a
  // forward in order (embedding, layers, head), each with the units it computes with.
  enum class Held { kReleased, kGathering, kGathered };
  struct Unit {
    std::string name;
    Held held = Held::kGathered;
    std::optional<Work> gather;
  };
  std::vector<Unit> units_;
  struct Pass {
    std::string name;
    std::vector<size_t> units;
  };
  std::vector<Pass> passes_;
  std::map<int64_t, size_t> layer_pass_;       // decoder layer index -> its pass
  std::map<std::string, size_t> part_pass_;    // "embed" / "head" -> its pass
  LlamaForCausalLM model_{nullptr};            // attached model (stage 3), its runners before us
  LayerRunner inner_layer_runner_;
  PartRunner inner_part_runner_;
  bool record_events_ = false;
  std::vector<std::string> events_;
};

}  // namespace picotron
