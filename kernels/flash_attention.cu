// kernels/flash_attention.cu — FlashAttention-2, forward and backward, on tensor cores.
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
#include "kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

namespace picotron::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBr = 64, kBc = 64;       // query rows, key columns per tile
constexpr int kWarps = 4, kThreads = kWarps * 32;
static_assert(kBr == 16 * kWarps, "one warp per 16 rows of a tile");
// Shared rows are padded: 8 x 16-bit (16 B) so the 8 rows a tensor-core load reads start
// in different banks; 4 floats for fp32 rows (the least WMMA allows: ld % 4 == 0).
constexpr int kPadH = 8, kPadF = 4;

template <typename T, typename Layout> using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, Layout>;
template <typename T, typename Layout> using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using Row = wmma::row_major;
using Col = wmma::col_major;

__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ inline T from_float(float x);
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ inline __half from_float<__half>(float x) { return __float2half(x); }

static_assert(kBr == kBc, "load_tile loads 64-row tiles of Q, K, V, dO alike");
// Rows [row0, row0 + 64) of a [S, Hd] matrix -> shared tile [64][Hd + 8], 16 B per load;
// rows >= S are zero-filled, so no garbage (or NaN: 0 * NaN = NaN) enters an MMA.
template <typename T, int Hd>
__device__ void load_tile(T* tile, const T* g, int row0, int S) {
  constexpr int kChunks = Hd / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < 64 * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row0 + r < S) val = *reinterpret_cast<const uint4*>(g + static_cast<int64_t>(row0 + r) * Hd + c);
    *reinterpret_cast<uint4*>(tile + r * (Hd + kPadH) + c) = val;
  }
}

// One warp: out[16][N] (fp32, row stride ldo) = alpha * a[16][K] b[K][N], 16x16x16 steps.
// a: row-major (row stride lda). b: K x N; LayoutB says how it sits in memory:
//   Row: b(k, n) at b + k*ldb + n        Col: b(k, n) at b + n*ldb + k  (b = X^T of a row-major X)
template <typename T, typename LayoutB, int K, int N>
__device__ void warp_gemm(float* out, int ldo, const T* a, int lda, const T* b, int ldb, float alpha) {
  for (int n = 0; n < N; n += 16) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      FragA<T, Row> fa;
      FragB<T, LayoutB> fb;
      wmma::load_matrix_sync(fa, a + k, lda);
      wmma::load_matrix_sync(fb, std::is_same<LayoutB, Row>::value ? b + k * ldb + n : b + n * ldb + k, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    for (int t = 0; t < acc.num_elements; ++t) acc.x[t] *= alpha;
    wmma::store_matrix_sync(out + n, acc, ldo, wmma::mem_row_major);
  }
}

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

// ---- backward: Algorithm 2 -----------------------------------------------------------
// D_i = rowsum(dO_i * O_i) in fp32: one warp per row of [B * nH * S].
template <typename T, int Hd>
__global__ void flash_backward_dot_kernel(const T* __restrict__ dout, const T* __restrict__ out,
                                          float* __restrict__ D, int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float sum = 0.0f;
  for (int c = lane; c < Hd; c += 32) sum += to_float(dout[r * Hd + c]) * to_float(out[r * Hd + c]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) D[r] = sum;
}

// Main kernel. P_ij is recomputed from S_ij and the forward's lse_i instead of being
// stored: storing it would be the S x S matrix the forward avoided; recomputing costs
// one more Q_i K_j^T (hence ~2.5x the forward's FLOPs instead of 2x).
// Shared memory. Hd = 128: K_j, V_j, Q_i, dO_i 17 KiB each, S_ij and dP_ij fp32 17 KiB
// each, P_ij and dS_ij 9 KiB each, lse_i and D_i 256 B each: 120.5 KiB. Hd = 64: 88.5 KiB.
// The dQ_i scratch (fp32 [Br][Hd + 4], 33 KiB at Hd = 128) and, at the end, the dK_j / dV_j
// staging reuse the S_ij + dP_ij bytes once those are dead.
template <int Hd> struct BwdSmem {
  static constexpr int ldh = Hd + kPadH, lds = kBc + kPadF, ldp = kBc + kPadH, ldq = Hd + kPadF;
  static constexpr int k = 0, v = k + kBc * ldh * 2, q = v + kBc * ldh * 2, dout = q + kBr * ldh * 2,
                       s = dout + kBr * ldh * 2, dp = s + kBr * lds * 4, p = dp + kBr * lds * 4,
                       ds = p + kBr * ldp * 2, lse = ds + kBr * ldp * 2, d = lse + kBr * 4, bytes = d + kBr * 4;
  static_assert(kBr * ldq * 4 <= p - s && kBc * ldq * 4 <= p - s, "dQ scratch must fit in S_ij + dP_ij");
  static_assert(bytes <= 227 * 1024, "over the 227 KiB a block may have on sm_90");
};

