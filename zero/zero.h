// zero/zero.h — ZeRO (Rajbhandari et al., arXiv 1910.02054): data parallelism without
// N copies of the optimizer. Stage 1 here; stages 2 and 3 are refused for now.
//
// Plain data parallelism keeps, on each of the N ranks of the cp×dp group, the same
// fp32 master weights and the same two AdamW moments, and every rank runs the same
// update. ZeRO-1 lays this rank's parameters end to end in one flat buffer, pads it to a
// multiple of N and gives rank r the r-th 1/N of it. Rank r keeps master weights and
// moments for its slice only, and updates only its slice:
//
//   flat parameters [P_pad], compute dtype (the model's tensors are views into it)
//   |  rank 0 slice  |  rank 1 slice  |  ...  | rank N-1 slice |pad|
//
//   backward:     every rank accumulates the FULL fp32 gradient of its micro-batches
//   sync:         reduce-scatter(avg)  [P_pad] -> [P_pad / N]: the averaged gradient of my slice
//   norm:         squares of my slice (each element counted once), all-reduced over the world
//   step:         AdamW on my slice of master, m, v                      [P_pad / N]
//   all-gather:   my updated slice -> every rank's flat parameters       [P_pad]
//
// A reduce-scatter followed by an all-gather moves exactly what one all-reduce moves
// (the ring all-reduce IS those two), so stage 1 costs no extra communication and saves
// 2 x 4 bytes (moments) + 4 bytes (master, for bf16) per parameter, times (N-1)/N.
// Parameters straddle slice boundaries freely: the slice is elementwise, AdamW is
// elementwise, and the weight-decay and norm-counting rules become per-element masks.
//
// Test: ctest -R "zero|equivalence.zero"
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/mesh_grid.h"
#include "picotron/optim.h"
#include "picotron/shard.h"

namespace picotron {

// Where each parameter sits in the flat buffer, and the slices (pure).
struct ZeroLayout {
  std::vector<int64_t> offsets;  // parameter i starts at flat offset offsets[i]
  int64_t numel = 0;             // sum of the parameters' sizes
  int64_t padded = 0;            // numel rounded up to a multiple of N (zeros at the end)
  int64_t shard = 0;             // padded / N: each rank's slice
  // The part of parameter i inside rank r's slice: [first, first + length) of its
  // flattened elements, at `slice_offset` within the slice.
  struct Piece {
    size_t param;
    int64_t first, length, slice_offset;
  };
  std::vector<Piece> pieces(int rank) const;
};
ZeroLayout zero_layout(const std::vector<int64_t>& numels, int N);

class ZeroOptimizer {
 public:
  // The model's parameters become views into one flat buffer (their values kept).
  // `group`: the cp×dp group the slices are spread over. `here`: this rank's coordinates
  // (which copies count in the norm).
  ZeroOptimizer(Comm& group, const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                AdamWOptions opts, const ShardPlan& plan, const MeshCoords& here);

  // The FULL gradients of this rank's parameters, one entry per parameter (name, param,
  // main_grad, record), for the techniques that fix gradients up before the sync
  // (sequence parallelism's norm gains, the pipeline's tied embedding). Their master
  // and moments are left undefined: they live in the slice.
  std::vector<TrainableParam>& params() { return params_; }
  void zero_main_grads();
  void accumulate_grads();  // bf16/fp16: main_grad += grad, as AdamW::accumulate_grads
  // After the last backward: reduce-scatter(avg) the flat gradient into my slice.
  void reduce_scatter_grads();
  // The global norm of the averaged gradient, every element counted once.
  double grad_norm(Comm& world) const;
  // AdamW on my slice from grad_scale * gradient, then all-gather the parameters.
  void step(double lr, double grad_scale);
  // The full master weights, per parameter name (collective over the group: every rank
  // gets them). For --save-params.
  std::map<std::string, torch::Tensor> full_masters();

  const ZeroLayout& layout() const { return layout_; }
  // Bytes this rank holds: parameters, gradients, master weights, optimizer state.
  struct Bytes {
    int64_t params, grads, master, optimizer;
  };
  Bytes bytes() const;

 private:
  Comm& group_;
  AdamWOptions opts_;
  ZeroLayout layout_;
  int64_t t_ = 0;
  std::vector<TrainableParam> params_;
  torch::Tensor flat_param_;  // [P_pad] compute dtype: the model's parameters are views into it
  torch::Tensor flat_grad_;   // [P_pad] fp32 (fp64): the full accumulated gradient
  torch::Tensor grad_;        // [P_pad / N] my slice of the averaged gradient
  torch::Tensor master_;      // [P_pad / N] fp32 (fp64); a view of flat_param_ when the dtypes match
  bool master_in_place_ = false;
  torch::Tensor exp_avg_, exp_avg_sq_;  // [P_pad / N]
  torch::Tensor decay_;       // [P_pad / N] 1 where weight decay applies (matrices), else 0
  torch::Tensor counts_;      // [P_pad / N] 1 where this element counts in the norm, else 0
};

}  // namespace picotron
