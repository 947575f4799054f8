// kernels/attention_wmma.cu — rung 1 of the attention ladder (kernels/README.md):
// FlashAttention-2's forward on tensor cores through WMMA, S_ij, P_ij and O_i staged in
// shared memory. The backward is in kernels/attention_wmma_backward.cu; this header
// describes both.
//
// Paper: Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", arXiv 2307.08691. Forward = Algorithm 1, backward = Algorithm 2.
//   O = softmax(scale * Q K^T + mask) V, per head, never holding the S x S scores.
//
// Tiling. Q is cut into row tiles Q_i (Br = 64 queries), K and V into tiles K_j, V_j
// (Bc = 64 keys). A block has 4 warps; warp w owns rows 16w..16w+15 of a 64-row tile.
//
//                  K/V tile j:   0     1     2     3        causal: the tiles '.' above the
//     Q tile i = 0           [ S_00   .     .     .  ]      diagonal are skipped, the diagonal
//     Q tile i = 1           [ S_10  S_11   .     .  ]      ones masked element by element
//     Q tile i = 2           [ S_20  S_21  S_22   .  ]      (key j > query i excluded)
//     Q tile i = 3           [ S_30  S_31  S_32  S_33]
//   forward:  block (i, b*nH + h)   walks its row i left to right (online softmax)
//   backward: block (j, b*nKV + kv) walks its column j top to bottom, for every query
//             head of the GQA group, keeping dK_j, dV_j in registers; dQ_i by atomics.
//
// Memory traffic (S = 2048, Hd = 128, 16-bit, one head): plain attention writes the
// scores S = QK^T, reads them, writes P = softmax(S), reads it: 4 x 2048^2 x 2 B = 32 MiB
// of HBM traffic, and an 8 MiB S x S buffer per head (256 MiB for 32 heads), kept for the
// backward. Here a block reads O(S * Hd) per tile row: Q_i once (64 x 128 x 2 B = 16 KiB),
// K_j and V_j tile by tile (up to 2 x 512 KiB, half on average under causal, mostly L2
// hits), and writes O_i once; per head, Q, K, V, O cross HBM once: 4 x 512 KiB = 2 MiB,
// plus lse (2048 x 4 B = 8 KiB), the only thing the backward keeps besides O.
// FLOPs: forward 4 * S^2 * Hd * nH * B / 2 (causal), backward 2.5x that (it recomputes
// S_ij): S = 2048, Hd = 128 gives 1.07 GFLOP forward, 2.7 GFLOP backward per (b, h).
//
// Tensor cores through WMMA (<mma.h>, 16x16x16 fragments, fp32 accumulators): clear, not
// fast. A Hopper-speed version (FlashAttention-3) uses wgmma on warpgroups, TMA bulk
// copies of K_j/V_j into a 2-3 stage ring with mbarriers, warp specialisation (producer
// warps load while consumer warps compute) and the softmax held in registers.
//
// reference: kernels/reference.cpp, reference::flash_attention_forward /
//            reference::flash_attention_backward, same signatures (kernels/ops.h)
// test:      build/tests/unit_tests "[kernels]"      bench: build/bench/bench_kernels
// alone:     build/kernels/attention_rung 1   (this rung against the reference, timed; a GPU)
//
// This file: the forward (Algorithm 1) and its launcher. The backward:
// kernels/attention_wmma_backward.cu; what both use: kernels/attention_wmma.cuh; the checks
// every rung's launcher shares: kernels/attention_launch.cuh.
#include "kernels/attention_wmma.cuh"