// One warp: its 16 rows of fp32 fragments -> stage (shared, row stride ld) -> dst rows
// row0.. (in T, rows >= S skipped).
template <typename T, int Hd>
__device__ void write_rows(const Acc (&frag)[Hd / 16], float* stage, int ld, T* dst, int row0, int S) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < Hd / 16; ++n) wmma::store_matrix_sync(stage + n * 16, frag[n], ld, wmma::mem_row_major);
  __syncwarp();
  for (int idx = lane; idx < 16 * Hd; idx += 32) {
    const int r = idx / Hd, c = idx % Hd;
    if (row0 + r < S) dst[static_cast<int64_t>(row0 + r) * Hd + c] = from_float<T>(stage[r * ld + c]);
  }
  __syncwarp();                                          // stage read before it is written again
}

template <typename T, int Hd>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ D,
                          float* __restrict__ dq_accum, T* __restrict__ dk, T* __restrict__ dv, int nH, int group,
                          int S, float scale, bool causal) {
  using L = BwdSmem<Hd>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* K_j = reinterpret_cast<T*>(smem + L::k);            // [Bc][Hd + 8]
  T* V_j = reinterpret_cast<T*>(smem + L::v);            // [Bc][Hd + 8]
  T* Q_i = reinterpret_cast<T*>(smem + L::q);            // [Br][Hd + 8]
  T* dO_i = reinterpret_cast<T*>(smem + L::dout);        // [Br][Hd + 8]
  float* S_ij = reinterpret_cast<float*>(smem + L::s);   // [Br][Bc + 4]
  float* dP_ij = reinterpret_cast<float*>(smem + L::dp); // [Br][Bc + 4]
  float* scratch = S_ij;                                 // [64][Hd + 4]  over S_ij and dP_ij
  T* P_ij = reinterpret_cast<T*>(smem + L::p);           // [Br][Bc + 8]
  T* dS_ij = reinterpret_cast<T*>(smem + L::ds);         // [Br][Bc + 8]
  float* lse_i = reinterpret_cast<float*>(smem + L::lse);// [Br]
  float* D_i = reinterpret_cast<float*>(smem + L::d);    // [Br]

  const int j = blockIdx.x, bkv = blockIdx.y;            // key tile, b * nKV + kv head
  const int nKV = nH / group, b = bkv / nKV, kvh = bkv % nKV;
  const int k0 = j * kBc;
  const int64_t kv_off = static_cast<int64_t>(bkv) * S * Hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 2, half = lane % 2;  // two lanes per row, as in the forward

  load_tile<T, Hd>(K_j, k + kv_off, k0, S);              // K_j, V_j: once, for the whole group
  load_tile<T, Hd>(V_j, v + kv_off, k0, S);
  // dK_j, dV_j: this warp's 16 key rows x Hd, fp32 fragments held in registers throughout
  Acc dK_j[Hd / 16], dV_j[Hd / 16];
#pragma unroll
  for (int n = 0; n < Hd / 16; ++n) {
    wmma::fill_fragment(dK_j[n], 0.0f);
    wmma::fill_fragment(dV_j[n], 0.0f);
  }

  const int Tr = (S + kBr - 1) / kBr;
  const int i_start = causal ? k0 / kBr : 0;             // causal: query tiles from the diagonal on
  for (int g = 0; g < group; ++g) {                      // the query heads that read this kv head
    const int64_t bh = static_cast<int64_t>(b) * nH + kvh * group + g;
    for (int i = i_start; i < Tr; ++i) {
      const int q0 = i * kBr, qi = q0 + row;
      __syncthreads();                                   // the last tile's Q_i, dO_i, P, dS, scratch are free
      load_tile<T, Hd>(Q_i, q + bh * S * Hd, q0, S);
      load_tile<T, Hd>(dO_i, dout + bh * S * Hd, q0, S);
      for (int r = threadIdx.x; r < kBr; r += kThreads) {
        lse_i[r] = q0 + r < S ? lse[bh * S + q0 + r] : 0.0f;
        D_i[r] = q0 + r < S ? D[bh * S + q0 + r] : 0.0f;
      }
      __syncthreads();
      // S_ij = scale * Q_i K_j^T and dP_ij = dO_i V_j^T   (this warp's 16 query rows)
      warp_gemm<T, Col, Hd, kBc>(S_ij + warp * 16 * L::lds, L::lds, Q_i + warp * 16 * L::ldh, L::ldh, K_j,
                                      L::ldh, scale);
      warp_gemm<T, Col, Hd, kBc>(dP_ij + warp * 16 * L::lds, L::lds, dO_i + warp * 16 * L::ldh, L::ldh, V_j,
                                      L::ldh, 1.0f);
      __syncwarp();
      // P_ij = exp(S_ij - lse_i) (recomputed, masked to 0); dS_ij = P_ij * (dP_ij - D_i)
      const float lse_r = lse_i[row], D_r = D_i[row];
#pragma unroll 8
      for (int t = 0; t < kBc / 2; ++t) {
        const int c = half + 2 * t, kj = k0 + c;
        const bool valid = qi < S && kj < S && (!causal || kj <= qi) && lse_r != -INFINITY;
        const float p = valid ? __expf(S_ij[row * L::lds + c] - lse_r) : 0.0f;
        P_ij[row * L::ldp + c] = from_float<T>(p);
        dS_ij[row * L::ldp + c] = from_float<T>(p * (dP_ij[row * L::lds + c] - D_r));
      }
      __syncthreads();                                   // dV_j, dK_j read every row of P_ij, dS_ij
      // dV_j += P_ij^T dO_i and dK_j += dS_ij^T Q_i   (this warp's 16 key rows; P^T: col-major)
      // (kk not unrolled: room beside dK_j, dV_j's Hd fp32 registers per thread, no spill)
#pragma unroll 1
      for (int kk = 0; kk < kBr; kk += 16) {
        FragA<T, Col> fp, fds;
        wmma::load_matrix_sync(fp, P_ij + kk * L::ldp + warp * 16, L::ldp);
        wmma::load_matrix_sync(fds, dS_ij + kk * L::ldp + warp * 16, L::ldp);
#pragma unroll
        for (int n = 0; n < Hd / 16; ++n) {
          FragB<T, Row> fb;
          wmma::load_matrix_sync(fb, dO_i + kk * L::ldh + n * 16, L::ldh);
          wmma::mma_sync(dV_j[n], fp, fb, dV_j[n]);
          wmma::load_matrix_sync(fb, Q_i + kk * L::ldh + n * 16, L::ldh);
          wmma::mma_sync(dK_j[n], fds, fb, dK_j[n]);
        }
      }
      // dQ_i += scale * dS_ij K_j: this warp's 16 query rows into the scratch (S_ij, dP_ij
      // are dead after the barrier above), then fp32 atomicAdd into dq_accum, since every
      // key tile's block adds to the same dQ_i (FA2 does the same). Order: not deterministic.
      warp_gemm<T, Row, kBc, Hd>(scratch + warp * 16 * L::ldq, L::ldq, dS_ij + warp * 16 * L::ldp, L::ldp,
                                      K_j, L::ldh, scale);
      __syncwarp();
      for (int idx = lane; idx < 16 * Hd; idx += 32) {
        const int r = warp * 16 + idx / Hd, c = idx % Hd;
        if (q0 + r < S) atomicAdd(&dq_accum[(bh * S + q0 + r) * Hd + c], scratch[r * L::ldq + c]);
      }
    }
  }
  // dK_j = scale * sum dS^T Q (the scale folded in here) and dV_j, each row written once
  // by this block: the GQA sum over the group needs no atomics.
  __syncthreads();                                       // other warps may still read their scratch
#pragma unroll
  for (int n = 0; n < Hd / 16; ++n)
    for (int t = 0; t < dK_j[n].num_elements; ++t) dK_j[n].x[t] *= scale;
  float* stage = scratch + warp * 16 * L::ldq;           // this warp's 16 key rows, fp32
  write_rows<T, Hd>(dV_j, stage, L::ldq, dv + kv_off, k0 + warp * 16, S);
  write_rows<T, Hd>(dK_j, stage, L::ldq, dk + kv_off, k0 + warp * 16, S);
}

