// kernels/autograd.cpp — each forward/backward pair of kernels/ops.h as one autograd op.
//
// On CUDA tensors the pair is the fused kernel (cuda::); on any other device it is the
// ATen reference (reference::), so the wiring below (what is saved for backward, the
// reshapes, the chunking of the fused linear + cross-entropy) is tested on the CPU
// against the model's plain ops (tests/unit/test_kernels.cpp), and on a GPU the kernels.
//
// Test: build/tests/unit_tests "[kernels]"
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/kernels.h"

namespace picotron::kernels {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool fused_built() {
#ifdef PICOTRON_WITH_CUDA
  return true;
#else
  return false;
#endif
}

namespace {

// The kernel on CUDA tensors, the reference elsewhere: same signature, same meaning.
bool on_gpu(const at::Tensor& t) { return t.is_cuda(); }

// fwd: y = w * x / rms(x)   bwd: dx, dw from the saved x, w and 1/rms (one kernel each way)
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps) {
    auto x2 = x.contiguous().view({-1, x.size(-1)});  // [N, H]
    auto [y, inv_rms] = on_gpu(x) ? cuda::rms_norm_forward(x2, w.contiguous(), eps)
                                  : reference::rms_norm_forward(x2, w, eps);  // [N, H], [N]
    ctx->save_for_backward({x2, w, inv_rms});
    ctx->saved_data["shape"] = x.sizes();
    return y.view(x.sizes());
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x2 = saved[0];
    auto dy = grads[0].contiguous().view(x2.sizes());  // [N, H]
    auto [dx, dw] = on_gpu(dy) ? cuda::rms_norm_backward(dy, x2, saved[1].contiguous(), saved[2])
                               : reference::rms_norm_backward(dy, x2, saved[1], saved[2]);
    return {dx.view(ctx->saved_data["shape"].toIntVector()), dw, at::Tensor()};
  }
};

// fwd: rotate q and k by their positions' angles   bwd: rotate the gradients back (-angle)
struct RopeFn : torch::autograd::Function<RopeFn> {
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                             const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    auto [q2, k2] = (on_gpu(q) ? cuda::rope : reference::rope)(q.contiguous(), k.contiguous(), cos.contiguous(),
                                                                 sin.contiguous(), /*inverse=*/false);
    return {q2, k2};  // [B, S, nH, Hd], [B, S, nKV, Hd]
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dq, dk] = (on_gpu(grads[0]) ? cuda::rope : reference::rope)(grads[0].contiguous(), grads[1].contiguous(),
                                                                        saved[0], saved[1], /*inverse=*/true);
    return {dq, dk, at::Tensor(), at::Tensor()};
  }
};

// fwd: silu(gate) * up   bwd: dgate, dup in one pass (silu recomputed, never stored)
struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    auto g = gate.contiguous(), u = up.contiguous();
    ctx->save_for_backward({g, u});
    return on_gpu(g) ? cuda::swiglu_forward(g, u) : reference::swiglu_forward(g, u);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto dy = grads[0].contiguous();
    auto [dg, du] = on_gpu(dy) ? cuda::swiglu_backward(dy, saved[0], saved[1])
                               : reference::swiglu_backward(dy, saved[0], saved[1]);
    return {dg, du};
  }
};

// 1 / (rows whose target is not -100): the mean's divisor (one host sync).
double inverse_count(const at::Tensor& targets) {
  const int64_t n = targets.ne(-100).sum().item<int64_t>();
  return n > 0 ? 1.0 / double(n) : 0.0;
}

// fwd: mean loss; dlogits computed in the same pass and kept   bwd: dlogits * dloss
struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    auto z = logits.contiguous();
    const double scale = inverse_count(targets);  // the mean's 1 / count, folded into dlogits too
    auto [losses, dlogits] = (on_gpu(z) ? cuda::cross_entropy_forward : reference::cross_entropy_forward)(
        z, targets.contiguous(), scale, /*in_place=*/false);  // [N] fp32, [N, V]
    ctx->save_for_backward({dlogits});
    return losses.sum() * scale;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto dlogits = ctx->get_saved_variables()[0];
    return {dlogits * grads[0].to(dlogits.scalar_type()), at::Tensor()};
  }
};

