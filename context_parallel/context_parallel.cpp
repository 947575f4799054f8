// context_parallel/context_parallel.cpp — ring attention. See context_parallel.h for the
// ring and the merge, cp_layout.h for who holds what.
#include "context_parallel/context_parallel.h"

#include "context_parallel/ulysses.h"

#include "picotron/saved_object.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "picotron/dtype.h"
#include "picotron/format.h"

namespace picotron {

using torch::autograd::AutogradContext;

namespace {

// The block on the explicit scores: s = q k^T / sqrt(Hd) over the kv heads each query
// head reads, masked if causal. (Only for devices without the CPU flash kernel.)
torch::Tensor block_scores(const torch::Tensor& q, const torch::Tensor& k, bool causal) {
  const int64_t group = q.size(1) / k.size(1);
  const auto acc = accumulate_type(q.scalar_type());
  auto k_full = k.repeat_interleave(group, 1).to(acc);                                      // [B, nH, Sk, Hd]
  auto s = torch::matmul(q.to(acc), k_full.transpose(-1, -2)) / std::sqrt(double(q.size(-1)));  // [B, nH, Sq, Sk]
  if (causal) {
    auto future = torch::ones({q.size(2), k.size(2)}, torch::dtype(torch::kBool).device(q.device())).triu(1);
    s = s.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  return s;
}

// Sum the repeated heads' gradients back onto their nKV heads: [B, nH, S, Hd] -> [B, nKV, S, Hd].
torch::Tensor sum_groups(const torch::Tensor& g, int64_t kv_heads) {
  return g.view({g.size(0), kv_heads, g.size(1) / kv_heads, g.size(2), g.size(3)}).sum(2);
}

}  // namespace

BlockResult attention_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                            bool explicit_scores) {
  if (q.is_cpu() && !explicit_scores) {  // grouped-query attention is native to this kernel
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, /*dropout_p=*/0.0, causal);
    return {out, lse};  // [B, nH, Sq, Hd], [B, nH, Sq]
  }
  const auto s = block_scores(q, k, causal);                                              // [B, nH, Sq, Sk]
  const auto lse = s.logsumexp(-1);                                                       // [B, nH, Sq]
  const auto p = (s - lse.unsqueeze(-1)).exp();                                           // softmax
  const auto v_full = v.repeat_interleave(q.size(1) / v.size(1), 1).to(p.scalar_type());  // [B, nH, Sk, Hd]
  return {torch::matmul(p, v_full).to(q.scalar_type()), lse};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_block_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, bool causal, bool explicit_scores) {
  if (q.is_cpu() && !explicit_scores)
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, /*dropout_p=*/0.0, causal);
  // P = exp(s - lse) with the FINAL lse: this block's share of the softmax over all keys.
  const auto acc = lse.scalar_type();
  const int64_t group = q.size(1) / k.size(1);
  const auto p = (block_scores(q, k, causal) - lse.unsqueeze(-1)).exp();            // [B, nH, Sq, Sk]
  const auto v_full = v.repeat_interleave(group, 1).to(acc), k_full = k.repeat_interleave(group, 1).to(acc);
  const auto d = dout.to(acc), o = out.to(acc);
  const auto dp = torch::matmul(d, v_full.transpose(-1, -2));                      // [B, nH, Sq, Sk]
  const auto ds = p * (dp - (d * o).sum(-1, /*keepdim=*/true));                    // softmax backward
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  auto dq = torch::matmul(ds, k_full) * scale;                                     // [B, nH, Sq, Hd]
  auto dk = sum_groups(torch::matmul(ds.transpose(-1, -2), q.to(acc)) * scale, k.size(1));  // [B, nKV, Sk, Hd]
  auto dv = sum_groups(torch::matmul(p.transpose(-1, -2), d), v.size(1));                 // [B, nKV, Sk, Hd]
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

