// context_parallel/ulysses.cpp — Ulysses' two all-to-alls around attention. See ulysses.h
// for the picture, the positions, GQA and the element counts.
#include "context_parallel/ulysses.h"

#include <numeric>
#include <stdexcept>

#include "picotron/saved_object.h"

namespace picotron {

using torch::autograd::AutogradContext;

namespace {

// x [U, ...] -> [U, ...]: row p goes to rank p of `group`, row p of the result came from rank
// p (out_r[p] = in_p[r]). `at`: the caller's site, and what it carries.
torch::Tensor all_to_all_rows(const torch::Tensor& x, Comm& group, CallSite at) {
  const std::vector<int64_t> one_row_each(group.size(), 1);  // row p to rank p, row p from rank p
  const auto in = x.contiguous();                             // [U, ...]
  auto out = torch::empty_like(in);                           // [U, ...]
  group.all_to_all(out, in, one_row_each, one_row_each, at);
  return out;
}

// The exchange is its own adjoint (d in_r[p] = d out_p[r]): each direction's backward is the
// same all-to-all on the gradient, which travels the other way.
// fwd: all-to-all, sequence -> heads   bwd: all-to-all, heads -> sequence
struct SequenceToHeads : torch::autograd::Function<SequenceToHeads> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* group) {
    ctx->saved_data["group"] = saved_object(group);  // picotron/saved_object.h
    return all_to_all_rows(x, *group, carries("Ulysses, sequence -> heads: q, k or v, this rank's tokens of every head "
                                              "to the ranks of those heads"));
  }
  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    Comm& group = *saved_object_of<Comm*>(ctx->saved_data["group"]);
    return {all_to_all_rows(grads[0], group, carries("Ulysses, heads -> sequence: dq, dk or dv, back to the ranks of their tokens")),
            {}};
  }
};

// fwd: all-to-all, heads -> sequence   bwd: all-to-all, sequence -> heads
struct HeadsToSequence : torch::autograd::Function<HeadsToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* group) {
    ctx->saved_data["group"] = saved_object(group);
    return all_to_all_rows(x, *group, carries("Ulysses, heads -> sequence: o, the attention output, each head "
                                              "group's tokens back to the ranks of those tokens"));
  }
  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    Comm& group = *saved_object_of<Comm*>(ctx->saved_data["group"]);
    return {all_to_all_rows(grads[0], group, carries("Ulysses, sequence -> heads: dO, the attention output's gradient, "
                                                     "to the ranks of its heads")),
            {}};
  }
};

}  // namespace

torch::Tensor sequence_to_heads(const torch::Tensor& x, Comm& group) {
  const int64_t U = group.size(), B = x.size(0), h = x.size(1), n = x.size(2), Hd = x.size(3);
  TORCH_CHECK(h % U == 0, "Ulysses: ", h, " heads are not divisible by the all-to-all group ", U);
  if (U == 1) return x;
  auto rows = x.view({B, U, h / U, n, Hd}).transpose(0, 1);          // [U, B, h/U, n, Hd]: row p, head group p
  auto got = SequenceToHeads::apply(rows.contiguous(), &group);      // [U, B, h/U, n, Hd]: row p, rank p's tokens
  return got.permute({1, 2, 0, 3, 4}).reshape({B, h / U, U * n, Hd});  // [B, h/U, U·n, Hd], rank order
}

torch::Tensor heads_to_sequence(const torch::Tensor& x, Comm& group) {
  const int64_t U = group.size(), B = x.size(0), g = x.size(1), n = x.size(2) / U, Hd = x.size(3);
  if (U == 1) return x;
  auto rows = x.view({B, g, U, n, Hd}).permute({2, 0, 1, 3, 4});  // [U, B, h/U, n, Hd]: row p, rank p's tokens
  auto got = HeadsToSequence::apply(rows.contiguous(), &group);   // [U, B, h/U, n, Hd]: row p, head group p
  return got.transpose(0, 1).reshape({B, U * g, n, Hd});           // [B, h, n, Hd]
}

AttentionCore ulysses_attention(Comm& a2a, int C, int cp_rank, CpLayout layout, AttentionCore inner,
                                std::shared_ptr<void> keep) {
  Comm* group = &a2a;
  // (keep named: a [=] lambda captures only what its body uses, and would drop it)
  return [group, C, cp_rank, layout, inner, keep](const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v) -> torch::Tensor {
    const int U = group->size();
    const int64_t n = q.size(2), kv = k.size(1), f = U / std::gcd(kv, int64_t(U));  // GQA: f copies of each kv head
    // gathered (rank order) -> the order `inner` attends in, and back (cp_layout.h)
    const auto to = torch::tensor(ulysses_order(n * C, C, U, cp_rank, layout), torch::kInt64).to(q.device());
    const auto from = torch::argsort(to);
    // BEGIN ASSIGNMENT cp.ulysses
    auto q_h = sequence_to_heads(q, *group).index_select(2, to);                          // [B, nH/U, U·n, Hd]
    auto k_h = sequence_to_heads(k.repeat_interleave(f, 1), *group).index_select(2, to);  // [B, f·nKV/U, U·n, Hd]
    auto v_h = sequence_to_heads(v.repeat_interleave(f, 1), *group).index_select(2, to);  // [B, f·nKV/U, U·n, Hd]
    auto o_h = inner(q_h, k_h, v_h);                                                      // [B, nH/U, U·n, Hd]
    return heads_to_sequence(o_h.index_select(2, from).contiguous(), *group);             // [B, nH, n, Hd]
    // END ASSIGNMENT
  };
}

}  // namespace picotron
