// Ring attention under mpirun, the world being the cp group (ctest -R context_parallel):
// for both layouts, grouped-query and plain attention, and logits scaled up 300x (past exp overflow: the
// log-sum-exp merge must not overflow), each rank's output and its dQ, dK, dV equal full
// causal attention over the whole sequence at that rank's tokens (fp64, 1e-12); and one
// layer's forward + backward sends (C-1) + (C-1) + C messages of 2·B·(S/C)·nKV·Hd elements.
// Run with 2 and 4 ranks. Prints "N passed, M failed"; exits non-zero on any failure.
#include <torch/torch.h>

#include "context_parallel/context_parallel.h"
#include "picotron/model.h"

#include "mpi_check.h"

using namespace picotron;
using testing::check;

namespace {

std::string sci(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return text;
}

// Error at this rank's tokens, relative to the largest value over the whole sequence (a
// rank whose keys few queries see has small gradients: their own scale would inflate
// fp64 rounding of the large-logit cases).
double rel_err(const torch::Tensor& got, const torch::Tensor& full, const torch::Tensor& mine) {
  return (got - full.index_select(2, mine)).abs().max().item<double>() / full.abs().max().item<double>();
}

}  // namespace

int main() {
  Distributed dist(detect_launch(process_environment()));
  torch::set_num_threads(1);
  Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(60));
  const int C = world.size(), rank = world.rank();
  const int64_t B = 2, S = 8 * C, Hd = 8;
  for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kZigzag})
    for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {2, 2}})
      for (double scale : {1.0, 300.0}) {
        const std::string tag = std::string(cp_layout_name(layout)) + " C=" + std::to_string(C) + " nH=" +
                                std::to_string(heads) + " nKV=" + std::to_string(kv_heads) + " x" +
                                std::to_string(int(scale)) + ": ";
        torch::manual_seed(7);  // the same full tensors on every rank
        const auto f64 = torch::dtype(torch::kFloat64);
        const auto q = torch::randn({B, heads, S, Hd}, f64) * scale, k = torch::randn({B, kv_heads, S, Hd}, f64),
                   v = torch::randn({B, kv_heads, S, Hd}, f64), dout = torch::randn({B, heads, S, Hd}, f64);
        // The reference: causal attention over all S tokens in one process.
        auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(), vr = v.clone().requires_grad_();
        const auto out_ref = causal_attention(qr, kr, vr);
        out_ref.backward(dout);
        // The ring: each rank holds its tokens only.
        const auto mine = torch::tensor(cp_positions(S, C, rank, layout), torch::kInt64);  // [S/C]
        auto ql = q.index_select(2, mine).requires_grad_(), kl = k.index_select(2, mine).requires_grad_(),
             vl = v.index_select(2, mine).requires_grad_();
        world.reset_ledger();
        const auto out = ring_attention(world, layout)(ql, kl, vl);
        out.backward(dout.index_select(2, mine));
        const double e_out = rel_err(out, out_ref, mine), e_dq = rel_err(ql.grad(), qr.grad(), mine),
                     e_dk = rel_err(kl.grad(), kr.grad(), mine), e_dv = rel_err(vl.grad(), vr.grad(), mine);
        check(e_out < 1e-12, tag + "output equals full causal attention (" + sci(e_out) + ")", rank);
        check(e_dq < 1e-12 && e_dk < 1e-12 && e_dv < 1e-12,
              tag + "dQ, dK, dV equal full causal attention's (" + sci(e_dq) + ", " + sci(e_dk) +
                  ", " + sci(e_dv) + ")",
              rank);
        const auto sent = world.ledger().count("send") ? world.ledger().at("send") : CommCount{};
        const int64_t block = 2 * B * (S / C) * kv_heads * Hd;
        check(sent.calls == 3 * C - 2 && sent.elements == (3 * C - 2) * block,
              tag + "sends (C-1) + (C-1) + C blocks of 2·B·(S/C)·nKV·Hd (got " + std::to_string(sent.calls) + " of " +
                  std::to_string(sent.elements) + " elements)",
              rank);
      }
  world.barrier();
  return testing::summary(rank);
}
