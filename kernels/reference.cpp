// kernels/reference.cpp — the ATen reference of every kernel in kernels/ops.h: the same
// signatures as the cuda:: launchers, written with plain ATen ops so that they run on
// any device. They are the CPU path of the fused autograd ops (kernels/autograd.cpp) and
// the oracle of the GPU tests. The backward passes are written out by hand (no
// autograd): tests/unit/test_kernels.cpp checks each against autograd in fp64 on the CPU.
//
// Statistics and softmax run in fp32 (fp64 for fp64 inputs), as in the kernels.
//
// Test: build/tests/unit_tests "[kernels]"
#include <stdexcept>
#include <torch/torch.h>

#include <cmath>

#include "kernels/kernels.h"
#include "picotron/dtype.h"

namespace picotron::kernels::reference {


// ---- RMSNorm: y = w * round(x * r), r = rsqrt(mean(x^2) + eps) ----------------------
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w, double eps) {
  // BEGIN ASSIGNMENT kernels.rmsnorm_forward
  const int64_t h = x.size(-1);
  auto xf = x.reshape({-1, h}).to(accumulate_type(x.scalar_type()));                                        // [N, H]
  auto inv_rms = torch::rsqrt(xf.pow(2).mean(/*dim=*/-1, /*keepdim=*/true) + eps);     // [N, 1]
  auto y = w * (xf * inv_rms).to(x.scalar_type());                                     // [N, H], rounded as model.cpp
  return {y.view(x.sizes()), inv_rms.squeeze(-1)};                                     // [..., H], [N]
  // END ASSIGNMENT
}

// With xhat = x r and g = dy w:  dx = r (g - xhat mean(g xhat)),  dw = sum over rows of dy xhat.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                     const at::Tensor& inv_rms) {
  const int64_t h = x.size(-1);
  const auto t = accumulate_type(x.scalar_type());
  auto xf = x.reshape({-1, h}).to(t), dyf = dy.reshape({-1, h}).to(t);  // [N, H]
  auto r = inv_rms.to(t).unsqueeze(-1);                                 // [N, 1]
  auto xhat = xf * r;                                                   // [N, H]
  auto g = dyf * w.to(t);                                               // [N, H]
  auto dx = r * (g - xhat * (g * xhat).mean(/*dim=*/-1, /*keepdim=*/true));
  auto dw = (dyf * xhat.to(x.scalar_type()).to(t)).sum(/*dim=*/0);     // [H]
  return {dx.to(x.scalar_type()).view(x.sizes()), dw.to(w.scalar_type())};
}

// ---- RoPE on q and k: x cos + rotate_half(x) sin (inverse: -sin) ----------------------
std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                        const at::Tensor& sin, bool inverse) {
  const int64_t s = q.size(1), hd = q.size(-1);
  const auto t = accumulate_type(q.scalar_type());
  auto c = cos.to(t).view({1, s, 1, hd}), sn = sin.to(t).view({1, s, 1, hd}) * (inverse ? -1.0 : 1.0);  // [1, S, 1, Hd]
  const auto rotate = [&](const at::Tensor& x) {  // [B, S, n, Hd]
    auto xf = x.to(t);
    auto x1 = xf.narrow(-1, 0, hd / 2), x2 = xf.narrow(-1, hd / 2, hd / 2);
    return (xf * c + torch::cat({-x2, x1}, /*dim=*/-1) * sn).to(x.scalar_type());
  };
  return {rotate(q), rotate(k)};
}

// ---- SwiGLU: silu(gate) * up ---------------------------------------------------------
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up) {
  const auto t = accumulate_type(gate.scalar_type());
  return (torch::silu(gate.to(t)) * up.to(t)).to(gate.scalar_type());
}

// silu'(g) = sig (1 + g (1 - sig)), sig = sigmoid(g).
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up) {
  const auto t = accumulate_type(gate.scalar_type());
  auto g = gate.to(t), u = up.to(t), d = dy.to(t);
  auto sig = torch::sigmoid(g);
  auto dgate = d * u * sig * (1 + g * (1 - sig));
  auto dup = d * g * sig;
  return {dgate.to(gate.scalar_type()), dup.to(up.scalar_type())};
}

// ---- cross-entropy: loss = logsumexp(z) - z[target]; dz = (softmax(z) - onehot) * scale
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets,
                                                         double dlogits_scale, bool in_place) {
  const auto t = accumulate_type(logits.scalar_type());
  auto z = logits.to(t);                                           // [N, V]
  auto valid = targets.ne(-100);                                   // [N]
  auto safe = torch::where(valid, targets, torch::zeros_like(targets));
  auto lse = torch::logsumexp(z, /*dim=*/-1);                      // [N]
  auto picked = z.gather(/*dim=*/1, safe.unsqueeze(1)).squeeze(1);  // [N]
  auto losses = torch::where(valid, lse - picked, torch::zeros_like(lse)).to(torch::kFloat32);
  at::Tensor dlogits;
  if (dlogits_scale != 0) {
    auto d = torch::softmax(z, /*dim=*/-1);
    d.scatter_add_(/*dim=*/1, safe.unsqueeze(1), -torch::ones({z.size(0), 1}, d.options()));
    d = (d * dlogits_scale * valid.unsqueeze(1).to(t)).to(logits.scalar_type());  // [N, V]
    if (in_place) dlogits = const_cast<at::Tensor&>(logits).copy_(d);  // the logits' memory, as the kernel does
    else dlogits = d;
  }
  return {losses, dlogits};
}

