// kernels/attention_naive.cu — rung 0 of the attention ladder (kernels/README.md): causal
// attention as its definition reads, llm.c style, with the S x S scores in global memory.
// The rungs above compute the same (out, lse) without ever holding that matrix.
//
//   forward   S = scale Q K^T, masked (j > i: -inf)        [B, nH, S, S] fp32, global memory
//             P = softmax(S), row by row; lse_i = m_i + log sum_j exp(S_ij - m_i)
//             O = P V                                      [B, nH, S, Hd]
//   backward  P again, from Q, K and lse (the forward's S x S buffer is gone by then)
//             dV = P^T dO;  dS = P * (dO V^T - D), D_i = rowsum(dO_i * O_i) (in P's buffer)
//             dQ = scale dS K;  dK = scale dS^T Q             (GQA: dK, dV summed over the group)
//
// One thread per output element; every sum over the contraction reads global memory: no
// tiles, no shared memory, no tensor cores. What it costs is the lesson: the scores take
// B nH S^2 x 4 bytes (512 MiB at B 1, nH 32, S 2048), and every score is read from global
// memory Hd times by the P V step; FlashAttention's tiles keep both on the chip.
// Same contract as the rungs above (kernels/ops.h; q [B, nH, S, Hd], k, v [B, nKV, S, Hd],
// bf16 or fp16, Hd 64 or 128) and the same host side of the backward (attention_launch.cuh).
//
// reference: reference::flash_attention_forward / _backward (kernels/reference.cpp)
// test:      build/tests/unit_tests "[kernels][gpu]"    bench: build/bench/bench_kernels
// alone:     build/kernels/attention_rung 0   (this rung against the reference, timed; a GPU)
#include "kernels/attention_launch.cuh"