namespace {

constexpr int kKvTag = 0, kGradTag = 1;  // two message streams between the same neighbours

// Send `mine` to the next rank of the ring and receive the previous rank's into a new
// tensor of the same shape (returned with the handle; do not touch either until waited).
// `at`: the caller's line, and what the hop carries.
std::pair<Work, torch::Tensor> pass_on(Comm& cp, const torch::Tensor& mine, int tag, CallSite at) {
  // BEGIN ASSIGNMENT cp.ring_step
  const int C = cp.size(), r = cp.rank();
  auto incoming = torch::empty_like(mine);
  Work w = cp.batch_p2p_async({{P2POp::kSend, mine, (r + 1) % C, tag}, {P2POp::kRecv, incoming, (r + C - 1) % C, tag}}, at);
  return {std::move(w), incoming};
  // END ASSIGNMENT
}

// Rows of a [B, n, S, Hd] (or [B, n, S]) tensor along S, made contiguous for the kernel.
torch::Tensor rows(const torch::Tensor& t, int64_t first, int64_t count) { return t.narrow(2, first, count).contiguous(); }

// out, lse (running, fp32/fp64) absorb one block's (o_b, lse_b) for the same query rows.
void merge(torch::Tensor out, torch::Tensor lse, const torch::Tensor& o_b, const torch::Tensor& lse_b) {
  // BEGIN ASSIGNMENT cp.lse_merge
  const auto lb = lse_b.to(lse.scalar_type());
  const auto merged = torch::maximum(lse, lb) + torch::log1p(torch::exp(-(lse - lb).abs()));  // [B, nH, q]
  out.mul_(torch::exp(lse - merged).unsqueeze(-1)).add_(o_b.to(out.scalar_type()) * torch::exp(lb - merged).unsqueeze(-1));
  lse.copy_(merged);
  // END ASSIGNMENT
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  // q [B, nH, n, Hd], k, v [B, nKV, n, Hd] (n = S/C tokens of this rank) -> [B, nH, n, Hd]
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, Comm* cp_comm, int64_t layout) {
    Comm& cp = *cp_comm;
    const int C = cp.size(), r = cp.rank();
    const int64_t n = q.size(2);
    const auto acc = accumulate_type(q.scalar_type());
    auto out = torch::zeros(q.sizes(), q.options().dtype(acc));                                     // running output
    auto lse = torch::full({q.size(0), q.size(1), n}, -std::numeric_limits<double>::infinity(), out.options());
    auto kv = torch::stack({k, v}).contiguous();  // [2, B, nKV, n, Hd]: what travels
    for (int step = 0; step < C; ++step) {
      std::pair<Work, torch::Tensor> next;
      if (step + 1 < C)  // travels while this one computes
        next = pass_on(cp, kv, kKvTag, carries("ring attention: the K and V block held, one hop on; the previous rank's in"));
      for (const RingBlock& b : ring_blocks(CpLayout(layout), C, r, step, n)) {
        const auto res = attention_block(rows(q, b.q_first, b.q_len), rows(kv[0], b.k_first, b.k_len),
                                         rows(kv[1], b.k_first, b.k_len), b.causal);
        merge(out.narrow(2, b.q_first, b.q_len), lse.narrow(2, b.q_first, b.q_len), res.out, res.lse);
      }
      if (step + 1 < C) {
        next.first.wait();
        kv = next.second;
      }
    }
    out = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["cp"] = saved_object(cp_comm);  // picotron/saved_object.h
    ctx->saved_data["layout"] = layout;
    return out;
  }

  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    Comm& cp = *saved_object_of<Comm*>(ctx->saved_data["cp"]);
    const auto layout = CpLayout(ctx->saved_data["layout"].toInt());
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const auto dout = grads[0].contiguous();
    const int C = cp.size(), r = cp.rank();
    const int64_t n = q.size(2);
    const auto acc = lse.scalar_type();
    auto dq = torch::zeros(q.sizes(), q.options().dtype(acc));  // stays here
    auto kv = torch::stack({k, v}).contiguous();                 // [2, B, nKV, n, Hd], round the ring again
    auto dkv = torch::zeros(kv.sizes(), kv.options().dtype(acc));  // dK, dV of the block held: travels with it
    for (int step = 0; step < C; ++step) {
      std::pair<Work, torch::Tensor> next_kv;
      if (step + 1 < C)
        next_kv = pass_on(cp, kv, kKvTag, carries("ring attention: the K and V block held, one hop on again for the backward"));
      for (const RingBlock& b : ring_blocks(layout, C, r, step, n)) {
        auto [dq_b, dk_b, dv_b] = attention_block_backward(
            rows(dout, b.q_first, b.q_len), rows(q, b.q_first, b.q_len), rows(kv[0], b.k_first, b.k_len),
            rows(kv[1], b.k_first, b.k_len), rows(out, b.q_first, b.q_len), rows(lse, b.q_first, b.q_len), b.causal);
        dq.narrow(2, b.q_first, b.q_len).add_(dq_b);
        dkv[0].narrow(2, b.k_first, b.k_len).add_(dk_b);
        dkv[1].narrow(2, b.k_first, b.k_len).add_(dv_b);
      }
      if (C > 1) {  // hand the block's gradient on: to whoever holds the block next, after the last step its owner
        // (the last hop brings each block's gradient home)
        auto [sent, incoming] = pass_on(cp, dkv, kGradTag, carries("ring attention: the dK, dV summed so far for the "
                                                                   "block held, one hop on"));
        if (step + 1 < C) {
          next_kv.first.wait();
          kv = next_kv.second;
        }
        sent.wait();
        dkv = incoming;
      }
    }
    // dkv is now my own block's: every rank's contribution added on its way round.
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), {}, {}};
  }
};

}  // namespace

