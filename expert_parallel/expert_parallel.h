// expert_parallel/expert_parallel.h — expert parallelism (--ep N; GShard, arXiv 2006.16668;
// the Ultra-Scale Playbook, "Expert parallelism"): the E experts of every MoE layer
// (moe.h) split over N ranks of the data-parallel group; attention and the router
// stay data-parallel. Each rank routes its own tokens, and the tokens travel to their
// experts and back with two all-to-alls:
//
//   ep rank 0 (experts 0,1)           ep rank 1 (experts 2,3)          E = 4, N = 2, k = 2
//   tokens a b, routed a->{0,2}       tokens c d, routed c->{1,3}
//               b->{1,0}                          d->{2,3}
//   1. sort (token, slot) pairs by owner rank: [a0 b1 b0 | a2]   [c1 | c3 d2 d3]
//   2. all-to-all the counts, then the rows  [T·k, H] ─────────► rank 0 gets a0 b1 b0 c1
//                                                                 rank 1 gets a2 c3 d2 d3
//   3. each rank runs its experts on what it got (dropless: however many)
//   4. the reverse all-to-all brings every result home, in the order it left
//   5. combine: y_t = sum_j w_tj · result_tj (index_add into the token's row)
//
// Backward mirrors it: the gradient of step 4 is an all-to-all out, of step 2 one back.
// Per layer and direction each rank sends k·T·H elements, of which the share whose
// experts live elsewhere leaves it ((N-1)/N of them when routing is balanced).
//
// Gradients. An expert's gradient on its owner already sums the tokens of the N ranks of
// its ep group (they came to it). Its copies on the other ep groups (dp / N of them, the
// ranks d with the same d % N) sum to the whole global batch; dividing by dp gives the
// average every other parameter gets from data parallelism:
//   g_expert = (1/dp) · sum over its copies = (1/N) · (average over the "expert replica" group)
// One path, with or without ZeRO: the experts get an optimizer of their own over their
// replica group, whose average (data parallelism's or ZeRO's) with a ÷N beside it
// (DenseAndExperts; both linear, so their order does not matter) gives that.
//
// Test: ctest -R "equivalence.moe|expert_parallel"; build/tests/unit_tests "[ep]"
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/optim_state.h"
#include "picotron/shard.h"
#include "expert_parallel/moe.h"

namespace picotron {

// ---- pure: who holds which expert, and the order tokens travel in -----------------------
// The ep rank that holds expert e: experts are cut into N consecutive runs of E/N.
int expert_owner(int64_t expert, int64_t num_experts, int ep);
// A plan keeps the experts of ep rank `ep_index` only (and marks them: dp_stride = N).
void keep_local_experts(ShardPlan& plan, const LlamaConfig& c, int ep_index, int ep);

struct Dispatch {
  torch::Tensor order;             // [T·k] the (token·k + slot) pairs, by owner rank, then expert, then pair
  std::vector<int64_t> send_rows;  // [N] pairs for each rank
};
// experts [T, k] int64 -> the order the pairs leave in. A stable sort: within a rank, by
// expert, and each expert's tokens in token order, as one process visits them.
Dispatch dispatch_order(const torch::Tensor& experts, int64_t num_experts, int ep);
// The inverse permutation: where each pair sits in the dispatched order.
torch::Tensor inverse_order(const torch::Tensor& order);

// Rows to their ranks (Comm::all_to_all) as an autograd op.
// fwd: all-to-all (send_rows -> recv_rows)   bwd: the reverse all-to-all of the gradient
torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& send_rows,
                              const std::vector<int64_t>& recv_rows, Comm& group);

// Installs the dispatch on every MoE layer of `model` and owns the two groups it needs,
// split from the cp×dp group (collective over it; `cp`: the cp size): the ep group (N
// consecutive dp ranks of one cp rank) and the expert replica group (the cp×dp ranks that
// hold the same experts).
class ExpertParallel {
 public:
  ExpertParallel(LlamaForCausalLM& model, Comm& cp_dp, int ep, int cp = 1);
  // The run's optimizer: `make(group, params, per_copy)` builds one over a group (AdamW
  // with data parallelism, or ZeRO; per_copy: the ranks of the group that hold one copy of
  // a parameter in the ep axis). Two of them behind one interface (DenseAndExperts): the
  // dense parameters over cp×dp, the experts (dp_stride > 1 in `plan`) over their replicas.
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;  // (name, parameter)
  using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(Comm& group, const NamedTensors& params, int per_copy)>;
  std::unique_ptr<Optimizer> optimizer(const NamedTensors& named, const ShardPlan& plan, Comm& cp_dp,
                                       const MakeOptimizer& make);
  // The experts' part of a layer: dispatch, local experts, return, combine. [T, H] -> [T, H]
  torch::Tensor run(MoEImpl& moe, const torch::Tensor& x, const Routing& r);

  Comm& ep_group() { return ep_group_; }

 private:
  Comm ep_group_, replicas_;
  int ep_;
};

// The optimizer with expert parallelism (--ep N). One average over cp×dp cannot serve the
// experts (ranks of different ep groups hold different ones), nor can ZeRO's one flat layout.
// So two optimizers run side by side behind one interface:
//   dense   (attention, router, norms, embedding): over cp×dp, as without experts;
//   experts (dp_stride > 1): over the replica group (the ranks holding the same experts),
//           after ÷N: the ep group's sum becomes its average, and the average over the
//           replicas (data parallelism's all-reduce, or ZeRO's reduce-scatter) then is the
//           global batch's: (1/dp) · the sum over the copies.
// Under ZeRO each expert's AdamW state is then a 1/(cp·dp) share of all experts' state, like
// the rest. (ZeRO-3: each of the two gathers its own units around a layer; zero/zero3.cpp.)
class DenseAndExperts : public Optimizer {
 public:
  DenseAndExperts(std::unique_ptr<Optimizer> dense, std::unique_ptr<Optimizer> experts, int ep);
  void zero_main_grads() override;
  void prepare_backward(bool last_micro_batch) override;
  void accumulate_grads() override;
  // Each optimizer syncs its own parameters, running the sums registered here on them
  // (the experts' then ÷ep: the ep group's sum becomes its average).
  void sync_grads() override;
  double grad_norm(Comm& world, const MeshCoords& here) override;
  void step(double lr, double grad_scale) override;
  // Both views side by side (none when either part has none).
  OptimizerState* state() override { return state_.get(); }

 private:
  std::unique_ptr<Optimizer> dense_, experts_;
  std::unique_ptr<OptimizerState> state_;
  int ep_;
};

// The step line's routing metric: how many tokens of the GLOBAL batch each expert got,
// [E] on every rank. This rank's counts (the router log's routed_tokens, reset here) summed over the
// ranks that routed other tokens: cp x dp, and tp under sequence parallelism (each tp rank
// routed S/tp of them); with a pipeline the stage that holds the loss (pp rank `loss_pp_rank`:
// P-1, or 0 in DualPipeV's V) counted every layer and tells the rest.
std::vector<double> global_tokens_per_expert(LlamaForCausalLMImpl& model, Mesh& mesh, bool sp, int loss_pp_rank);

}  // namespace picotron
