// kernels/ops.h — the signatures every kernel has twice, with the same meaning:
//
//   picotron::kernels::reference::X   plain ATen ops (any device; the CPU path and the oracle)
//   picotron::kernels::cuda::X        the fused CUDA kernel in kernels/X.cu
//
// kernels/kernels.h includes this list inside each of the two namespaces, so the two
// sets cannot drift apart and a test compares cuda::X(args) with reference::X(args).
// Forward and backward are separate entries (no autograd here): kernels/autograd.cpp
// wraps each pair as an autograd Function; kernels/reference.cpp writes the backward
// math out by hand, and tests/unit/test_kernels.cpp checks it against autograd on the CPU.
//
// The CUDA launchers: CUDA tensors in, new tensors out, launched on the current stream
// (c10::cuda::getCurrentCUDAStream()); each checks device, dtype, contiguity and sizes
// with TORCH_CHECK (a message naming the argument) and checks the launch
// (C10_CUDA_KERNEL_LAUNCH_CHECK). The .cu files include ATen's light headers only
// (<ATen/core/Tensor.h>, <c10/cuda/...>), so each compiles in seconds.
// Shapes use the alphabet of picotron/model.h; N = rows (tokens); fp = bf16 / fp16 / fp32.
//
// (No include guard: included once per namespace, by kernels/kernels.h only.)

// ---- kernels/rmsnorm.cu ----------------------------------------------------------
// y = x * inv_rms * w, inv_rms = rsqrt(mean(x^2) + eps), statistics in fp32.
// x [N, H] fp, w [H] same dtype -> y [N, H] (x's dtype), inv_rms [N] fp32 (the reference:
// fp64 for fp64 inputs).
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w, double eps);
// dy [N, H], x [N, H], w [H], inv_rms [N] fp32 -> dx [N, H] (x's dtype), dw [H] (w's dtype).
// dw is reduced across rows in two passes (per-block partial sums, then one column sum),
// no atomics.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                     const at::Tensor& inv_rms);

// ---- kernels/rope.cu -------------------------------------------------------------
// q [B, S, nH, Hd], k [B, S, nKV, Hd] (contiguous, same fp dtype), cos/sin [S, Hd]
// (same dtype, the [freqs, freqs] tables of picotron/model.h) -> (q', k') same shapes,
// both in ONE launch. out = x * cos + rotate_half(x) * sin, rotate_half([x1, x2]) = [-x2, x1].
// inverse = true applies the transpose (the rotation by -angle): the backward pass.
std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                        const at::Tensor& sin, bool inverse);

// ---- kernels/swiglu.cu -----------------------------------------------------------
// gate, up [..., I] fp (same shape, dtype, contiguous) -> silu(gate) * up, same shape.
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);
// dy, gate, up [..., I] -> (dgate, dup), silu computed in fp32.
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& gate, const at::Tensor& up);

// ---- kernels/cross_entropy.cu ----------------------------------------------------
// logits [N, V] fp (contiguous), targets [N] int64 (ignore_index -100 allowed).
// One pass over each row (online softmax over the vocabulary, in chunks): per-row loss
// [N] fp32 (0 where ignored) and, when dlogits_scale != 0, dlogits [N, V] in the logits'
// dtype = (softmax - onehot) * dlogits_scale (0 rows where ignored). Never an fp32 copy
// of the logits. dlogits may alias the logits (in_place = true) to save their memory.
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets,
                                                         double dlogits_scale, bool in_place);

// ---- kernels/adamw.cu ------------------------------------------------------------
// One launch over every tensor (multi-tensor: a table of (pointer, size) chunks).
// Per element, with c = grad_scale, t = step (1, 2, ...):
//   g = c * grad;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   if decay[i]: w = w (1 - lr wd)
//   w = w - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   param = (param dtype) w      (skipped where param IS master)
// (h: AdamWHyper, kernels/kernels.h.)
// master, exp_avg, exp_avg_sq, grads: fp32 (all); params: bf16 / fp16 / fp32 — the same
// length lists, matching numels, contiguous, on one device.
void adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& master,
                const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                const std::vector<at::Tensor>& exp_avg_sq, const std::vector<bool>& decay, const AdamWHyper& h);

// ---- kernels/attention_wmma.cu (cuda::: rung 1 of the attention ladder, kernels/README.md) --
// FlashAttention-2 (arXiv 2307.08691). q [B, nH, S, Hd], k, v [B, nKV, S, Hd] (bf16 or
// fp16, contiguous, Hd 64 or 128, nH a multiple of nKV: query head h reads kv head
// h / (nH / nKV), K/V never repeated). scale = 1/sqrt(Hd) normally.
// -> out [B, nH, S, Hd] (q's dtype), lse [B, nH, S] fp32 (log-sum-exp of each score row,
// natural log, scale included: what ring attention merges partial results with).
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, double scale, bool causal);
// dout [B, nH, S, Hd], and the forward's inputs, out and lse -> (dq, dk, dv) in the
// shapes of q, k, v (dk, dv summed over the query heads of each group).
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        double scale, bool causal);
