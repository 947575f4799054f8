// context_parallel/ulysses.cpp — Ulysses' two all-to-alls around attention. See ulysses.h
// for the picture, the positions, GQA and the element counts.
#include "context_parallel/ulysses.h"

#include <numeric>
#include <stdexcept>

#include "picotron/saved_object.h"

namespace picotron {

using torch::autograd::AutogradContext;

namespace {

// fwd: all-to-all over the group   bwd: the same all-to-all (the exchange is its own adjoint)
struct Exchange : torch::autograd::Function<Exchange> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* group, int64_t layer,
                               int64_t tensor, bool backward_pass) {
    ctx->saved_data["group"] = saved_object(group);  // picotron/saved_object.h
    ctx->saved_data["layer"] = layer;                // the label, for the backward's title
    ctx->saved_data["tensor"] = tensor;
    if (group->observed()) group->note(exchange_title({layer, char(tensor)}, backward_pass));
    const std::vector<int64_t> one_row_each(group->size(), 1);  // row p to rank p, row p from rank p
    const auto in = x.contiguous();                             // [U, ...]
    auto out = torch::empty_like(in);                           // [U, ...]
    group->all_to_all(out, in, one_row_each, one_row_each);
    return out;
  }
  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    Comm* group = saved_object_of<Comm*>(ctx->saved_data["group"]);
    return {Exchange::apply(grads[0].contiguous(), group, ctx->saved_data["layer"].toInt(),
                            ctx->saved_data["tensor"].toInt(), true),  // d in_r[p] = d out_p[r]
            {}, {}, {}, {}};
  }
};

}  // namespace

std::string exchange_title(const ExchangeLabel& label, bool backward) {
  const bool output = label.tensor == 'o', named = label.tensor != '?';
  const bool to_heads = output == backward;  // q, k, v forward; dO backward
  const std::string name = !named ? (backward ? "a gradient" : "a tensor")
                           : output ? (backward ? "dO, the attention output's gradient" : "o, the attention output")
                                    : (backward ? "d" : "") + std::string(1, label.tensor);
  const std::string what =
      to_heads ? "this rank's tokens of every head, to the ranks of those heads"
               : "each head group's tokens, back to the ranks of those tokens";
  return "[" + (label.layer >= 0 ? "layer " + std::to_string(label.layer) + ", " : std::string()) + "Ulysses, " +
         (backward ? "backward" : "forward") + "] " + name + ": " + (to_heads ? "sequence -> heads" : "heads -> sequence") +
         ", " + what;
}

torch::Tensor exchange(const torch::Tensor& x, Comm& group, const ExchangeLabel& label) {
  if (group.size() == 1) return x;
  return Exchange::apply(x, &group, label.layer, int64_t(label.tensor), false);
}

torch::Tensor sequence_to_heads(const torch::Tensor& x, Comm& group, const ExchangeLabel& label) {
  const int64_t U = group.size(), B = x.size(0), h = x.size(1), n = x.size(2), Hd = x.size(3);
  TORCH_CHECK(h % U == 0, "Ulysses: ", h, " heads are not divisible by the all-to-all group ", U);
  auto rows = x.view({B, U, h / U, n, Hd}).transpose(0, 1);  // [U, B, h/U, n, Hd]: row p, head group p
  auto got = exchange(rows.contiguous(), group, label);      // [U, B, h/U, n, Hd]: row p, rank p's tokens
  return got.permute({1, 2, 0, 3, 4}).reshape({B, h / U, U * n, Hd});  // [B, h/U, U·n, Hd], rank order
}

torch::Tensor heads_to_sequence(const torch::Tensor& x, Comm& group, const ExchangeLabel& label) {
  const int64_t U = group.size(), B = x.size(0), g = x.size(1), n = x.size(2) / U, Hd = x.size(3);
  auto rows = x.view({B, g, U, n, Hd}).permute({2, 0, 1, 3, 4});  // [U, B, h/U, n, Hd]: row p, rank p's tokens
  auto got = exchange(rows.contiguous(), group, label);           // [U, B, h/U, n, Hd]: row p, head group p
  return got.transpose(0, 1).reshape({B, U * g, n, Hd});           // [B, h, n, Hd]
}

AttentionCore ulysses_attention(Comm& a2a, int C, int cp_rank, CpLayout layout, AttentionCore inner,
                                int64_t layer, std::shared_ptr<void> keep) {
  Comm* group = &a2a;
  // (keep named: a [=] lambda captures only what its body uses, and would drop it)
  return [group, C, cp_rank, layout, inner, layer, keep](const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v) -> torch::Tensor {
    const int U = group->size();
    const int64_t n = q.size(2), kv = k.size(1), f = U / std::gcd(kv, int64_t(U));  // GQA: f copies of each kv head
    // gathered (rank order) -> the order `inner` attends in, and back (cp_layout.h)
    const auto to = torch::tensor(ulysses_order(n * C, C, U, cp_rank, layout), torch::kInt64).to(q.device());
    const auto from = torch::argsort(to);
    // BEGIN ASSIGNMENT cp.ulysses
    auto q_h = sequence_to_heads(q, *group, {layer, 'q'}).index_select(2, to);                          // [B, nH/U, U·n, Hd]
    auto k_h = sequence_to_heads(k.repeat_interleave(f, 1), *group, {layer, 'k'}).index_select(2, to);  // [B, f·nKV/U, U·n, Hd]
    auto v_h = sequence_to_heads(v.repeat_interleave(f, 1), *group, {layer, 'v'}).index_select(2, to);  // [B, f·nKV/U, U·n, Hd]
    auto o_h = inner(q_h, k_h, v_h);                                                                    // [B, nH/U, U·n, Hd]
    return heads_to_sequence(o_h.index_select(2, from).contiguous(), *group, {layer, 'o'});             // [B, nH, n, Hd]
    // END ASSIGNMENT
  };
}

}  // namespace picotron
