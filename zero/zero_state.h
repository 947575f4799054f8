// zero/zero_state.h — what a checkpoint, an export or a report reads of a ZeRO stage (the
// view picotron/optim_state.h describes), apart from the stages' step:
//
//   checkpoint   my pieces of each parameter's master and moments (replica 0 of HSDP writes)
//   export       the masters all-gathered over the shard group; the weights (stage 3: each
//                unit gathered for it)
//   accounting   the bytes one rank keeps between steps, and the line a run prints
//
// Test: ctest -L zero (the checkpoint cases: save on one layout, resume on another)
#pragma once

#include <functional>
#include <map>
#include <string>

#include "picotron/optim_state.h"
#include "zero/zero_shard.h"

namespace picotron {

class ZeroState : public OptimizerState {
 public:
  // `stage`: 1, 2 or 3 (stage 1 also keeps the full gradient). `gather_weights`: the
  // weights by name when they are not whole here (stage 3); empty: the parameters.
  using Weights = std::function<std::map<std::string, torch::Tensor>()>;
  ZeroState(ZeroShard& shard, int stage, Weights gather_weights = {})
      : shard_(shard), stage_(stage), gather_weights_(std::move(gather_weights)) {}

  int64_t steps_taken() const override { return shard_.adamw().steps_taken(); }
  void set_steps_taken(int64_t t) override { shard_.adamw().set_steps_taken(t); }
  std::vector<StatePiece> owned_state(const MeshCoords& here) override;  // my pieces of each parameter
  void load_state(const StateReader& read) override;
  std::map<std::string, torch::Tensor> masters_by_name() override;  // all-gathered (collective)
  std::map<std::string, torch::Tensor> weights_by_name() override;
  torch::ScalarType state_dtype() const override { return shard_.grad.scalar_type(); }  // fp32 (fp64)
  std::string summary() const override;  // the stage, N, and what this rank keeps

  // Bytes this rank keeps between steps (stage 2's transient bucket buffers not counted).
  struct Bytes {
    int64_t params, grads, master, optimizer;
    bool offloaded;  // master and optimizer in CPU memory
  };
  Bytes bytes() const;

 private:
  ZeroShard& shard_;
  int stage_;
  Weights gather_weights_;
};

}  // namespace picotron
