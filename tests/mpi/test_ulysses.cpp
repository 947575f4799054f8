// Ulysses and the hybrid under mpirun, the world being the cp group (ctest -R
// context_parallel.ulysses): for both layouts, plain and grouped-query attention (also
// nKV < U: the repeated kv heads), each rank's output and its dQ, dK, dV equal full
// causal attention over the whole sequence at that rank's tokens (fp64, 1e-12); and the
// ledger counts context_parallel/README.md's elements: 8 all-to-alls per layer (q, k, v, o
// forward; their gradients backward) of (U-1)/U · B·(S/C)·Hd · (2nH + 2f·nKV) in all,
// plus, hybrid, the ring's 3R-2 hops of 2·B·(U·S/C)·(f·nKV/U)·Hd.
// Run with 2 ranks (U = 2) and 4 ranks (U = 4, and the hybrid U = 2 x ring R = 2).
// Prints "N passed, M failed"; exits non-zero on any failure.
#include <numeric>

#include <torch/torch.h>

#include "context_parallel/context_parallel.h"
#include "context_parallel/ulysses.h"
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

double rel_err(const torch::Tensor& got, const torch::Tensor& full, const torch::Tensor& mine) {
  return (got - full.index_select(2, mine)).abs().max().item<double>() / full.abs().max().item<double>();
}

CommCount counted(const Comm& c, const char* kind) { return c.ledger().count(kind) ? c.ledger().at(kind) : CommCount{}; }

}  // namespace

int main() {
  Distributed dist(detect_launch(process_environment()));
  torch::set_num_threads(1);
  Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(60));
  const int C = world.size(), rank = world.rank();
  const int64_t B = 2, S = 8 * C, Hd = 8, n = S / C;
  std::vector<int> group_sizes{C};
  if (C == 4) group_sizes.push_back(2);  // the hybrid: all-to-all over 2, rings of 2
  for (int U : group_sizes) {
    const int R = C / U;
    Comm a2a = U == C ? Comm() : world.split(cp_ring_rank(rank, U), cp_a2a_rank(rank, U), "cp_a2a");
    Comm ring = U == C ? Comm() : world.split(cp_a2a_rank(rank, U), cp_ring_rank(rank, U), "cp_ring");
    Comm& group = U == C ? world : a2a;
    for (CpLayout layout : {CpLayout::kContiguous, CpLayout::kZigzag})
      for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{4, 2}, {4, 4}, {8, 1}}) {
        const int64_t f = U / std::gcd(kv_heads, int64_t(U));
        const std::string tag = std::string(cp_layout_name(layout)) + " C=" + std::to_string(C) + " U=" +
                                std::to_string(U) + " nH=" + std::to_string(heads) + " nKV=" + std::to_string(kv_heads) + ": ";
        torch::manual_seed(7);  // the same full tensors on every rank
        const auto f64 = torch::dtype(torch::kFloat64);
        const auto q = torch::randn({B, heads, S, Hd}, f64) * 3, k = torch::randn({B, kv_heads, S, Hd}, f64),
                   v = torch::randn({B, kv_heads, S, Hd}, f64), dout = torch::randn({B, heads, S, Hd}, f64);
        auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(), vr = v.clone().requires_grad_();
        const auto out_ref = causal_attention(qr, kr, vr);
        out_ref.backward(dout);
        const auto mine = torch::tensor(cp_positions(S, C, rank, layout), torch::kInt64);  // [S/C]
        auto ql = q.index_select(2, mine).requires_grad_(), kl = k.index_select(2, mine).requires_grad_(),
             vl = v.index_select(2, mine).requires_grad_();
        group.reset_ledger();
        ring.reset_ledger();
        const AttentionCore core = U == C ? ulysses_attention(world, C, rank, layout, causal_attention)
                                          : ulysses_attention(a2a, C, rank, layout, ring_attention(ring, layout));
        const auto out = core(ql, kl, vl);
        out.backward(dout.index_select(2, mine));
        const double e_out = rel_err(out, out_ref, mine), e_dq = rel_err(ql.grad(), qr.grad(), mine),
                     e_dk = rel_err(kl.grad(), kr.grad(), mine), e_dv = rel_err(vl.grad(), vr.grad(), mine);
        check(e_out < 1e-12, tag + "output equals full causal attention (" + sci(e_out) + ")", rank);
        check(e_dq < 1e-12 && e_dk < 1e-12 && e_dv < 1e-12,
              tag + "dQ, dK, dV equal full causal attention's (" + sci(e_dq) + ", " + sci(e_dk) + ", " + sci(e_dv) + ")",
              rank);
        const CommCount a2a_count = counted(group, "all_to_all");
        const int64_t expect = 2 * (U - 1) * B * n * Hd * (2 * heads + 2 * f * kv_heads) / U;
        check(a2a_count.calls == 8 && a2a_count.elements == expect,
              tag + "8 all-to-alls of (U-1)/U·B·(S/C)·Hd·(2nH + 2f·nKV) per forward + backward, " +
                  std::to_string(expect) + " elements (got " + std::to_string(a2a_count.calls) + " of " +
                  std::to_string(a2a_count.elements) + ")",
              rank);
        if (R > 1) {
          const CommCount sent = counted(ring, "send");
          const int64_t block = 2 * B * (U * n) * (f * kv_heads / U) * Hd;
          check(sent.calls == 3 * R - 2 && sent.elements == (3 * R - 2) * block,
                tag + "the ring sends 3R-2 blocks of 2·B·(U·S/C)·(f·nKV/U)·Hd (got " + std::to_string(sent.calls) +
                    " of " + std::to_string(sent.elements) + ")",
                rank);
        }
      }
  }
  world.barrier();
  return testing::summary(rank);
}
