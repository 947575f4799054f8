// runtime/planner/layout_cost.cpp — see layout_cost.h (the formulas and where they come from).
#include "runtime/planner/layout_cost.h"

#include <algorithm>
#include <numeric>

#include "context_parallel/cp_layout.h"
#include "runtime/observe/measure.h"
#include "pipeline_parallel/schedules.h"
#include "runtime/cli/train_config.h"
#include "zero/zero_groups.h"

namespace picotron {

Hardware hardware_of(const LayoutSearchSettings& s) {
  Hardware hw;
  hw.gpus_per_node = s.gpus_per_node;
  hw.memory_bytes = s.gpu_memory_gb * 1e9;
  hw.intra_bytes_per_s = s.intra_node_gbps * 1e9;
  hw.inter_bytes_per_s = s.inter_node_gbps * 1e9;
  hw.peak_flops = s.peak_tflops * 1e12;
  return hw;
}

namespace {
// An axis whose groups span `inner` x `size` consecutive ranks (inner: the product of the
// faster axes) crosses nodes when that span is more than a node.
bool spans_nodes(int64_t inner, int64_t size, const Hardware& hw) { return size > 1 && inner * size > hw.gpus_per_node; }
double link(bool crosses, const Hardware& hw) { return crosses ? hw.inter_bytes_per_s : hw.intra_bytes_per_s; }
double element_bytes(const TrainConfig& c) {
  return c.dtype == Precision::kFP64 ? 8 : c.dtype == Precision::kFP32 ? 4 : 2;
}
double ring(int n) { return n > 1 ? double(n - 1) / n : 0.0; }  // (n-1)/n
}  // namespace

bool tp_crosses_nodes(const TrainConfig& c, const Hardware& hw) { return spans_nodes(1, c.tp, hw); }
bool cp_crosses_nodes(const TrainConfig& c, const Hardware& hw) { return spans_nodes(c.tp, c.cp, hw); }
bool pp_crosses_nodes(const TrainConfig& c, const Hardware& hw) { return spans_nodes(int64_t(c.tp) * c.cp, c.pp, hw); }
bool dp_crosses_nodes(const TrainConfig& c, const Hardware& hw) {
  return cp_crosses_nodes(c, hw) || spans_nodes(int64_t(c.tp) * c.cp * c.pp, c.dp, hw);
}

namespace {
// A block of `dp_ranks` consecutive dp ranks (tp x cp x pp apart) times cp: a shard group, hpZ's group.
bool dp_block_crosses_nodes(const TrainConfig& c, const Hardware& hw, int dp_ranks) {
  return cp_crosses_nodes(c, hw) || spans_nodes(int64_t(c.tp) * c.cp * c.pp, dp_ranks, hw);
}
}  // namespace

int zero_shard_ranks(const TrainConfig& c) { return zero_block_ranks(c.zero_shard, c.cp, 1, c.dp * c.cp); }
bool zero_shard_crosses_nodes(const TrainConfig& c, const Hardware& hw) {
  return dp_block_crosses_nodes(c, hw, c.zero_shard > 0 ? c.zero_shard : c.dp);
}
int node_local_zero_shard(const TrainConfig& c, const Hardware& hw) {
  const int64_t inner = int64_t(c.tp) * c.cp * c.pp;  // the ranks between two consecutive dp ranks
  if (!dp_crosses_nodes(c, hw) || cp_crosses_nodes(c, hw) || hw.gpus_per_node % inner != 0) return 0;
  const int in_node = int(hw.gpus_per_node / inner);  // dp ranks in one node
  return in_node < c.dp && c.dp % in_node == 0 && in_node * c.cp > 1 ? in_node : 0;
}

bool ep_crosses_nodes(const TrainConfig& c, const Hardware& hw) {
  return spans_nodes(int64_t(c.tp) * c.cp * c.pp, c.ep, hw);  // dp ranks d .. d + ep - 1, tp x cp x pp apart
}

double expert_all_to_all_time(const TrainConfig& c, const Hardware& hw) {
  const LlamaConfig& m = c.llama;
  if (!m.is_moe() || c.ep <= 1) return 0;
  // Tokens per micro-batch per rank: under sp each tp rank routes its S/tp of them.
  const double T = double(c.micro_batch_size) * double(c.seq_len) / c.cp / (c.sp ? c.tp : 1);
  const double rows = double(m.num_experts_per_tok) * T;                     // k T (token, slot) pairs
  const double leaving = rows * double(m.hidden_size) * element_bytes(c) * ring(c.ep);  // k T H e (ep-1)/ep
  const double per_step = 4 * double(m.num_hidden_layers) / c.pp * double(c.grad_acc_steps);  // 2 fwd + 2 bwd per layer
  return per_step * leaving / link(ep_crosses_nodes(c, hw), hw);
}

double offload_time(const TrainConfig& c, double params_per_gpu) {
  if (!c.zero_offload) return 0;
  const LlamaConfig& m = c.llama;
  const double a = c.dtype == Precision::kFP64 ? 8 : 4;
  const int n = zero_shard_ranks(c);  // cp x dp (HSDP: cp x --zero-shard)
  double slice = params_per_gpu / n;  // ψ: this rank's part of ZeRO's layout
  if (m.is_moe() && c.ep > 1) {       // the experts' part: over their replicas, n/ep ranks
    const double experts = double(m.num_hidden_layers) / c.pp * double(m.num_local_experts) / c.ep * 3 *
                           double(m.hidden_size) * double(m.intermediate_size);
    slice = (params_per_gpu - experts) / n + experts / (n / c.ep);
  }
  const double copy = slice * a / kPcieBytesPerS;         // one direction
  return copy + std::max(slice / kCpuAdamWElementsPerS, copy);  // down, then AdamW with the copies up behind it
}

double tokens_per_step(const TrainConfig& c) {
  return double(c.micro_batch_size) * double(c.grad_acc_steps) * c.dp * double(c.seq_len);
}

double model_flops_per_token(const TrainConfig& c) { return flops_per_token(c.llama, c.seq_len); }

double pipeline_imbalance(const TrainConfig& c) {
  if (c.pp == 1) return 1.0;
  const LlamaConfig& m = c.llama;
  const double head = 6.0 * double(m.vocab_size) * double(m.hidden_size);  // the lm_head's matmul
  const double layer = (model_flops_per_token(c) - head) / double(m.num_hidden_layers);
  const int last = c.pp * c.pp_virtual_stages - 1;
  double busiest = 0;
  for (int r = 0; r < c.pp; ++r) {
    double work = 0;
    for (int chunk = 0; chunk < c.pp_virtual_stages; ++chunk) {
      const int vs = virtual_stage(c.pp, r, chunk, is_v_shape(parse_schedule(c.pp_schedule)));
      work += double(stage_layers(m.num_hidden_layers, c.pp, c.pp_virtual_stages, vs).count) * layer +
              (vs == last ? head : 0);
    }
    busiest = std::max(busiest, work);
  }
  return busiest / (model_flops_per_token(c) / c.pp);
}

double compute_efficiency(const TrainConfig& c) {
  const double rows = double(c.micro_batch_size) * double(c.seq_len) / c.cp;  // T
  const double width = double(c.llama.hidden_size) / c.tp;                   // H/tp
  return kMaxEfficiency * rows / (rows + kRowsHalf) * width / (width + kWidthHalf);
}

int64_t busiest_pipeline_sends(const TrainConfig& c) {
  if (c.pp == 1) return 0;
  const PipelineSchedule s = parse_schedule(c.pp_schedule);
  int64_t sends = 0;
  for (int r = 0; r < c.pp; ++r)
    sends = std::max(sends, pipeline_sends_per_step(s, c.pp, int(c.grad_acc_steps), c.pp_virtual_stages, r));
  return sends;
}

namespace {

// What every term of the step time shares: a micro-batch's tokens per rank and their work.
struct StepShape {
  double T = 0;  // tokens per micro-batch per rank
  double micro = 0;  // micro-batches per step
  double e = 0, a = 0;  // bytes of a weight / activation element, of a gradient (fp32, fp64)
  double share = 0, rate = 0;  // tokens' work per GPU; FLOP/s sustained
  double F_attention = 0;  // the attention core's FLOPs per token
  double forward_per_micro = 0, backward_per_micro = 0;  // seconds of compute
  bool full = false, selective = false;  // --recompute
};

// ---- context parallelism: ring (k, v round the cp group, hidden behind the attention),
// ulysses (all-to-alls before and after the attention, which waits for them), or both ----
double cp_time(const TrainConfig& c, const Hardware& hw, const StepShape& w) {
  if (c.cp <= 1) return 0;
  const LlamaConfig& m = c.llama;
  const double L = double(m.num_hidden_layers), T = w.T, e = w.e, micro = w.micro;
  const bool full = w.full, selective = w.selective;
  double time = 0;
  const CpMode mode = parse_cp_mode(c.cp_mode);
  const int U = cp_ulysses_size(mode, c.cp, c.cp_ulysses), R = c.cp / U;  // all-to-all group, ring
  const double layers = L / c.pp, hd = double(m.head_dim());
  const double heads = double(m.num_attention_heads) / c.tp;
  const int64_t kv_heads = m.num_key_value_heads / c.tp;
  const double f = double(U / std::gcd(kv_heads, int64_t(U)));  // GQA: kv heads repeated until U divides them
  const double kv = f * double(kv_heads);
  if (U > 1) {  // q, k, v out and o back, forward; their gradients backward; the core's forward again
    const double passes = full || selective ? 3 : 2;
    const double elements = passes * ring(U) * T * hd * (2 * heads + 2 * kv);
    time += layers * micro * elements * e / link(spans_nodes(c.tp, U, hw), hw);
  }
  if (R > 1) {  // the ring over R ranks, on U·T tokens of kv/U heads
    const double block = 2 * (U * T) * (kv / U) * hd * e;  // k and v
    const double sends = (3.0 * R - 2) + (full ? R - 1 : 0);
    const double comm = layers * micro * sends * block / link(cp_crosses_nodes(c, hw), hw);
    const double attention = w.share * (w.F_attention + (full || selective ? w.F_attention / 3 : 0)) / w.rate;
    time += std::max(0.0, comm - attention);
  }
  return time;
}

// ---- data parallelism / ZeRO over cp x dp (HSDP: over the shard group of n ranks, then
// the replicas' all-reduce of the slices) ----
double dp_time(const TrainConfig& c, const Hardware& hw, const StepShape& w, double params_per_gpu) {
  const LlamaConfig& m = c.llama;
  const double H = double(m.hidden_size), L = double(m.num_hidden_layers);
  const double e = w.e, a = w.a, micro = w.micro;
  double time = 0;
  const int n = c.zero > 0 ? zero_shard_ranks(c) : c.dp * c.cp;
  const int replicas = c.dp * c.cp / n;
  const double experts = m.is_moe() && c.ep > 1 ? L / c.pp * double(m.num_local_experts) / c.ep * 3 * H * double(m.intermediate_size)
                                                : 0;  // the experts' parameters: their group holds 1 in ep of n
  if (n > 1) {
    const double bw = link(c.zero > 0 ? zero_shard_crosses_nodes(c, hw) : dp_crosses_nodes(c, hw), hw);
    double P = params_per_gpu;
    if (experts > 0)  // the experts' gradients travel over their replicas (n/ep ranks)
      P = (P - experts) + experts * ring(n / c.ep) / ring(n);  // in cp x dp's units
    const double bucket = std::min(P * a, c.dp_bucket_mb * 1024 * 1024) * ring(n) / bw;
    const double reduce_scatter = ring(n) * P * a / bw, gather = ring(n) * P * e / bw;
    // hpZ: the backward's gather over the h x cp ranks of the secondary group instead
    const double gather_back =
        c.zero_hpz > 0 ? ring(c.zero_hpz * c.cp) * P * e / link(dp_block_crosses_nodes(c, hw, c.zero_hpz), hw) : gather;
    if (c.zero == 0) {
      time = std::max(bucket, 2 * reduce_scatter - w.backward_per_micro);
    } else if (c.zero == 1) {
      time = reduce_scatter + gather;
    } else if (c.zero == 2) {
      time = micro * std::max(bucket, reduce_scatter - w.backward_per_micro) + gather;
    } else {
      const double unit = gather / std::max(1.0, L / c.pp);  // one layer's gather, never hidden
      const double unit_back = gather_back / std::max(1.0, L / c.pp);
      time = micro * (std::max(unit, gather - w.forward_per_micro) +
                      std::max(unit_back, gather_back + reduce_scatter - w.backward_per_micro));
    }
  }
  if (replicas > 1) {  // HSDP: my fp32 slice all-reduced over the replicas once per step, after the backward
    const double slice = (params_per_gpu - experts) / n + (experts > 0 ? experts / (n / c.ep) : 0);
    time += 2 * ring(replicas) * slice * a / link(dp_crosses_nodes(c, hw), hw);
  }
  return time;
}

}  // namespace

StepTime predict_step(const TrainConfig& c, const Hardware& hw, double params_per_gpu, int64_t pipeline_sends) {
  const LlamaConfig& m = c.llama;
  const int N = c.dp * c.tp * c.pp * c.cp;
  StepShape w;
  w.e = element_bytes(c);
  w.a = c.dtype == Precision::kFP64 ? 8 : 4;
  w.micro = double(c.grad_acc_steps);
  w.T = double(c.micro_batch_size) * double(c.seq_len) / c.cp;  // tokens per micro-batch per rank
  const double H = double(m.hidden_size), L = double(m.num_hidden_layers);
  w.full = c.recompute == "full";
  w.selective = c.recompute == "selective";

  // ---- compute: 1/3 forward, 2/3 backward; recompute adds forward work to the backward ----
  // A mixture of experts under tp keeps its experts whole (tensor_parallel.cpp): without sp
  // every tp rank runs them on all its tokens, tp times the experts' 6 k 3HI L per token.
  const double F_experts = m.is_moe() ? 18.0 * double(m.num_experts_per_tok) * H * double(m.intermediate_size) * L : 0;
  const double F = model_flops_per_token(c) + (c.tp > 1 && !c.sp ? (c.tp - 1) * F_experts : 0);
  w.F_attention = model_flops_per_token(c) - flops_per_token(m, 0);  // 12 L H S
  const double R = w.full ? F / 3 : w.selective ? w.F_attention / 3 : 0;
  w.rate = hw.peak_flops * compute_efficiency(c);  // FLOP/s sustained
  w.share = tokens_per_step(c) / N;                 // tokens' work per GPU
  StepTime t;
  t.compute = w.share * (F + R) / w.rate * pipeline_imbalance(c);  // the pipeline runs at its busiest stage's pace
  const double forward = w.share * F / 3 / w.rate;
  w.backward_per_micro = (t.compute - forward) / w.micro;
  w.forward_per_micro = forward / w.micro;

  // ---- pipeline bubble (schedules.h's formula, in units of this rank's compute) ----
  if (c.pp > 1)
    t.bubble = bubble_formula(parse_schedule(c.pp_schedule), c.pp, int(c.grad_acc_steps), c.pp_virtual_stages) *
               t.compute;

  // ---- tensor parallelism: all-reduces of [T, H] on the critical path ----
  if (c.tp > 1) {
    const double layers = L / c.pp;
    const double passes = w.full ? 3 : 2;  // forward, backward (+ the recomputed forward)
    const double blocks = m.is_moe() ? 1 : 2;  // attention and MLP; a MoE block has no f/g
    const double elements = passes * (blocks * layers + 1) * w.T * H * w.micro;
    t.tp = 2 * ring(c.tp) * elements * w.e / link(tp_crosses_nodes(c, hw), hw);
  }
  t.cp = cp_time(c, hw, w);

  // ---- pipeline: activations and their gradients between stages ----
  if (c.pp > 1) {
    const int64_t sends = pipeline_sends >= 0 ? pipeline_sends : busiest_pipeline_sends(c);
    const double tensor = w.T * H * w.e / (c.sp ? c.tp : 1);
    const double bw = link(pp_crosses_nodes(c, hw), hw);
    t.pp = double(sends) * tensor / bw;
    if (m.tie_word_embeddings)  // dL/dE summed between the first and the last stage
      t.pp += 2 * ring(2) * double(m.vocab_size) / c.tp * H * w.a / bw;
  }

  // ---- expert parallelism: the tokens' all-to-alls to their experts and back ----
  t.ep = expert_all_to_all_time(c, hw);

  // ---- ZeRO-Offload: the optimizer step on the CPU ----
  t.offload = offload_time(c, params_per_gpu);

  // ---- data parallelism / ZeRO (HSDP too) ----
  t.dp = dp_time(c, hw, w, params_per_gpu);
  return t;
}

}  // namespace picotron