namespace picotron::kernels::cuda {
namespace {

// ---- forward: Algorithm 1 ------------------------------------------------------------
// Shared memory (byte offsets). Br = Bc = 64, Hd = 128: Q_i, K_j, V_j 17 KiB each
// (64 x 136 x 2 B), S_ij fp32 17 KiB (64 x 68 x 4), O_i fp32 33 KiB (64 x 132 x 4),
// P_ij 9 KiB (64 x 72 x 2): 110 KiB. Hd = 64: 70 KiB. (All offsets multiples of 128 B,
// so every 16x16 fragment pointer is 32-byte aligned as load_matrix_sync requires.)
template <int Hd> struct FwdSmem {
  static constexpr int ldh = Hd + kPadH, lds = kBc + kPadF, ldo = Hd + kPadF, ldp = kBc + kPadH;
  static constexpr int q = 0, k = q + kBr * ldh * 2, v = k + kBc * ldh * 2, s = v + kBc * ldh * 2,
                       o = s + kBr * lds * 4, p = o + kBr * ldo * 4, inv_l = p + kBr * ldp * 2,
                       bytes = inv_l + kBr * 4;
  static_assert(bytes <= 227 * 1024, "over the 227 KiB a block may have on sm_90");
};

template <typename T, int Hd>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                         T* __restrict__ out, float* __restrict__ lse, int nH, int group, int S, float scale,
                         bool causal) {
  using L = FwdSmem<Hd>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_i = reinterpret_cast<T*>(smem + L::q);          // [Br][Hd + 8]
  T* K_j = reinterpret_cast<T*>(smem + L::k);          // [Bc][Hd + 8]
  T* V_j = reinterpret_cast<T*>(smem + L::v);          // [Bc][Hd + 8]
  float* S_ij = reinterpret_cast<float*>(smem + L::s); // [Br][Bc + 4]
  float* O_i = reinterpret_cast<float*>(smem + L::o);  // [Br][Hd + 4]  unnormalised output
  T* P_ij = reinterpret_cast<T*>(smem + L::p);         // [Br][Bc + 8]
  float* inv_l = reinterpret_cast<float*>(smem + L::inv_l);  // [Br]

  const int i = blockIdx.x, bh = blockIdx.y;           // query tile, b * nH + h
  const int b = bh / nH, h = bh % nH, kvh = h / group; // GQA: query head h reads kv head h / group
  const int q0 = i * kBr;
  const int64_t q_off = static_cast<int64_t>(bh) * S * Hd;
  const int64_t kv_off = (static_cast<int64_t>(b) * (nH / group) + kvh) * S * Hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Softmax layout: two lanes per row; lane pair (row, half) takes columns half, half + 2, ...
  const int row = warp * 16 + lane / 2, half = lane % 2, qi = q0 + row;

  load_tile<T, Hd>(Q_i, q + q_off, q0, S);             // Q_i: once, from HBM to shared
  for (int c = half; c < Hd; c += 2) O_i[row * L::ldo + c] = 0.0f;  // O_i = 0
  float m_i = -INFINITY, l_i = 0.0f;                   // running row max and row sum (fp32)

  const int Tc = (S + kBc - 1) / kBc;
  const int j_end = causal ? min(Tc, (min(q0 + kBr, S) - 1) / kBc + 1) : Tc;  // stop at the diagonal
  for (int j = 0; j < j_end; ++j) {
    const int k0 = j * kBc;
    __syncthreads();                                   // every warp is done reading the last V_j
    load_tile<T, Hd>(K_j, k + kv_off, k0, S);
    load_tile<T, Hd>(V_j, v + kv_off, k0, S);
    __syncthreads();
    // S_ij = scale * Q_i K_j^T   (this warp's 16 rows x Bc; K_j read as K_j^T: col-major)
    warp_gemm<T, Col, Hd, kBc>(S_ij + warp * 16 * L::lds, L::lds, Q_i + warp * 16 * L::ldh, L::ldh, K_j,
                                    L::ldh, scale);
    __syncwarp();
    // m_new = max(m_i, rowmax(S_ij)) with masked entries at -inf
    float s[kBc / 2];
    float row_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kBc / 2; ++t) {
      const int c = half + 2 * t, kj = k0 + c;
      const bool valid = qi < S && kj < S && (!causal || kj <= qi);
      s[t] = valid ? S_ij[row * L::lds + c] : -INFINITY;
      row_max = fmaxf(row_max, s[t]);
    }
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
    const float m_new = fmaxf(m_i, row_max);
    // A row with no valid key yet has m_new = -inf: subtract 0 instead, so exp(-inf - -inf)
    // never makes a NaN; its P and alpha come out 0.
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    // P_ij = exp(S_ij - m_new) (stored in the input dtype for the MMA), l_i rescaled
    float row_sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kBc / 2; ++t) {
      const float p = __expf(s[t] - m_use);
      row_sum += p;
      P_ij[row * L::ldp + half + 2 * t] = from_float<T>(p);
    }
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    const float alpha = __expf(m_i - m_use);           // exp(m_old - m_new), 0 on the first tile
    l_i = alpha * l_i + row_sum;
    m_i = m_new;
    for (int c = half; c < Hd; c += 2) O_i[row * L::ldo + c] *= alpha;  // O_i = diag(alpha) O_i
    __syncwarp();
    // O_i += P_ij V_j   (16 rows x Hd per warp, accumulators loaded from and stored to shared)
    for (int n = 0; n < Hd; n += 16) {
      Acc acc;
      float* o = O_i + warp * 16 * L::ldo + n;
      wmma::load_matrix_sync(acc, o, L::ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBc; kk += 16) {
        FragA<T, Row> fp;
        FragB<T, Row> fv;
        wmma::load_matrix_sync(fp, P_ij + warp * 16 * L::ldp + kk, L::ldp);
        wmma::load_matrix_sync(fv, V_j + kk * L::ldh + n, L::ldh);
        wmma::mma_sync(acc, fp, fv, acc);
      }
      wmma::store_matrix_sync(o, acc, L::ldo, wmma::mem_row_major);
    }
  }
  // O_i = diag(l_i)^-1 O_i, lse_i = m_i + log(l_i); a row with no valid key: O = 0, lse = -inf
  __syncwarp();
  if (half == 0) inv_l[row] = l_i > 0.0f ? 1.0f / l_i : 0.0f;
  if (half == 0 && qi < S) lse[static_cast<int64_t>(bh) * S + qi] = l_i > 0.0f ? m_i + logf(l_i) : -INFINITY;
  __syncwarp();
  for (int idx = lane; idx < 16 * Hd; idx += 32) {     // this warp's 16 rows, coalesced
    const int r = warp * 16 + idx / Hd, c = idx % Hd;
    if (q0 + r < S) out[q_off + static_cast<int64_t>(q0 + r) * Hd + c] = from_float<T>(O_i[r * L::ldo + c] * inv_l[r]);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v, double scale, bool causal) {
  const int64_t nKV = check_qkv(q, k, v);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty(q.sizes(), q.options());                      // [B, nH, S, Hd]
  at::Tensor lse = at::empty({B, nH, S}, q.options().dtype(at::kFloat));   // [B, nH, S]
  if (q.numel() == 0) return {out, lse};
  const dim3 grid(static_cast<unsigned>((S + kBr - 1) / kBr), static_cast<unsigned>(B * nH));  // (i, b * nH + h)
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    constexpr int bytes = FwdSmem<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    flash_forward_kernel<T, kHd><<<grid, kThreads, bytes, c10::cuda::getCurrentCUDAStream()>>>(
        static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
        static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()), lse.data_ptr<float>(),
        static_cast<int>(nH), static_cast<int>(nH / nKV), static_cast<int>(S), static_cast<float>(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, lse};
}

}  // namespace picotron::kernels::cuda
