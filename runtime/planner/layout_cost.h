// runtime/planner/layout_cost.h — the planner's cost model: the time of one training step
// of a layout, predicted from the shapes, the hardware and each technique's communication
// formula (the one its README states). Pure arithmetic: nothing is allocated, nothing sent.
//
// One step on one GPU, N GPUs, G tokens per step (micro-batch B x grad-acc m x dp x S):
//
//   compute  = G x (F + R) / N / (peak x eff) x imbalance
//              F = flops_per_token (runtime/observe/measure.h:
//              6 x matmul parameters + 12 L H S, the MFU of the step line); R = recompute:
//              full F/3 (one more forward), selective the attention core's forward (1/3 of
//              F's attention term); eff = kMaxEfficiency x T/(T + kRowsHalf) x w/(w + kWidthHalf),
//              T = B S/cp the rows of each matmul, w = H/tp its narrow side (small GEMMs run slower);
//              imbalance = the busiest pipeline rank's work / the mean (stage_layers' even split:
//              the last stage also runs the lm_head, 6 V H per token; 1 without pp)
//   bubble   = bubble_formula(schedule, P, m, v) x compute   (pipeline_parallel/schedules.h)
//   exposed communication, bytes / (the bandwidth of the link the group crosses):
//     tp   ring all-reduce 2(tp-1)/tp x (2 L/P + 1) T H e per pass, forward and backward (+1 forward
//          under full recompute), every micro-batch; never overlapped (tensor_parallel/README.md)
//     cp   --cp-mode ring: (3C-2) sends of 2 T nKV Hd e per layer and micro-batch
//          (context_parallel/README.md), hidden behind the attention compute: exposed =
//          max(0, comm - attention time). ulysses (U = C): per layer and micro-batch 2 (3 with
//          recompute) x (U-1)/U T Hd (2 nH + 2 f nKV)/tp e through the all-to-alls, exposed
//          (the attention waits for them); f = U/gcd(nKV/tp, U) the kv heads' repeat. hybrid:
//          both, the all-to-all over U = --cp-ulysses, the ring over C/U ranks on U T tokens of
//          f nKV/(tp U) heads. So the ring wins where attention (~S) hides its hops (~C nKV),
//          Ulysses where it does not: short sequences, many ranks, a slow link, nKV ~ nH.
//     pp   the busiest rank's sends (pipeline_sends_per_step) of T H e (/tp with --sp), exposed;
//          a tied embedding's gradient all-reduce between the first and last stage
//     dp   zero 0: all-reduce of the rank's Ψ fp32 gradients, 2(N-1)/N Ψ 4, bucketed: hidden
//          behind the last micro-batch's backward, exposed = max(one bucket, comm - that backward)
//          zero 1: reduce-scatter (N-1)/N Ψ 4 after backward + all-gather (N-1)/N Ψ e, exposed
//          zero 2: a reduce-scatter every micro-batch, each hidden behind its backward, + all-gather
//          zero 3: per micro-batch gathers of Ψ e forward (prefetch hides them behind the forward)
//          and Ψ e + reduce-scatter Ψ 4 backward (behind the backward), one layer never hidden
//          (zero/README.md); N = cp x dp; with --ep a MoE's local experts reduce over their
//          replicas, N/ep ranks: they count ring(N/ep)/ring(N) of their size in Ψ
//          HSDP (--zero-shard, zero/zero_groups.h): the above over the shard group, N = cp x
//          --zero-shard ranks (on a node's links when it stays inside one), then once per step
//          the replicas' all-reduce of my fp32 slice, 2(R-1)/R Ψ/N 4 over R = cp x dp / N
//          groups, across nodes, exposed (after the backward)
//          hpZ (--zero-hpz h): stage 3's backward gathers over h x cp ranks instead of N
//     ep   a mixture of experts (--ep, expert_parallel/README.md): per MoE layer and
//          micro-batch 2 all-to-alls forward (tokens out, results back) and 2 backward, each
//          sending k T H e (ep-1)/ep bytes off the rank (balanced routing), exposed (the
//          experts wait for their rows; T/tp under sp); the ep group is ep consecutive dp ranks.
//          Compute counts the k active experts of E only (flops_per_token). Under tp without sp
//          the experts run whole on every tp rank: F + (tp-1) 18 k H I L; and tp's all-reduces
//          are the attention's only, (L/P + 1) per pass.
//   offload  --zero-offload (zero/README.md, "Offload"): after the backward the rank's
//          gradient slice ψ = Ψ/(cp x dp) (a MoE's experts under --ep: theirs/(cp x dp/ep))
//          goes down to pinned host memory, AdamW runs on the CPU bucket by bucket, and each
//          bucket's fp32 master goes back up while the CPU does the next (non-blocking: it is
//          converted to the compute dtype on the GPU):
//            offload = ψ a / kPcieBytesPerS + max(ψ / kCpuAdamWElementsPerS, ψ a / kPcieBytesPerS)
//          exposed: nothing runs beside the optimizer step.
//   --kernels fused changes the memory (memory_per_token.h), not the time: the cost model
//          has no measured end-to-end speed-up of the fused kernels, so aten and fused cost the same.
//
// A group crosses nodes when its members are not on one node: the rank order is
// [dp][pp][cp][tp], tp fastest (picotron/mesh.h), so an axis spans (the sizes inside it) x
// (its size) consecutive ranks. Ring collectives run at the slowest link's bandwidth.
//
// Test: build/tests/unit_tests "[plan]"
#pragma once