// dQ: the fp32 accumulator -> q's dtype.
template <typename T>
__global__ void convert_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] = from_float<T>(src[idx]);
}

// ---- launchers -----------------------------------------------------------------------
// Calls fn(T{}, std::integral_constant<int, Hd>{}) for the tensor's dtype and head dim.
template <typename Fn> void dispatch(at::ScalarType dtype, int64_t Hd, Fn&& fn) {
  using H64 = std::integral_constant<int, 64>;
  using H128 = std::integral_constant<int, 128>;
  const bool bf16 = dtype == at::kBFloat16;
  if (bf16 && Hd == 64) fn(__nv_bfloat16{}, H64{});
  else if (bf16) fn(__nv_bfloat16{}, H128{});
  else if (Hd == 64) fn(__half{}, H64{});
  else fn(__half{}, H128{});
}

void check_input(const at::Tensor& t, const char* name, const at::Tensor& q) {
  TORCH_CHECK(t.is_cuda(), "flash_attention: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == q.device(), "flash_attention: ", name, " is on ", t.device(), ", q on ", q.device());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), "flash_attention: ", name, " has dtype ", t.scalar_type(),
              ", q has ", q.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "flash_attention: ", name, " must be contiguous");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "flash_attention: ", name,
              " must be 16-byte aligned (16-byte loads)");
  TORCH_CHECK(t.dim() == 4, "flash_attention: ", name, " must be 4-d [B, heads, S, Hd], got ", t.sizes());
}

