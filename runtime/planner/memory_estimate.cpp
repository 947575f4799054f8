// runtime/planner/memory_estimate.cpp — see memory_estimate.h. The derivation of every term is
// in docs/memory.md, "Where the memory goes"; this file only adds them up.
#include "runtime/planner/memory_estimate.h"

#include <algorithm>
#include <sstream>

#include "picotron/recompute.h"
#include "runtime/planner/memory_moe.h"
#include "runtime/planner/memory_per_token.h"
#include "picotron/format.h"
#include "pipeline_parallel/schedules.h"
#include "runtime/cli/train_config.h"

namespace picotron {

double MemoryEstimate::state_bytes() const {
  double sum = 0;
  for (const auto& l : state) sum += l.bytes;
  return sum;
}
double MemoryEstimate::peak_bytes() const { return state_bytes() + activations.bytes + hpz_parts.bytes + transient.bytes; }

namespace {

// The layers of pipeline chunk `chunk` of this rank (all of them without pp).
int64_t chunk_layers(const TrainConfig& c, int rank, int chunk) {
  if (c.pp == 1) return c.llama.num_hidden_layers;
  const bool vee = is_v_shape(parse_schedule(c.pp_schedule));  // dualpipev: chunk 1 is stage 2P-1-r
  return stage_layers(c.llama.num_hidden_layers, c.pp, c.pp_virtual_stages, virtual_stage(c.pp, rank, chunk, vee)).count;
}

}  // namespace

MemoryEstimate estimate_memory(const TrainConfig& c, const MeshCoords& here, const ShardPlan& plan) {
  return estimate_memory(c, here, parameter_counts(c, here, plan));
}

namespace {

// The sizes every phase reads: bytes per element of the compute dtype (e) and of what
// accumulates in fp32 (a: norms, softmax, gradients, AdamW), and the shapes on this rank.
struct Sizes {
  double e, a;
  double S, T, H, V, I;  // S/cp tokens per sequence, T = B x S/cp, H, V/tp, I/tp
};
Sizes sizes_of(const TrainConfig& c) {
  const LlamaConfig& m = c.llama;
  Sizes z;
  z.e = c.dtype == Precision::kFP64 ? 8 : c.dtype == Precision::kFP32 ? 4 : 2;
  z.a = c.dtype == Precision::kFP64 ? 8 : 4;
  z.S = double(c.seq_len) / c.cp, z.T = double(c.micro_batch_size) * z.S, z.H = double(m.hidden_size);
  z.V = double(m.vocab_size) / c.tp, z.I = double(m.intermediate_size) / c.tp;
  return z;
}

// Phase 1, the state held for the whole step: parameters, gradients, master, moments (ZeRO:
// slices over its shard group; parameter_counts), the RoPE tables.
std::vector<MemoryLine> state_lines(const TrainConfig& c, const ParameterCounts& counts, const Sizes& z) {
  const double e = z.e, a = z.a;
  const bool wide = c.dtype == Precision::kFP32 || c.dtype == Precision::kFP64;
  const double P = counts.P, shard = counts.shard;
  std::vector<MemoryLine> state;
  const std::string Pn = count_text(P), Sn = count_text(shard);
  // my slice: of the shard group's layout (cp x dp, HSDP cp x --zero-shard), and of the experts' over their replicas
  const std::string slice = !counts.experts_apart ? "P_pad/N" : "(P_pad/N + experts' P_pad/(N/ep))";
  const std::string en = count_text(e), an = count_text(a);
  if (c.zero >= 3) state.push_back({"weights (my slice)", shard * e, slice + " x e = " + Sn + " x " + en});
  else state.push_back({"weights", P * e, "P x e = " + Pn + " x " + en});
  if (c.zero >= 2) state.push_back({"gradients (my slice)", shard * a, slice + " x a = " + Sn + " x " + an});
  else if (c.zero == 1)
    state.push_back({"gradients", (P + shard) * a, "(P + " + slice + ") x a = (" + Pn + " + " + Sn + ") x " + an});
  else state.push_back({"gradients", P * a, "P x a = " + Pn + " x " + an});
  const double opt = c.zero >= 1 ? shard : P;
  const std::string optn = c.zero >= 1 ? slice : "P";
  const std::string where = c.zero_offload ? " (CPU memory, not counted)" : "";
  const double on_device = c.zero_offload ? 0.0 : 1.0;
  if (wide) state.push_back({"master weights", 0, "the weights are the masters"});
  else state.push_back({"master weights" + where, on_device * opt * a, optn + " x a = " + count_text(opt) + " x " + an});
  state.push_back({"AdamW moments" + where, on_device * 2 * opt * a, "2 x " + optn + " x a = 2 x " + count_text(opt) + " x " + an});
  const double hd = double(c.llama.head_dim()), rope = 2 * z.S * hd * e;
  state.push_back({"RoPE tables", rope, "2 x S/cp x Hd x e = 2 x " + count_text(z.S) + " x " + count_text(hd) + " x " + en});
  return state;
}

// Phase 2, what the forwards in flight keep, at their most: a pipeline's schedule walked
// (F adds its micro-batch's activations, B frees them). `newest_chunk`: the chunk whose
// backward comes first from that moment (phase 3 starts there).
struct Kept {
  MemoryLine activations;
  int newest_chunk;
};
Kept activations_kept(const TrainConfig& c, const MeshCoords& here, const ParameterCounts& counts, const PerToken& t,
                      const Sizes& z) {
  const LlamaConfig& m = c.llama;
  const double head = t.head + t.head_fixed / z.T;  // per token, the fused loss's dW spread over the micro-batch
  const int P_ = c.pp, v = c.pp_virtual_stages;
  const int last_vs = P_ * v - 1;
  const bool vee = is_v_shape(parse_schedule(c.pp_schedule));  // dualpipev: two chunks' activations
  // Bytes per token that a micro-batch's activations of chunk `k` hold (the chunks the
  // schedule runs on this rank: 1, v interleaved, 2 in the V).
  std::vector<double> chunk_bytes(P_ == 1 ? 1 : schedule_chunks(parse_schedule(c.pp_schedule), v));
  for (int chunk = 0; chunk < int(chunk_bytes.size()); ++chunk) {
    const int vs = virtual_stage(P_, here.pp, chunk, vee);
    double& b = chunk_bytes[chunk];
    b = double(chunk_layers(c, here.pp, chunk)) * t.layer;
    if (vs == last_vs) b += head;
    if (vs == 0) b += 8;                  // int64 token ids
    if (vs != last_vs) b += z.H * z.e;    // the chunk's output, kept for its backward
  }
  double kept = 0;  // per token, the most the forwards in flight hold at once
  int in_flight = 1, newest_chunk = v - 1;
  if (P_ == 1) {
    kept = chunk_bytes[0];
  } else {
    double now = 0;
    int count = 0;
    for (const auto& act : schedule_actions(parse_schedule(c.pp_schedule), P_, int(c.grad_acc_steps), v, here.pp)) {
      if (act.kind == PipelineAction::kForward) now += chunk_bytes[act.chunk], ++count;
      if (act.kind == PipelineAction::kBackward) {
        if (now >= kept) kept = now, in_flight = count, newest_chunk = act.chunk;
        now -= chunk_bytes[act.chunk], --count;
      }
    }
  }
  std::ostringstream af;
  if (P_ == 1)
    af << "T x (L x A_layer + A_head + 8 token ids) = " << count_text(z.T) << " x (" << m.num_hidden_layers << " x "
       << count_text(t.layer) << " + " << count_text(t.head) << " + 8)"
       << (t.head_fixed > 0 ? " + dW " + count_text(t.head_fixed) + " B" : "");
  else
    af << "T x the most the forwards in flight keep = " << count_text(z.T) << " x " << count_text(kept) << " B ("
       << in_flight << " micro-batch" << (in_flight > 1 ? "es" : "") << " in flight under " << c.pp_schedule
       << "; a stage's output H.e kept)";
  MemoryLine line{"activations kept", z.T * kept, af.str()};
  if (m.is_moe()) {  // the routers' statistics for the balancing loss: [E] fp64 counts, [E] sum of p, per layer
    int64_t layers_here = 0;
    for (int chunk = 0; chunk < v; ++chunk) layers_here += chunk_layers(c, here.pp, chunk);
    const double log = double(layers_here) * double(m.num_local_experts) * (8 + z.a);
    line.bytes += log;
    line.formula += " + router statistics L x E(8 + a) = " + count_text(log) + " B";
  }
  // ZeRO-3 keeps the last unit of its forward gathered until its backward: the head (and a
  // tied embedding). (A pipeline stage without the head keeps its last layer: the layer
  // the backward's peak below gathers anyway.)
  const double gathered_kept = counts.head_unit * z.e;  // (e a power of two: the same sum as bucket by bucket)
  if (gathered_kept > 0) {
    line.bytes += gathered_kept;
    line.formula += " + head unit gathered " + count_text(gathered_kept) + " B";
  }
  return {line, newest_chunk};
}

// Phase 3, the extra at the backward's peak: the loss's gradient, or the newest layer's MLP
// (a fused loss's forward chunk, an expert-parallel layer's all-to-all forward where larger).
MemoryLine backward_peak(const TrainConfig& c, const MeshCoords& here, const ParameterCounts& counts,
                         const PerToken& t, int newest_chunk, const Sizes& z) {
  const LlamaConfig& m = c.llama;
  const double e = z.e, a = z.a, T = z.T, H = z.H, V = z.V, I = z.I;
  const double head = t.head + t.head_fixed / T;
  const int last_vs = c.pp * c.pp_virtual_stages - 1;
  const bool vee = is_v_shape(parse_schedule(c.pp_schedule));
  // (the fused loss: its forward's chunk loop, memory_per_token.h; its backward only scales dh and dW)
  const Recompute mode = parse_recompute(c.recompute);
  const bool newest_has_head = virtual_stage(c.pp, here.pp, newest_chunk, vee) == last_vs;
  const FusedPieces fused = fused_pieces(c);
  const double at_loss = newest_has_head ? 2 * V * a : 0;  // d(log-softmax) and d(logits), [T, V/tp] each
  double at_mlp = H * e + 2 * I * e;                 // d(output), and dgated, dsilu, dup - gated
  if (m.is_moe()) at_mlp = moe_backward_per_token(c, e);
  else if (mode == Recompute::kSelective)  // silu(gate) and the product, recomputed (fused: the product)
    at_mlp += (fused.on ? 1 : 2) * I * e;
  if (mode == Recompute::kFull) at_mlp += t.layer_none - H * a + H * e;  // the layer, rebuilt
  if (newest_has_head) at_mlp -= head;                     // the head's backward is over
  double extra = 0;
  std::string extra_formula;
  if (counts.tied_here) extra += V * H * e, extra_formula += " + the head's gradient of the tied matrix (V/tp) x H x e";
  if (c.pp > 1) extra += 2 * T * H * e, extra_formula += " + pipeline transfers 2 x T x H x e";
  if (c.zero >= 2 && counts.zero_buckets) {
    // The gradient buckets that the head and the newest layer's down projection have
    // reached, full size (fp32) until reduce-scattered; stage 3 gathers that layer and
    // prefetches the one before.
    const double buckets = counts.touched_buckets * a;
    extra += buckets, extra_formula += " + gradient buckets " + count_text(buckets) + " B";
    if (c.zero == 3) {
      const double gathered = 2 * counts.layer_unit * e;
      extra += gathered, extra_formula += " + 2 layers gathered " + count_text(gathered) + " B";
    }
  }
  const double layer_peak = T * at_mlp + extra;
  std::string loss_formula;
  const double loss_peak = fused.loss ? fused_loss_peak(c, T, e, a, &loss_formula) : T * at_loss;
  MemoryLine peak;
  if (newest_has_head && fused.loss && loss_peak >= layer_peak)
    peak = {"forward peak (fused loss, a chunk)", loss_peak, loss_formula};
  else if (newest_has_head && loss_peak >= layer_peak)
    peak = {"backward peak (at the loss)", loss_peak,
            "T x 2(V/tp).a = " + count_text(T) + " x " + count_text(2 * V * a) + " B: d(log-softmax), d(logits)"};
  else
    peak = {m.is_moe() ? "backward peak (last layer's experts)" : "backward peak (last layer's MLP)", layer_peak,
            "T x " + count_text(at_mlp) + " B" + extra_formula};
  if (m.is_moe() && c.ep > 1 && newest_has_head) {
    // Expert parallelism: the last layer's forward can top the backward (the head's
    // activations are not allocated yet then; the dispatch buffers are).
    const double fwd = ep_forward_per_token(c, e) - head;
    if (T * fwd > peak.bytes)
      peak = {"forward peak (last layer's all-to-all)", T * fwd,
              "T x (3k.H.e + 2H.e + 16k - A_head) = " + count_text(T) + " x " + count_text(fwd) +
                  " B: dispatch rows out, in, results; the combine"};
  }
  return peak;
}

// The per-token terms the formulas use, explained (printed under the lines).
std::vector<std::string> terms_of(const TrainConfig& c, const ParameterCounts& counts, const PerToken& t) {
  const LlamaConfig& m = c.llama;
  std::vector<std::string> terms = {"A_layer = " + t.layer_formula + " per token per layer (--recompute " + c.recompute + ")",
                                    "A_head = " + t.head_formula};
  if (c.zero >= 1 && c.zero_shard > 0)
    terms.push_back("HSDP (zero/zero_groups.h): N = cp x --zero-shard = " + std::to_string(c.cp) + " x " +
                    std::to_string(c.zero_shard) + " ranks hold the slices, replicated over dp/--zero-shard = " +
                    std::to_string(c.dp / c.zero_shard) + " shard groups");
  if (counts.hpz_parts > 0)
    terms.push_back("hpZ (zero/zero_groups.h): h = --zero-hpz = " + std::to_string(c.zero_hpz) +
                    "; after a unit's forward each rank keeps its 1/(h x cp) of it for the backward's gather");
  const FusedPieces fused = fused_pieces(c);
  if (fused.on)
    terms.push_back(std::string("--kernels fused (runtime/planner/memory_per_token.h): a norm keeps x, 1/rms, y; "
                                "SwiGLU gate, up, the product") +
                    (fused.hand_flash ? "; the hand-written flash attention q, k, v, out, its copy" : "") +
                    (fused.loss ? "; the loss dh and dW, never the [T, V] logits" : ""));
  if (m.is_moe())
    terms.push_back("A_moe = " + t.moe_formula + " per token per layer (router, top-" +
                    std::to_string(m.num_experts_per_tok) + " of E = " + std::to_string(m.num_local_experts) +
                    ", the experts' rows" + (c.ep > 1 ? ", the all-to-all's return buffer" : "") +
                    "; balanced routing: k.T rows per rank)");
  return terms;
}

}  // namespace

// The estimate in its three phases: the state held all step, what the forwards in flight
// keep (and hpZ's parts), the extra at the backward's peak.
MemoryEstimate estimate_memory(const TrainConfig& c, const MeshCoords& here, const ParameterCounts& counts) {
  const Sizes z = sizes_of(c);
  const PerToken t = per_token(c, z.e, z.a);
  MemoryEstimate est;
  est.state = state_lines(c, counts, z);
  const Kept kept = activations_kept(c, here, counts, t, z);
  est.activations = kept.activations;
  if (counts.hpz_parts > 0)  // hpZ: the units' parts kept since their forwards, all of them when the backward starts
    est.hpz_parts = {"hpZ parts (forward to backward)", counts.hpz_parts * z.e,
                     "(P_pad - the last pass's units)/(h x cp) x e = " + count_text(counts.hpz_parts) + " x " +
                         count_text(z.e)};
  est.transient = backward_peak(c, here, counts, t, kept.newest_chunk, z);
  est.terms = terms_of(c, counts, t);
  return est;
}

std::string memory_summary(const TrainConfig& c, const std::function<ShardPlan(const MeshCoords&)>& shard_plan_of) {
  const MeshShape shape{c.dp, c.pp, c.cp, c.tp};
  const MemoryEstimate est = estimate_memory(c, coords_of(shape, 0), shard_plan_of(coords_of(shape, 0)));
  const double e = c.dtype == Precision::kFP64 ? 8 : c.dtype == Precision::kFP32 ? 4 : 2;
  std::ostringstream o;
  o << "memory of rank 0 at its peak (estimate; T = B x S/cp = " << c.micro_batch_size << " x " << c.seq_len / c.cp
    << " = " << with_commas(c.micro_batch_size * c.seq_len / c.cp) << " tokens per micro-batch, e = " << e << " B ("
    << precision_name(c.dtype) << "), a = " << (c.dtype == Precision::kFP64 ? 8 : 4) << " B):\n";
  auto line = [&o](const std::string& name, double bytes, const std::string& formula) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "  %-34s %12s", name.c_str(), human_bytes(bytes).c_str());
    o << buf << "   " << formula << "\n";
  };
  for (const auto& l : est.state) line(l.name, l.bytes, l.formula);
  line(est.activations.name, est.activations.bytes, est.activations.formula);
  if (est.hpz_parts.bytes > 0) line(est.hpz_parts.name, est.hpz_parts.bytes, est.hpz_parts.formula);
  line(est.transient.name, est.transient.bytes, est.transient.formula);
  line("total at the peak", est.peak_bytes(), with_commas(int64_t(est.peak_bytes())) + " B");
  for (const auto& term : est.terms) o << "  " << term << "\n";
  if (shape.world_size() > 1) {
    // Ranks with the same peak share an entry: "ranks 0-3 1.2 GiB", in rank order.
    o << "peak per rank:";
    int first = 0;
    std::string value;
    auto flush = [&](int last) {
      o << (first > 0 ? ";" : "") << (last > first ? " ranks " + std::to_string(first) + "-" + std::to_string(last)
                                                   : " rank " + std::to_string(first))
        << " " << value;
    };
    for (int r = 0; r < shape.world_size(); ++r) {
      const MeshCoords here = coords_of(shape, r);
      const std::string v = human_bytes(estimate_memory(c, here, shard_plan_of(here)).peak_bytes());
      if (r > 0 && v != value) flush(r - 1), first = r;
      value = v;
    }
    flush(shape.world_size() - 1);
    o << "\n";
  }
  if (c.cp > 1 && c.cp_mode == "ring") o << "  (cp: ring attention's blocks in flight are not counted)\n";
  if (c.cp > 1 && c.cp_mode != "ring")  // context_parallel/README.md, "Memory"
    o << "  (cp " << c.cp_mode << ": the attention keeps what it keeps on one rank, nH/U heads of U x the tokens; "
      << "the all-to-alls' buffers in flight, about 2 (nH + f nKV)/tp Hd e per token, are not counted"
      << (c.cp_mode == "hybrid" ? ", nor the ring's blocks" : "") << ")\n";
  if (c.sp) o << "  (sp: counted as without sequence parallelism; its saving is not modeled)\n";
  std::string s = o.str();
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace picotron