// ---- AdamW, one tensor after the other (picotron/optim.cpp's math) -------------------
void adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& master,
                const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                const std::vector<at::Tensor>& exp_avg_sq, const std::vector<bool>& decay, const AdamWHyper& h) {
  torch::NoGradGuard no_grad;
  const double c = h.grad_scale, b1 = h.beta1, b2 = h.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(h.step)), bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(h.step)));
  for (size_t i = 0; i < master.size(); ++i) {
    auto m = exp_avg[i], v = exp_avg_sq[i], w = master[i];
    m.mul_(b1).add_(grads[i], (1.0 - b1) * c);                        // m = b1 m + (1 - b1) c g
    v.mul_(b2).addcmul_(grads[i], grads[i], (1.0 - b2) * c * c);      // v = b2 v + (1 - b2) (c g)^2
    if (decay[i] && h.weight_decay != 0) w.mul_(1.0 - h.lr * h.weight_decay);
    w.addcdiv_(m, v.sqrt().div_(bias2_sqrt).add_(h.eps), -h.lr / bias1);
    if (!params[i].is_same(w)) params[i].copy_(w);
  }
}

// ---- attention: softmax(scale q k^T, causal) v, GQA; lse = logsumexp of each score row
namespace {
struct Scores {
  at::Tensor k_full, v_full, p;  // [B, nH, S, Hd] x2, [B, nH, S, S] probabilities
};
Scores attention_scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double scale, bool causal,
                        at::Tensor* lse) {
  const auto t = accumulate_type(q.scalar_type());
  const int64_t group = q.size(1) / k.size(1), s = q.size(2);
  Scores r;
  r.k_full = k.to(t).repeat_interleave(group, /*dim=*/1);  // [B, nH, S, Hd]
  r.v_full = v.to(t).repeat_interleave(group, /*dim=*/1);  // [B, nH, S, Hd]
  auto scores = torch::matmul(q.to(t), r.k_full.transpose(-1, -2)) * scale;  // [B, nH, S, S]
  if (causal) scores.masked_fill_(torch::ones({s, s}, torch::kBool).triu(1).to(q.device()), -INFINITY);
  auto row_lse = torch::logsumexp(scores, /*dim=*/-1);  // [B, nH, S]
  r.p = torch::exp(scores - row_lse.unsqueeze(-1));     // [B, nH, S, S]
  if (lse) *lse = row_lse.to(torch::kFloat32);
  return r;
}
// [B, nH, S, Hd] -> [B, nKV, S, Hd]: the sum over each group of nH / nKV query heads.
at::Tensor sum_groups(const at::Tensor& x, int64_t n_kv) {
  return x.view({x.size(0), n_kv, x.size(1) / n_kv, x.size(2), x.size(3)}).sum(/*dim=*/2);
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, double scale, bool causal) {
  at::Tensor lse;
  const Scores r = attention_scores(q, k, v, scale, causal, &lse);
  return {torch::matmul(r.p, r.v_full).to(q.scalar_type()), lse};  // [B, nH, S, Hd], [B, nH, S]
}

// dV = P^T dO; dP = dO V^T; dS = P (dP - D), D = rowsum(dO O); dQ = scale dS K; dK = scale dS^T Q
// (dK, dV summed over each group's query heads).
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        double scale, bool causal) {
  (void)lse;  // recomputed from q and k: the same numbers, in the reference's precision
  const auto t = accumulate_type(q.scalar_type());
  const Scores r = attention_scores(q, k, v, scale, causal, nullptr);
  auto d_o = dout.to(t);                                                     // [B, nH, S, Hd]
  auto dv = torch::matmul(r.p.transpose(-1, -2), d_o);                       // [B, nH, S, Hd]
  auto dp = torch::matmul(d_o, r.v_full.transpose(-1, -2));                  // [B, nH, S, S]
  auto d = (d_o * out.to(t)).sum(/*dim=*/-1, /*keepdim=*/true);              // [B, nH, S, 1]
  auto ds = r.p * (dp - d);                                                  // [B, nH, S, S]
  auto dq = torch::matmul(ds, r.k_full) * scale;                             // [B, nH, S, Hd]
  auto dk = torch::matmul(ds.transpose(-1, -2), q.to(t)) * scale;            // [B, nH, S, Hd]
  const int64_t n_kv = k.size(1);
  return {dq.to(q.scalar_type()), sum_groups(dk, n_kv).to(k.scalar_type()), sum_groups(dv, n_kv).to(v.scalar_type())};
}

}  // namespace picotron::kernels::reference
