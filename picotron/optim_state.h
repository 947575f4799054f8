// picotron/optim_state.h — what a checkpoint, an export or a report reads of an optimizer:
// a view apart from the step (picotron/optim.h), so that a new optimizer trains with the
// step alone and adds this only to be saved, resumed or exported.
//
//   checkpoint   owned_state (the pieces this rank writes), load_state, steps_taken
//   export       masters_by_name (--save-params, --export-hf), weights_by_name (sampling)
//   report       state_dtype, summary (the line a run prints about what a rank keeps)
//
// AdamW's view is in optim_state.cpp; ZeRO's in zero/zero_state.h; expert parallelism's
// (two optimizers side by side) in expert_parallel/expert_parallel.cpp.
//
// Test: build/tests/unit_tests "[optim]"; every "save on this layout, resume on another"
// case (ctest -L checkpoint)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/mesh_grid.h"
#include "picotron/shard.h"

namespace picotron {

class AdamW;
class Optimizer;

// One piece of optimizer state this rank owns: what a checkpoint saves and loads
// (runtime/checkpoint/resume.h writes them; any mesh can read them back).
struct StatePiece {
  std::string key;          // "model.layers.0.mlp.up_proj.weight/exp_avg"
  ShardRecord record;       // full shape, and the box along split_dim (tp, pp)
  int64_t flat_first = 0;   // the range of the box's flattened elements (ZeRO's slice)
  int64_t flat_length = 0;
  torch::Tensor data;       // [flat_length]: a view of the optimizer's state
};
// Reads elements [first, first + length) of the flattened box `record` of tensor `key`
// (length < 0: the whole box) from a checkpoint.
using StateReader =
    std::function<torch::Tensor(const std::string& key, const ShardRecord& record, int64_t first, int64_t length)>;

// The names of the three state tensors a checkpoint keeps per parameter.
inline constexpr const char* kStateKinds[3] = {"master", "exp_avg", "exp_avg_sq"};

class OptimizerState {
 public:
  virtual ~OptimizerState() = default;
  // The updates taken so far (AdamW's bias correction needs it after a resume).
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t t) = 0;
  // Checkpoints: the pieces of master weights and moments this rank writes (each piece
  // once over its replicas), and loading them back, with the model's weights.
  virtual std::vector<StatePiece> owned_state(const MeshCoords& here) = 0;
  virtual void load_state(const StateReader& read) = 0;
  // By parameter name, as this rank's shard plan cuts them (ZeRO: all-gathered over its
  // group first, a collective): the fp32 (fp64) master weights, and the weights in the
  // compute dtype. For --save-params, --export-hf and sampling after training.
  virtual std::map<std::string, torch::Tensor> masters_by_name() = 0;
  virtual std::map<std::string, torch::Tensor> weights_by_name() = 0;
  virtual torch::ScalarType state_dtype() const = 0;  // fp32 (fp64 in fp64 runs)
  // One line about what this rank keeps (empty: nothing worth printing).
  virtual std::string summary() const { return ""; }
};

// AdamW's view: every parameter's whole master and moments (the copy that counts writes).
std::unique_ptr<OptimizerState> adamw_state(AdamW& adamw);

// The optimizer's view, or one line naming `what` needed it (an optimizer that gives none).
OptimizerState& state_of(Optimizer& optimizer, const std::string& what);

}  // namespace picotron
