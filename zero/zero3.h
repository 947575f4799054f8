// zero/zero3.h — ZeRO-3 (arXiv 1910.02054, section 5.3; FSDP): ZeRO-2 that never keeps
// the full parameters either. Rank r keeps only its slice of them.
//
// The buckets are the model's units (the embedding, each decoder layer, the head = final
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
// The buffers and the update are zero/zero_shard.h's (with whole_parameters off: my part of
// each unit is the only copy kept), the gradients take ZeRO-2's path (SlicedGradients,
// zero/zero2.h), each unit released as its gradients complete.
//
// Test: ctest -L zero
#pragma once

#include <map>
#include <optional>

#include "picotron/model.h"
#include "zero/zero2.h"

namespace picotron {

class Zero3Optimizer : public ZeroOptimizer {
 public:
  // Runs the model's embedding, layers and head through gather / release (a layer
  // wrapper, and a part runner around the one it had; the destructor removes them),
  // and releases every unit: from now on the full parameters exist only while used.
  Zero3Optimizer(ZeroGroups groups, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                 AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here, bool offload,
                 LlamaForCausalLM& model);
  ~Zero3Optimizer() override;

  void zero_main_grads() override { shard_.grad.zero_(); }
  void prepare_backward(bool) override { grads_.arm(); }
  void accumulate_grads() override;  // stage 2's, then every unit released
  void sync_grads() override;        // as stage 2: HSDP's average, the sums on my pieces
  double grad_norm(Comm& world, const MeshCoords&) override { return shard_.grad_norm(world); }
  // AdamW on my slice, into my shard of the parameters; no all-gather (forward gathers).
  void step(double lr, double grad_scale) override { shard_.update(lr, grad_scale); }
  OptimizerState* state() override { return &state_; }
  ZeroShard& shard() override { return shard_; }

 private:
  void gather(size_t unit, bool wait);  // all-gather the unit's parameters (wait: until they are there)
  // Empty the storage of the unit's parameters. keep_secondary (hpZ, a forward that
  // backward will follow): keep my 1/H part of them first, for the backward's gather.
  void release(size_t unit, bool keep_secondary = false);
  void gather_secondary(size_t unit);   // hpZ: the unit's gather over the secondary group
  torch::Tensor run_pass(size_t pass, const std::function<torch::Tensor()>& compute);  // forward of a pass
  void before_backward(size_t pass);    // the hook on a pass's output: its units back, prefetch the previous
  std::map<std::string, torch::Tensor> gathered_weights();  // the model's (local) parameters, each unit gathered

  ZeroShard shard_;  // a bucket per unit; my part of each in its shard buffer
  SlicedGradients grads_{shard_, [this](size_t unit) { release(unit); }};  // a unit's backward is over
  ZeroState state_{shard_, 3, [this] { return gathered_weights(); }};
  // Each unit (= bucket) released, being gathered, or gathered; the passes of a forward in
  // order (embedding, layers, head), each with the units it computes with.
  enum class Held { kReleased, kGathering, kGathered };
  struct Unit {
    std::string name;
    Held held = Held::kGathered;
    std::optional<Work> gather;
    torch::Tensor secondary;  // hpZ: my part [padded / H] of the unit, from its forward until its backward is done
  };
  std::vector<Unit> units_;
  struct Pass {
    std::string name;
    std::vector<size_t> units;
  };
  std::vector<Pass> passes_;
  std::map<int64_t, size_t> layer_pass_;     // decoder layer index -> its pass
  std::map<std::string, size_t> part_pass_;  // "embed" / "head" -> its pass
  LlamaForCausalLM model_{nullptr};          // the model, and its runners before us
  PartRunner inner_part_runner_;
  std::string wrapper_;  // our layer wrapper's name: "zero-3 cp_dp" ("zero-3 ep_replicas" for the experts')
};

}  // namespace picotron