// fwd: for each chunk of rows, logits = h W^T, then loss and dlogits (in place of the
// logits), dh = dlogits W, dW += dlogits^T h: the [N, V] logits never exist whole.
// bwd: the saved dh and dW times dloss.
struct LinearCrossEntropyFn : torch::autograd::Function<LinearCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk_rows) {
    torch::NoGradGuard no_grad;
    auto h = hidden.contiguous().view({-1, hidden.size(-1)});  // [N, H]
    auto t = targets.contiguous().view({-1});                   // [N]
    const double scale = inverse_count(t);
    auto loss = torch::zeros({}, h.options().dtype(torch::kFloat32));
    auto dh = torch::empty_like(h);                                       // [N, H]
    auto dw = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));  // [V, H] fp32 sums
    for (int64_t first = 0; first < h.size(0); first += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, h.size(0) - first);
      auto h_c = h.narrow(0, first, rows);                             // [c, H]
      auto logits = torch::matmul(h_c, weight.t());                    // [c, V]: the only logits alive
      auto [losses, dlogits] = (on_gpu(logits) ? cuda::cross_entropy_forward : reference::cross_entropy_forward)(
          logits, t.narrow(0, first, rows), scale, /*in_place=*/true);  // dlogits IS logits
      loss += losses.sum() * scale;
      dh.narrow(0, first, rows).copy_(torch::matmul(dlogits, weight));  // [c, H]
      dw.addmm_(dlogits.t().to(torch::kFloat32), h_c.to(torch::kFloat32));  // [V, H] += [V, c] [c, H]
    }
    ctx->save_for_backward({dh, dw.to(weight.scalar_type())});
    ctx->saved_data["shape"] = hidden.sizes();
    return loss;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0];
    return {(saved[0] * g.to(saved[0].scalar_type())).view(ctx->saved_data["shape"].toIntVector()),
            saved[1] * g.to(saved[1].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

// fwd: causal attention, the rung's kernel (the flash rungs never hold the S x S scores; rung 0
// does)   bwd: the scores recomputed from q, k and lse (tile by tile in the flash rungs)
struct FlashAttentionFn : torch::autograd::Function<FlashAttentionFn> {
  using Forward = decltype(&reference::flash_attention_forward);
  using Backward = decltype(&reference::flash_attention_backward);
  static Forward forward_of(bool gpu, FlashRung rung) {
    if (!gpu) return reference::flash_attention_forward;
    return rung == FlashRung::kMma     ? cuda::flash_attention_mma_forward
           : rung == FlashRung::kNaive ? cuda::attention_naive_forward
                                       : cuda::flash_attention_forward;
  }
  static Backward backward_of(bool gpu, FlashRung rung) {
    if (!gpu) return reference::flash_attention_backward;
    return rung == FlashRung::kMma     ? cuda::flash_attention_mma_backward
           : rung == FlashRung::kNaive ? cuda::attention_naive_backward
                                       : cuda::flash_attention_backward;
  }
  static tensor_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t rung) {
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
    auto [out, lse] = forward_of(on_gpu(qc), FlashRung(rung))(qc, kc, vc, scale, /*causal=*/true);  // [B, nH, S, Hd], [B, nH, S]
    ctx->saved_data["rung"] = rung;
    ctx->save_for_backward({qc, kc, vc, out, lse});
    ctx->mark_non_differentiable({lse});
    return {out, lse};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto s = ctx->get_saved_variables();
    const double scale = 1.0 / std::sqrt(double(s[0].size(-1)));
    auto dout = grads[0].contiguous();
    const auto rung = FlashRung(ctx->saved_data["rung"].toInt());
    auto [dq, dk, dv] = backward_of(on_gpu(dout), rung)(dout, s[0], s[1], s[2], s[3], s[4], scale, /*causal=*/true);
    return {dq, dk, dv, at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) { return RmsNormFn::apply(x, w, eps); }

std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                        const at::Tensor& sin) {
  auto out = RopeFn::apply(q, k, cos, sin);
  return {out[0], out[1]};
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwigluFn::apply(gate, up); }

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  return CrossEntropyFn::apply(logits, targets);
}

at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows) {
  TORCH_CHECK(chunk_rows > 0, "linear_cross_entropy: chunk_rows must be positive, got ", chunk_rows);
  return LinearCrossEntropyFn::apply(hidden, weight, targets, chunk_rows);
}

std::tuple<at::Tensor, at::Tensor> flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   FlashRung rung) {
  auto out = FlashAttentionFn::apply(q, k, v, static_cast<int64_t>(rung));
  return {out[0], out[1]};
}

void adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& master,
                const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                const std::vector<at::Tensor>& exp_avg_sq, const std::vector<bool>& decay, const AdamWHyper& h) {
  if (master.empty()) return;
  (on_gpu(master.front()) ? cuda::adamw_step : reference::adamw_step)(params, master, grads, exp_avg, exp_avg_sq,
                                                                       decay, h);
}

}  // namespace picotron::kernels