AttentionCore ring_attention(Comm& cp, CpLayout layout) {
  return [&cp, layout](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return RingAttention::apply(q, k, v, &cp, int64_t(layout));
  };
}

std::string cp_summary(const CpSettings& s, int C, int64_t seq_len) {
  const int U = cp_ulysses_size(s.mode, C, s.ulysses), R = C / U;  // all-to-all group, ring
  std::string work;
  for (int r = 0; r < R; ++r) work += (r ? ", " : "") + with_commas(ring_attention_work(s.layout, R, r, seq_len / R));
  const std::string head = "context parallelism: cp " + std::to_string(C) + ", " + cp_layout_name(s.layout) +
                           " layout, " + std::to_string(seq_len / C) + " of " + std::to_string(seq_len) +
                           " tokens per rank; ";
  if (s.mode == CpMode::kRing) return head + "attention work per cp rank (query-key pairs per head): " + work;
  if (s.mode == CpMode::kUlysses)
    return head + "ulysses: all-to-alls over " + std::to_string(C) + " ranks, each attends whole sequences with 1/" +
           std::to_string(C) + " of the heads (query-key pairs per head: " + work + ")";
  return head + "hybrid: all-to-alls over " + std::to_string(U) + " ranks (" + std::to_string(seq_len / R) +
         " tokens, 1/" + std::to_string(U) + " of the heads), then a ring of " + std::to_string(R) +
         "; attention work per ring rank (query-key pairs per head): " + work;
}

std::string cp_groups_text(const CpSettings& s, const MeshShape& shape) {
  if (s.mode != CpMode::kHybrid) return "";
  const int C = shape.cp, U = cp_ulysses_size(s.mode, C, s.ulysses);
  auto line = [&](const std::string& name, std::vector<int> (*cp_members)(int, int, int)) {
    std::string out = name + ":";
    for (int r = 0; r < shape.world_size(); ++r) {  // each group once, listed by its first member
      const std::vector<int> cp = group_members(shape, r, Axis::kCp);  // world ranks by cp rank
      const std::vector<int> m = cp_members(C, U, coords_of(shape, r).cp);
      if (cp[size_t(m.front())] != r) continue;
      out += " [";
      for (size_t i = 0; i < m.size(); ++i) out += (i ? " " : "") + std::to_string(cp[size_t(m[i])]);
      out += "]";
    }
    return out;
  };
  return line("cp all-to-all groups (cp_a2a, " + std::to_string(U) + " ranks)",
              [](int, int U, int rank) { return cp_a2a_members(U, rank); }) +
         "\n" +
         line("cp rings (cp_ring, " + std::to_string(C / U) + " ranks)", cp_ring_members);
}

namespace {
struct CpGroups {  // hybrid: split from mesh.cp()
  Comm a2a, ring;
};
}  // namespace

void apply_context_parallel(LlamaForCausalLM& model, Mesh& mesh, const CpSettings& s) {
  Comm& cp = mesh.cp();
  TORCH_CHECK(cp.rank() == mesh.coords().cp, "context parallelism: the cp group's ranks must follow cp");
  const int C = cp.size(), U = cp_ulysses_size(s.mode, C, s.ulysses);
  std::shared_ptr<CpGroups> groups;
  if (s.mode == CpMode::kHybrid) {  // all-to-all group i: cp ranks iU .. iU+U-1; ring u: cp ranks u, U+u, 2U+u, ...
    groups = std::make_shared<CpGroups>();
    groups->a2a = cp.split(/*color=*/cp_ring_rank(cp.rank(), U), /*key=*/cp_a2a_rank(cp.rank(), U), "cp_a2a");
    groups->ring = cp.split(/*color=*/cp_a2a_rank(cp.rank(), U), /*key=*/cp_ring_rank(cp.rank(), U), "cp_ring");
  }
  for (auto& [index, layer] : model->model->layers->items) {
    (void)index;
    AttentionCore& core = layer->self_attn->core;
    if (s.mode == CpMode::kRing) core = ring_attention(cp, s.layout);
    else if (s.mode == CpMode::kUlysses) core = ulysses_attention(cp, C, cp.rank(), s.layout, core);  // the layer's own core inside
    else core = ulysses_attention(groups->a2a, C, cp.rank(), s.layout, ring_attention(groups->ring, s.layout), groups);
  }
}

}  // namespace picotron
