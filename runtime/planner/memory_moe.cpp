// runtime/planner/memory_moe.cpp — a mixture-of-experts block's bytes per token. See memory_moe.h.
#include "runtime/planner/memory_moe.h"

#include "picotron/format.h"
#include "runtime/cli/train_config.h"

namespace picotron {

// Under sp a MoE block runs on this tp rank's S/tp positions (its experts whole).
static double sp_share(const TrainConfig& c) { return c.sp ? 1.0 / double(c.tp) : 1.0; }

// What autograd keeps of MoEImpl::forward and run_experts (expert_parallel/moe.cpp; with --ep
// ExpertParallel::run, expert_parallel.cpp), per routed token:
//   router: the softmax's output p [T, E] (a), the top-k indices [T, k] (int64), the top-k
//     probabilities [T, k] and their sum [T, 1] (a: the division that normalises keeps both)
//   per pair: the expert's input row, 4 SwiGLU intermediates [., I] (gate, silu, up,
//     product), its output and the weighted output (index_add keeps its source), the
//     pair's weight (e), the int64 indices of the gathers; --ep: the index of the row
//     received (8 more) and the returning all-to-all's receive buffer (H.e more), kept by
//     the weighting. The dispatching send/receive buffers [k.T, H] are freed after the forward.
double moe_per_token(const TrainConfig& c, double e, double a, std::string* formula) {
  const LlamaConfig& m = c.llama;
  const double H = double(m.hidden_size), I = double(m.intermediate_size);
  const double E = double(m.num_local_experts), k = double(m.num_experts_per_tok);
  const double router = E * a + k * (8 + a) + a;
  const bool ep = c.ep > 1;
  const double pair = (ep ? 24 : 16) + e + (ep ? 4 : 3) * H * e + 4 * I * e;
  const double routed = router + k * pair;
  if (formula) {
    *formula = "E.a + k(8 + a) + a + k(" + std::string(ep ? "24 + e + 4H.e" : "16 + e + 3H.e") + " + 4I.e) = " +
               with_commas(int64_t(routed)) + " B";
    if (c.sp) *formula += " (/tp under sp: " + with_commas(int64_t(routed * sp_share(c))) + " B)";
  }
  return routed * sp_share(c);
}

// The backward of the last MoE block at its widest, per token (balanced routing: one
// expert's n = k.T/E rows at a time, autograd runs the experts one after the other): the
// output's gradient and the input's, accumulated over the experts [T, H]; one expert's
// gradients of its rows [n, H] (gathered, weighted) and [n, I] (down's input, silu, up,
// gate). Under --ep the all-to-alls' gradient rows [k.T, H] take the place of the return
// buffer and the weighted rows, which their backward frees as it makes them.
double moe_backward_per_token(const TrainConfig& c, double e) {
  const LlamaConfig& m = c.llama;
  const double H = double(m.hidden_size), I = double(m.intermediate_size);
  const double E = double(m.num_local_experts), k = double(m.num_experts_per_tok);
  return (2 * H * e + k / E * (2 * H * e + 4 * I * e)) * sp_share(c);
}

// --ep: the forward of the last MoE block at its widest, per token over what its layers
// keep (the head not yet run): the dispatch's send and receive rows and the experts'
// results [k.T, H] each, alive until ExpertParallel::run returns, the combine's zeros and
// its sum [T, H], the experts' ids sent and received (int64).
double ep_forward_per_token(const TrainConfig& c, double e) {
  const LlamaConfig& m = c.llama;
  const double H = double(m.hidden_size), k = double(m.num_experts_per_tok);
  return (3 * k * H * e + 2 * H * e + 2 * k * 8) * sp_share(c);
}

}  // namespace picotron