#include <string>

#include "runtime/cli/run_config.h"

namespace picotron {

// Compute efficiency: the fraction of the peak a large bf16 GEMM sustains in training
// (H100: about half; the Playbook's best runs reach 40-50% MFU), and the sizes at which a
// GEMM runs at half of that.
constexpr double kMaxEfficiency = 0.5;
constexpr double kRowsHalf = 256;    // tokens per micro-batch (B x S/cp)
constexpr double kWidthHalf = 128;   // H/tp

// ZeRO-Offload's two constants (the offload term above). PCIe 5.0 x16 carries 64 GB/s per
// direction; pinned copies reach about 50 GB/s alone, about half when the GPUs of a node
// copy at once through shared host links (and a PCIe 4.0 card, the GPU-poor case, reaches
// about 25 alone). ZeRO runs AdamW (ZeroShard::update) as eight ATen passes over fp32 arrays,
// about 80 B of host memory traffic per element (lerp 12, mul 8, addcmul 12, decay 8,
// sqrt 8, div 8, add 8, addcdiv 16); at about 40 GB/s of host memory bandwidth per GPU
// (a two-socket DDR5 server's ~350 GB/s over 8 GPUs, or a desktop's dual channel) that is
// 0.5 G elements/s.
constexpr double kPcieBytesPerS = 25e9;
constexpr double kCpuAdamWElementsPerS = 0.5e9;

struct Hardware {
  int gpus_per_node = 8;
  double memory_bytes = 80e9;
  double intra_bytes_per_s = 450e9;  // per GPU per direction (NVLink)
  double inter_bytes_per_s = 50e9;   // per GPU per direction (InfiniBand)
  double peak_flops = 989e12;
};
Hardware hardware_of(const LayoutSearchSettings& s);  // from --gpus-per-node, --gpu-memory, ...

// Whether the groups along an axis span more than one node (rank order [dp][pp][cp][tp]).
bool tp_crosses_nodes(const TrainConfig& c, const Hardware& hw);
bool cp_crosses_nodes(const TrainConfig& c, const Hardware& hw);
bool pp_crosses_nodes(const TrainConfig& c, const Hardware& hw);
bool dp_crosses_nodes(const TrainConfig& c, const Hardware& hw);  // the cp x dp group
bool ep_crosses_nodes(const TrainConfig& c, const Hardware& hw);  // ep consecutive dp ranks
// ZeRO's shard group: cp x --zero-shard ranks (cp x dp without HSDP), and whether it spans nodes.
int zero_shard_ranks(const TrainConfig& c);
bool zero_shard_crosses_nodes(const TrainConfig& c, const Hardware& hw);
// HSDP inside the node: the --zero-shard whose shard groups are the dp ranks of one node, when
// the cp x dp group crosses nodes and cp stays in one; 0 when there is none (the search's candidate).
int node_local_zero_shard(const TrainConfig& c, const Hardware& hw);

struct StepTime {
  double compute = 0;      // s: forward + backward (+ recompute), this GPU's share
  double bubble = 0;       // s: pipeline idle time
  double tp = 0, cp = 0, pp = 0, dp = 0, ep = 0;  // s: exposed communication of each technique
  double offload = 0;      // s: --zero-offload's copies and CPU AdamW
  double exposed() const { return tp + cp + pp + dp + ep; }
  double total() const { return compute + bubble + exposed() + offload; }
};

// The p2p sends of the busiest pipeline rank in one step (pipeline_sends_per_step over the
// ranks: each one walks its schedule; 0 without pp).
int64_t busiest_pipeline_sends(const TrainConfig& c);

// The predicted step of layout `c` (dp, tp, pp, cp, sp, zero, zero-offload, recompute,
// schedule, micro-batch, grad-acc; dtype). `params_per_gpu`: the parameters the busiest rank holds
// (its shard plan's local count, before ZeRO). `pipeline_sends`: busiest_pipeline_sends(c)
// when the caller has it already (the planner keeps it by schedule, P, m and v); -1: counted here.
StepTime predict_step(const TrainConfig& c, const Hardware& hw, double params_per_gpu, int64_t pipeline_sends = -1);

double compute_efficiency(const TrainConfig& c);      // eff above
double pipeline_imbalance(const TrainConfig& c);      // imbalance above (>= 1)
double tokens_per_step(const TrainConfig& c);         // B x m x dp x S
double model_flops_per_token(const TrainConfig& c);   // F (MFU counts no recompute)
// The offload term above: 0 without --zero-offload.
double offload_time(const TrainConfig& c, double params_per_gpu);
// The all-to-all seconds of one step under --ep (0 without experts or at ep 1), the ep term above.
double expert_all_to_all_time(const TrainConfig& c, const Hardware& hw);

}  // namespace picotron