// q [B, nH, S, Hd], k, v [B, nKV, S, Hd]; returns nKV.
int64_t check_qkv(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "flash_attention: q must be bf16 or fp16, got ", q.scalar_type());
  check_input(q, "q", q);
  check_input(k, "k", q);
  check_input(v, "v", q);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3), nKV = k.size(1);
  TORCH_CHECK(Hd == 64 || Hd == 128, "flash_attention: head dim Hd must be 64 or 128, got ", Hd);
  TORCH_CHECK(k.size(0) == B && k.size(2) == S && k.size(3) == Hd, "flash_attention: k ", k.sizes(),
              " does not match q ", q.sizes(), " in B, S, Hd");
  TORCH_CHECK(v.sizes() == k.sizes(), "flash_attention: v ", v.sizes(), " must have k's shape ", k.sizes());
  TORCH_CHECK(nKV > 0 && nH % nKV == 0, "flash_attention: nH ", nH, " is not a multiple of nKV ", nKV);
  TORCH_CHECK(S < (int64_t{1} << 30), "flash_attention: S ", S, " too long");
  TORCH_CHECK(B * nH <= 65535, "flash_attention: B * nH = ", B * nH, " exceeds the grid's y limit 65535");
  return nKV;
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        double scale, bool causal) {
  const int64_t nKV = check_qkv(q, k, v);
  check_input(dout, "dout", q);
  check_input(out, "out", q);
  TORCH_CHECK(dout.sizes() == q.sizes(), "flash_attention: dout ", dout.sizes(), " must have q's shape ", q.sizes());
  TORCH_CHECK(out.sizes() == q.sizes(), "flash_attention: out ", out.sizes(), " must have q's shape ", q.sizes());
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  TORCH_CHECK(lse.is_cuda() && lse.device() == q.device(), "flash_attention: lse must be on ", q.device(),
              ", got ", lse.device());
  TORCH_CHECK(lse.scalar_type() == at::kFloat, "flash_attention: lse must be fp32, got ", lse.scalar_type());
  TORCH_CHECK(lse.is_contiguous() && lse.dim() == 3 && lse.size(0) == B && lse.size(1) == nH && lse.size(2) == S,
              "flash_attention: lse must be contiguous [B, nH, S] = [", B, ", ", nH, ", ", S, "], got ",
              lse.sizes());
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor dq = at::empty(q.sizes(), q.options());                       // [B, nH, S, Hd]
  at::Tensor dk = at::empty(k.sizes(), k.options());                       // [B, nKV, S, Hd]
  at::Tensor dv = at::empty(v.sizes(), v.options());                       // [B, nKV, S, Hd]
  if (q.numel() == 0) return {dq, dk, dv};
  at::Tensor D = at::empty({B, nH, S}, q.options().dtype(at::kFloat));     // [B, nH, S]
  at::Tensor dq_accum = at::zeros(q.sizes(), q.options().dtype(at::kFloat));  // [B, nH, S, Hd] fp32
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    // 1. D_i = rowsum(dO_i * O_i), 8 rows (warps) per block
    const int64_t rows = B * nH * S;
    flash_backward_dot_kernel<T, kHd><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const T*>(dout.data_ptr()), static_cast<const T*>(out.data_ptr()), D.data_ptr<float>(), rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // 2. dK_j, dV_j per block (key tile j, b * nKV + kv head); dQ by atomics
    constexpr int bytes = BwdSmem<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_backward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid(static_cast<unsigned>((S + kBc - 1) / kBc), static_cast<unsigned>(B * nKV));  // (j, b * nKV + kv)
    flash_backward_kernel<T, kHd><<<grid, kThreads, bytes, stream>>>(
        static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
        static_cast<const T*>(v.data_ptr()), static_cast<const T*>(dout.data_ptr()), lse.data_ptr<float>(),
        D.data_ptr<float>(), dq_accum.data_ptr<float>(), static_cast<T*>(dk.data_ptr()),
        static_cast<T*>(dv.data_ptr()), static_cast<int>(nH), static_cast<int>(nH / nKV), static_cast<int>(S),
        static_cast<float>(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // 3. dQ: fp32 accumulator -> q's dtype
    const int64_t n = dq.numel();
    const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536));
    convert_kernel<T><<<blocks, 256, 0, stream>>>(dq_accum.data_ptr<float>(), static_cast<T*>(dq.data_ptr()), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dq, dk, dv};
}

}  // namespace picotron::kernels::cuda