namespace picotron::kernels::cuda {
namespace {

constexpr int kNaiveThreads = 256;  // threads per block of every kernel here

// Where query head h of batch b reads its keys and values: kv head h / group.
__device__ inline int64_t naive_kv_head(int64_t bh, int nH, int group) {
  const int64_t b = bh / nH, h = bh % nH;
  return b * (nH / group) + h / group;
}

// scores[bh][i][j] = scale q_i . k_j (probs: exp(that - lse_i)); masked: -inf (probs: 0).
// Grid (S*S / 256, B*nH): one thread per score.
template <typename T, int Hd, bool kProbs>
__global__ void naive_scores_kernel(const T* __restrict__ q, const T* __restrict__ k, const float* __restrict__ lse,
                              float* __restrict__ scores, int nH, int group, int S, float scale, bool causal) {
  const int64_t bh = blockIdx.y, ij = static_cast<int64_t>(blockIdx.x) * kNaiveThreads + threadIdx.x;
  if (ij >= static_cast<int64_t>(S) * S) return;
  const int i = static_cast<int>(ij / S), j = static_cast<int>(ij % S);
  float s = kProbs ? 0.0f : -INFINITY;
  if (!causal || j <= i) {
    const T* qi = q + (bh * S + i) * Hd;
    const T* kj = k + (naive_kv_head(bh, nH, group) * S + j) * Hd;
    float dot = 0.0f;
    for (int d = 0; d < Hd; ++d) dot += to_float(qi[d]) * to_float(kj[d]);
    s = kProbs ? expf(scale * dot - lse[bh * S + i]) : scale * dot;
  }
  scores[bh * S * S + ij] = s;
}

// Row by row, in place: S -> P = softmax(S), and lse. One warp per row of [B*nH*S].
__global__ void naive_softmax_kernel(float* __restrict__ scores, float* __restrict__ lse, int64_t rows, int S) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kNaiveThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float* row = scores + r * S;
  float m = -INFINITY, sum = 0.0f;
  for (int j = lane; j < S; j += 32) m = fmaxf(m, row[j]);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  for (int j = lane; j < S; j += 32) sum += expf(row[j] - m);  // exp(-inf) = 0: the masked keys
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  for (int j = lane; j < S; j += 32) row[j] = expf(row[j] - m) / sum;
  if (lane == 0) lse[r] = m + logf(sum);
}

// out[bh][i][d] = sum_j P[i][j] v[kv][j][d]. Grid (S*Hd / 256, B*nH).
template <typename T, int Hd>
__global__ void naive_pv_kernel(const float* __restrict__ probs, const T* __restrict__ v, T* __restrict__ out, int nH,
                          int group, int S, bool causal) {
  const int64_t bh = blockIdx.y, id = static_cast<int64_t>(blockIdx.x) * kNaiveThreads + threadIdx.x;
  if (id >= static_cast<int64_t>(S) * Hd) return;
  const int i = static_cast<int>(id / Hd), d = static_cast<int>(id % Hd);
  const float* p = probs + (bh * S + i) * S;
  const T* vv = v + naive_kv_head(bh, nH, group) * S * Hd;
  float acc = 0.0f;
  for (int j = 0, end = causal ? i + 1 : S; j < end; ++j) acc += p[j] * to_float(vv[static_cast<int64_t>(j) * Hd + d]);
  out[(bh * S + i) * Hd + d] = from_float<T>(acc);
}

// In P's buffer: dS[i][j] = P[i][j] (dO_i . v_j - D_i). Grid (S*S / 256, B*nH).
template <typename T, int Hd>
__global__ void naive_dscores_kernel(float* __restrict__ p_ds, const T* __restrict__ dout, const T* __restrict__ v,
                               const float* __restrict__ D, int nH, int group, int S, bool causal) {
  const int64_t bh = blockIdx.y, ij = static_cast<int64_t>(blockIdx.x) * kNaiveThreads + threadIdx.x;
  if (ij >= static_cast<int64_t>(S) * S) return;
  const int i = static_cast<int>(ij / S), j = static_cast<int>(ij % S);
  if (causal && j > i) return;  // P = 0 there, and so is dS
  const T* doi = dout + (bh * S + i) * Hd;
  const T* vj = v + (naive_kv_head(bh, nH, group) * S + j) * Hd;
  float dp = 0.0f;
  for (int d = 0; d < Hd; ++d) dp += to_float(doi[d]) * to_float(vj[d]);
  float& cell = p_ds[bh * S * S + ij];
  cell = cell * (dp - D[bh * S + i]);
}

// dq[bh][i][d] = scale sum_j dS[i][j] k[kv][j][d]. Grid (S*Hd / 256, B*nH).
template <typename T, int Hd>
__global__ void naive_dq_kernel(const float* __restrict__ ds, const T* __restrict__ k, T* __restrict__ dq, int nH,
                          int group, int S, float scale, bool causal) {
  const int64_t bh = blockIdx.y, id = static_cast<int64_t>(blockIdx.x) * kNaiveThreads + threadIdx.x;
  if (id >= static_cast<int64_t>(S) * Hd) return;
  const int i = static_cast<int>(id / Hd), d = static_cast<int>(id % Hd);
  const float* row = ds + (bh * S + i) * S;
  const T* kk = k + naive_kv_head(bh, nH, group) * S * Hd;
  float acc = 0.0f;
  for (int j = 0, end = causal ? i + 1 : S; j < end; ++j) acc += row[j] * to_float(kk[static_cast<int64_t>(j) * Hd + d]);
  dq[(bh * S + i) * Hd + d] = from_float<T>(scale * acc);
}

// Per kv head, summed over its group of query heads: with `m` P and `x` dO, dV = P^T dO;
// with `m` dS and `x` Q, dK = scale dS^T Q. Grid (S*Hd / 256, B*nKV): one thread per
// element of dV (dK), each written once (no atomics).
template <typename T, int Hd>
__global__ void naive_transposed_kernel(const float* __restrict__ m, const T* __restrict__ x, T* __restrict__ dst, int nH,
                                  int group, int S, float scale, bool causal) {
  const int64_t b_kv = blockIdx.y, id = static_cast<int64_t>(blockIdx.x) * kNaiveThreads + threadIdx.x;
  if (id >= static_cast<int64_t>(S) * Hd) return;
  const int j = static_cast<int>(id / Hd), d = static_cast<int>(id % Hd);
  const int nKV = nH / group;
  const int64_t b = b_kv / nKV, kv = b_kv % nKV;
  float acc = 0.0f;
  for (int g = 0; g < group; ++g) {
    const int64_t bh = b * nH + kv * group + g;  // the query heads that read kv head `kv`
    const float* col = m + bh * S * S + j;       // column j: m[i][j] at col[i * S]
    const T* xs = x + bh * S * Hd;
    for (int i = causal ? j : 0; i < S; ++i) acc += col[static_cast<int64_t>(i) * S] * to_float(xs[static_cast<int64_t>(i) * Hd + d]);
  }
  dst[(b_kv * S + j) * Hd + d] = from_float<T>(scale * acc);
}

unsigned naive_blocks(int64_t n) { return static_cast<unsigned>((n + kNaiveThreads - 1) / kNaiveThreads); }

void check_naive_size(int64_t S) {
  TORCH_CHECK(S <= 65536, "attention_naive: S ", S, " too long for rung 0 (it holds B x nH x S x S floats; "
              "use --attention flash-wmma, flash-mma or sdpa)");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> attention_naive_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, double scale, bool causal) {
  const int64_t nKV = check_qkv(q, k, v);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  check_naive_size(S);
  const int group = static_cast<int>(nH / nKV);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor out = at::empty(q.sizes(), q.options());                     // [B, nH, S, Hd]
  at::Tensor lse = at::empty({B, nH, S}, q.options().dtype(at::kFloat));  // [B, nH, S]
  if (q.numel() == 0) return {out, lse};
  at::Tensor scores = at::empty({B, nH, S, S}, q.options().dtype(at::kFloat));  // the S x S matrix, in global memory
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    const auto* qp = static_cast<const T*>(q.data_ptr());
    const auto* kp = static_cast<const T*>(k.data_ptr());
    naive_scores_kernel<T, kHd, false><<<dim3(naive_blocks(S * S), unsigned(B * nH)), kNaiveThreads, 0, stream>>>(  // 1. S
        qp, kp, nullptr, scores.data_ptr<float>(), int(nH), group, int(S), float(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t rows = B * nH * S;  // 2. P = softmax(S) in place, and lse
    naive_softmax_kernel<<<static_cast<unsigned>((rows + kNaiveThreads / 32 - 1) / (kNaiveThreads / 32)), kNaiveThreads, 0, stream>>>(
        scores.data_ptr<float>(), lse.data_ptr<float>(), rows, int(S));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    naive_pv_kernel<T, kHd><<<dim3(naive_blocks(S * Hd), unsigned(B * nH)), kNaiveThreads, 0, stream>>>(  // 3. O = P V
        scores.data_ptr<float>(), static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()), int(nH),
        group, int(S), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_naive_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, double scale, bool causal) {
  const int64_t nKV = check_backward(dout, q, k, v, out, lse);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  check_naive_size(S);
  const int group = static_cast<int>(nH / nKV);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  BackwardBuffers b = backward_buffers(q, k, v, /*fp32_dq=*/false);  // dQ is written once per element here
  if (q.numel() == 0) return {b.dq, b.dk, b.dv};
  at::Tensor p_ds = at::empty({B, nH, S, S}, q.options().dtype(at::kFloat));  // P, then dS in its place
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    const auto* qp = static_cast<const T*>(q.data_ptr());
    const auto* kp = static_cast<const T*>(k.data_ptr());
    const auto* vp = static_cast<const T*>(v.data_ptr());
    const auto* dop = static_cast<const T*>(dout.data_ptr());
    const dim3 per_score(naive_blocks(S * S), unsigned(B * nH)), per_q(naive_blocks(S * Hd), unsigned(B * nH)),
        per_kv(naive_blocks(S * Hd), unsigned(B * nKV));
    launch_rowsum_dot<T, kHd>(dout, out, b.D, stream);  // 1. D_i = rowsum(dO_i * O_i)
    naive_scores_kernel<T, kHd, true><<<per_score, kNaiveThreads, 0, stream>>>(  // 2. P from Q, K and lse
        qp, kp, lse.data_ptr<float>(), p_ds.data_ptr<float>(), int(nH), group, int(S), float(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    naive_transposed_kernel<T, kHd><<<per_kv, kNaiveThreads, 0, stream>>>(  // 3. dV = P^T dO
        p_ds.data_ptr<float>(), dop, static_cast<T*>(b.dv.data_ptr()), int(nH), group, int(S), 1.0f, causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    naive_dscores_kernel<T, kHd><<<per_score, kNaiveThreads, 0, stream>>>(  // 4. dS = P (dO V^T - D), in P's place
        p_ds.data_ptr<float>(), dop, vp, b.D.data_ptr<float>(), int(nH), group, int(S), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    naive_dq_kernel<T, kHd><<<per_q, kNaiveThreads, 0, stream>>>(  // 5. dQ = scale dS K
        p_ds.data_ptr<float>(), kp, static_cast<T*>(b.dq.data_ptr()), int(nH), group, int(S), float(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    naive_transposed_kernel<T, kHd><<<per_kv, kNaiveThreads, 0, stream>>>(  // 6. dK = scale dS^T Q
        p_ds.data_ptr<float>(), qp, static_cast<T*>(b.dk.data_ptr()), int(nH), group, int(S), float(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {b.dq, b.dk, b.dv};
}

}  // namespace picotron::kernels::cuda
