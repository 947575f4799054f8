// kernels/flash_attention_mma.cu — FlashAttention-2 as the paper builds it: scores,
// softmax state and output in registers, tiles copied asynchronously. The second rung of
// the ladder (kernels/README.md); the first, kernels/flash_attention.cu, computes the same
// thing with WMMA and stages S, P and O in shared memory.
//
// Paper: Dao, "FlashAttention-2", arXiv 2307.08691: Algorithm 1 (forward), Algorithm 2
// (backward), Section 3.3 (work split between warps: each warp owns rows of Q_i, so the
// softmax needs no communication between warps).
//
//   forward, block (i, b * nH + h), 4 warps:        K_j, V_j (Bc = 64 keys), double-buffered
//                                                     j=0      j=1      j=2  ...
//     Q_i (Br = 64) -> warp 0: rows  0-15  ->   S = Q K_j^T (16 x 64, 8 C fragments, registers)
//                      warp 1: rows 16-31       m, l: online softmax, rows g and g + 8 of
//                      warp 2: rows 32-47       each lane (2 shuffles per row reduction)
//                      warp 3: rows 48-63       O += P V_j (16 x Hd, Hd / 8 C fragments)
//                                               P: S's registers repacked as A fragments
//   backward, block (j, b * nKV + kv): warp w owns keys 16w..16w+15 of K_j, V_j; for every
//   query head of the GQA group and query tile i (Br = 64, 32 at Hd 128): S^T = K_j Q_i^T,
//   dP^T = V_j dO_i^T, P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D) in registers;
//   dV_j += P^T dO_i and dK_j += dS^T Q_i with P^T, dS^T repacked as A fragments; dS_i
//   through shared memory to dQ_i += scale dS_i K_j (fp32 atomics, as FA2).
//
// What changed from the WMMA rung, and why it is faster (per warp and key tile, Hd 128):
//   - S_ij, P_ij and O_i never touch shared memory. The WMMA rung writes S in fp32 and
//     reads it for the softmax, writes P and re-reads it for every 16 output columns,
//     rescales O in shared memory and loads + stores it around every P V_j step, and
//     re-reads Q_i's fragments: ~74 KiB of shared traffic beside the 32 KiB of K_j, V_j
//     operands both rungs read. Here a C fragment's layout is known (flash_mma.cuh): the
//     softmax works on it in place (a row reduction: 2 shuffles within a quad), and P's
//     A fragments are S's registers repacked. Only K_j, V_j come from shared memory.
//   - Q_i's A fragments are loaded once into registers, for the whole row of tiles.
//   - cp.async copies K_j+1, V_j+1 into the second buffer while the tensor cores work on
//     K_j, V_j (the WMMA rung loads, then waits at a barrier), and holds no registers.
//   - The shared layout is XOR-swizzled: ldmatrix without bank conflicts, no padding.
// Shared memory: forward 80 KiB at Hd 128 (Q_i + 2 K_j + 2 V_j), 40 KiB at Hd 64;
// backward 68 / 56 KiB (K_j, V_j, 2 Q_i, 2 dO_i, dS_i). Registers (ptxas, CUDA 13.0,
// sm_90, no spills): forward 228 at Hd 128, 133 at Hd 64; backward 255 / 245. So at Hd 128
// two blocks (8 warps) per SM, both for registers and shared memory.
// The next knob: 32 query rows per warp (Br = 128, 4 warps), so that each K/V fragment
// feeds two mma. At 16 rows a warp reads 32 KiB of shared memory per 0.5 MFLOP per key
// tile; at 128 B/clock per SM that is ~1.4x the time mma.sync needs for the FLOPs (an
// estimate): shared bandwidth, not the tensor cores, likely bounds this rung. Beyond it:
// wgmma reading K/V from shared memory directly, TMA, warp specialisation (FA3).
//
// FLOPs: forward 4 B nH S^2 Hd (halved when causal), backward 2.5x that (S recomputed).
// reference: reference::flash_attention_forward / _backward (kernels/reference.cpp), the
//            same signatures (kernels/ops.h); the fragment arithmetic: kernels/flash_mma.cuh
// test:      build/tests/unit_tests "[kernels]"   (tests/test_flash_mma.cpp: the warps of
//            both kernels emulated lane by lane on the CPU, and on a GPU the kernels)
// bench:     build/bench/bench_kernels   (one row per rung, against SDPA)
#include "kernels/flash_common.cuh"
#include "kernels/flash_mma.cuh"

namespace picotron::kernels::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Rows [row0, row0 + Rows) of a [S, Hd] matrix -> swizzled shared tile [Rows][Hd], one
// 16-byte cp.async per chunk; rows >= S zero-filled (no garbage, or NaN, enters an mma).
// Asynchronous: the caller commits the group and waits for it.
template <typename T, int Hd, int Rows>
__device__ void load_tile_async(T* tile, const T* g, int row0, int S) {
  constexpr int kChunks = Hd / 8, kPerThread = Rows * kChunks / mma::kThreads;
  static_assert(Rows * kChunks % mma::kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int n = 0; n < kPerThread; ++n) {
    const int idx = n * mma::kThreads + threadIdx.x, r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool valid = row0 + r < S;
    mma::cp_async_16(tile + mma::swizzle(r, c, Hd), g + static_cast<int64_t>(valid ? row0 + r : 0) * Hd + c, valid);
  }
}

// One warp's 16 rows of C fragments, row half r (rows g, g + 8) times mul[r], -> rows
// row0.. of dst [S][Hd] in T (rows >= S skipped). Staged in the warp's own 16 rows of a
// swizzled shared tile (rows no other warp reads) so that global stores are 16-byte chunks.
template <typename T, int Hd>
__device__ void store_rows(const float (&acc)[Hd / 8][4], const float (&mul)[2], T* stage, T* dst, int row0,
                           int S) {
  const int lane = threadIdx.x % 32;
  __syncwarp();                                            // the warp's reads of these rows are done
#pragma unroll
  for (int nt = 0; nt < Hd / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const mma::RowCol rc = mma::frag_c(lane, 2 * r);     // c_2r, c_2r+1: row g + 8r, cols 2t, 2t + 1
      *reinterpret_cast<uint32_t*>(stage + mma::swizzle(rc.row, 8 * nt + rc.col, Hd)) =
          mma::pack2<T>(acc[nt][2 * r] * mul[r], acc[nt][2 * r + 1] * mul[r]);
    }
  __syncwarp();
  constexpr int kChunks = Hd / 8;
  for (int idx = lane; idx < 16 * kChunks; idx += 32) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    if (row0 + r < S)
      *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(row0 + r) * Hd + c) =
          *reinterpret_cast<const uint4*>(stage + mma::swizzle(r, c, Hd));
  }
}

// The A fragment of k-slice kk from the C fragments c of n-tiles 2kk, 2kk + 1 (flash_mma.cuh:
// P from S, dS^T from its registers), rounded to T.
template <typename T, int N>
__device__ inline void a_from_c(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const int e0 = 2 * reg, e1 = 2 * reg + 1;
    a[reg] = mma::pack2<T>(c[2 * kk + mma::a_from_c_tile(e0)][mma::a_from_c_elem(e0)],
                           c[2 * kk + mma::a_from_c_tile(e1)][mma::a_from_c_elem(e1)]);
  }
}

// ---- forward: Algorithm 1 --------------------------------------------------------------
template <int Hd> struct FwdLayoutMma {  // byte offsets: Q_i [Br][Hd], K [2][Bc][Hd], V [2][Bc][Hd]
  static constexpr int q = 0, k = q + mma::kFwdBr * Hd * 2, v = k + 2 * mma::kFwdBc * Hd * 2,
                       bytes = v + 2 * mma::kFwdBc * Hd * 2;
};

template <typename T, int Hd>
__global__ void __launch_bounds__(mma::kThreads)
    flash_mma_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             T* __restrict__ out, float* __restrict__ lse, int nH, int group, int S, float scale,
                             bool causal) {
  constexpr int Br = mma::kFwdBr, Bc = mma::kFwdBc;
  using L = FwdLayoutMma<Hd>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Q_i = reinterpret_cast<T*>(smem + L::q);              // [Br][Hd] swizzled
  T* K_s = reinterpret_cast<T*>(smem + L::k);              // [2][Bc][Hd]: K_j in stage j % 2
  T* V_s = reinterpret_cast<T*>(smem + L::v);              // [2][Bc][Hd]

  const int i = blockIdx.x, bh = blockIdx.y;               // query tile, b * nH + h
  const int b = bh / nH, h = bh % nH, kvh = h / group;     // GQA: query head h reads kv head h / group
  const int q0 = i * Br;
  const int64_t q_off = static_cast<int64_t>(bh) * S * Hd;
  const int64_t kv_off = (static_cast<int64_t>(b) * (nH / group) + kvh) * S * Hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = q0 + 16 * warp;  // this warp's rows
  const float scale_log2 = scale * kLog2e;                 // e^(x scale) = 2^(x scale log2 e): FFMA + EX2
  const int Tc = (S + Bc - 1) / Bc;
  const int j_end = causal ? min(Tc, (min(q0 + Br, S) - 1) / Bc + 1) : Tc;  // stop at the diagonal

  load_tile_async<T, Hd, Br>(Q_i, q + q_off, q0, S);
  mma::cp_async_commit();                                  // group: Q_i
  load_tile_async<T, Hd, Bc>(K_s, k + kv_off, 0, S);
  load_tile_async<T, Hd, Bc>(V_s, v + kv_off, 0, S);
  mma::cp_async_commit();                                  // group: K_0, V_0
  mma::cp_async_wait<1>();                                 // Q_i has landed (K_0, V_0 may not have)
  __syncthreads();
  uint32_t q_frag[Hd / 16][4];                             // [16][Hd] this warp's rows of Q_i, A fragments
#pragma unroll
  for (int kk = 0; kk < Hd / 16; ++kk) {
    const mma::RowCol src = mma::x4_src_a(lane);
    mma::ldmatrix_x4(q_frag[kk], Q_i + mma::swizzle(16 * warp + src.row, 16 * kk + src.col, Hd));
  }
  float o[Hd / 8][4] = {};                                 // [16][Hd] O_i, unnormalised, C fragments
  float m[2] = {-INFINITY, -INFINITY};                     // row max of rows g, g + 8 (scaled, log2 units)
  float l[2] = {0.0f, 0.0f};                               // row sum over this lane's columns only

  for (int j = 0; j < j_end; ++j) {
    mma::cp_async_wait<0>();                               // K_j, V_j have landed (this thread's copies)
    __syncthreads();                                       // everyone's; and tile j - 1 is no longer read
    if (j + 1 < j_end) {                                   // K_j+1, V_j+1 stream in during this tile
      const int next = (j + 1) % 2;
      load_tile_async<T, Hd, Bc>(K_s + next * Bc * Hd, k + kv_off, (j + 1) * Bc, S);
      load_tile_async<T, Hd, Bc>(V_s + next * Bc * Hd, v + kv_off, (j + 1) * Bc, S);
    }
    mma::cp_async_commit();                                // (empty on the last tile)
    const T* K_j = K_s + (j % 2) * Bc * Hd;                // [Bc][Hd]
    const T* V_j = V_s + (j % 2) * Bc * Hd;                // [Bc][Hd]
    const int k0 = j * Bc;

    // S_ij = Q_i K_j^T: [16][Bc] per warp, n-tiles of 8 keys
    float s[Bc / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < Hd / 16; ++kk)
#pragma unroll
      for (int np = 0; np < Bc / 16; ++np) {
        uint32_t kb[4];                                    // B of key n-tiles 2np, 2np + 1
        const mma::RowCol src = mma::x4_src_b(lane);
        mma::ldmatrix_x4(kb, K_j + mma::swizzle(16 * np + src.row, 16 * kk + src.col, Hd));
        mma::mma_16816<T>(s[2 * np], q_frag[kk], kb[0], kb[1]);
        mma::mma_16816<T>(s[2 * np + 1], q_frag[kk], kb[2], kb[3]);
      }
    // Masks (a warp-uniform branch: only the tail tile and the diagonal need them):
    // keys past S (their zero-filled rows), keys after the query when causal.
    if (k0 + Bc > S || (causal && k0 + Bc - 1 > row0)) {
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const mma::RowCol rc = mma::frag_c(lane, e);
          const int qi = row0 + rc.row, kj = k0 + 8 * nt + rc.col;
          if (kj >= S || (causal && kj > qi)) s[nt][e] = -INFINITY;
        }
    }
    // Online softmax, row half r: row g (c0, c1) and row g + 8 (c2, c3) of every n-tile
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // the row's Bc columns are spread
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));   // over the 4 lanes of quad g
      const float m_new = fmaxf(m[r], mx * scale_log2);       // scale > 0: max then scale
      // A row with no valid key yet has m_new = -inf: subtract 0 instead (P = 0, alpha = 0, no NaN)
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_use);                // e^(m_old - m_new), 0 on the first tile
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < Bc / 8; ++nt)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[nt][e] = exp2f(fmaf(s[nt][e], scale_log2, -m_use));  // P_ij, in place of S_ij
          sum += s[nt][e];
        }
      l[r] = alpha * l[r] + sum;                              // the quad's 4 partial sums: added at the end
#pragma unroll
      for (int nt = 0; nt < Hd / 8; ++nt) {
        o[nt][2 * r] *= alpha;                                // O_i = diag(alpha) O_i
        o[nt][2 * r + 1] *= alpha;
      }
    }
    // O_i += P_ij V_j, P_ij's A fragments repacked from its C fragments (no shared memory)
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      uint32_t p[4];
      a_from_c<T>(p, s, kk);
#pragma unroll
      for (int np = 0; np < Hd / 16; ++np) {
        uint32_t vb[4];                                     // B of Hd n-tiles 2np, 2np + 1 (V_j is [k][n])
        const mma::RowCol src = mma::x4_src_a(lane);
        mma::ldmatrix_x4_trans(vb, V_j + mma::swizzle(16 * kk + src.row, 16 * np + src.col, Hd));
        mma::mma_16816<T>(o[2 * np], p, vb[0], vb[1]);
        mma::mma_16816<T>(o[2 * np + 1], p, vb[2], vb[3]);
      }
    }
  }
  // O_i = diag(l)^-1 O_i, lse = (m + log2 l) ln 2; a row with no valid key: O = 0, lse = -inf
  float inv_l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv_l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const int qi = row0 + mma::group_of(lane) + 8 * r;
    if (mma::thread_in_group(lane) == 0 && qi < S)
      lse[static_cast<int64_t>(bh) * S + qi] = l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
  }
  store_rows<T, Hd>(o, inv_l, Q_i + 16 * warp * Hd, out + q_off, row0, S);  // via this warp's Q_i rows
}

// ---- backward: Algorithm 2 -------------------------------------------------------------
// D_i = rowsum(dO_i * O_i) in fp32: one warp per row of [B * nH * S].
template <typename T, int Hd>
__global__ void flash_mma_dot_kernel(const T* __restrict__ dout, const T* __restrict__ out, float* __restrict__ D,
                                     int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float sum = 0.0f;
  for (int c = lane; c < Hd; c += 32) sum += to_float(dout[r * Hd + c]) * to_float(out[r * Hd + c]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) D[r] = sum;
}

template <int Hd> struct BwdLayoutMma {  // byte offsets: K_j, V_j [Bc][Hd]; Q, dO [2][Br][Hd]; dS_i [Br][Bc]
  static constexpr int Br = mma::bwd_br(Hd), Bc = mma::kBwdBc;
  static constexpr int k = 0, v = k + Bc * Hd * 2, q = v + Bc * Hd * 2, dout = q + 2 * Br * Hd * 2,
                       ds = dout + 2 * Br * Hd * 2, bytes = ds + Br * Bc * 2;
};

template <typename T, int Hd>
__global__ void __launch_bounds__(mma::kThreads)
    flash_mma_backward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                              const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ D,
                              float* __restrict__ dq_accum, T* __restrict__ dk, T* __restrict__ dv, int nH, int group,
                              int S, float scale, bool causal) {
  using L = BwdLayoutMma<Hd>;
  constexpr int Br = L::Br, Bc = L::Bc;
  extern __shared__ __align__(128) unsigned char smem[];
  T* K_j = reinterpret_cast<T*>(smem + L::k);              // [Bc][Hd] swizzled, for the whole block
  T* V_j = reinterpret_cast<T*>(smem + L::v);              // [Bc][Hd]
  T* Q_s = reinterpret_cast<T*>(smem + L::q);              // [2][Br][Hd]: Q_i of step n in stage n % 2
  T* dO_s = reinterpret_cast<T*>(smem + L::dout);          // [2][Br][Hd]
  T* dS_i = reinterpret_cast<T*>(smem + L::ds);            // [Br][Bc]

  const int j = blockIdx.x, bkv = blockIdx.y;              // key tile, b * nKV + kv head
  const int nKV = nH / group, b = bkv / nKV, kvh = bkv % nKV, k0 = j * Bc;
  const int64_t kv_off = static_cast<int64_t>(bkv) * S * Hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale_log2 = scale * kLog2e;
  // The steps: every query head of the group x every query tile at or below the diagonal
  const int Tr = (S + Br - 1) / Br, i_start = causal ? k0 / Br : 0, n_i = Tr - i_start, steps = group * n_i;
  auto head_of = [&](int step) { return static_cast<int64_t>(b) * nH + kvh * group + step / n_i; };  // b*nH + h
  auto q0_of = [&](int step) { return (i_start + step % n_i) * Br; };
  auto load_q_do = [&](int step) {
    const int64_t off = head_of(step) * S * Hd;
    load_tile_async<T, Hd, Br>(Q_s + (step % 2) * Br * Hd, q + off, q0_of(step), S);
    load_tile_async<T, Hd, Br>(dO_s + (step % 2) * Br * Hd, dout + off, q0_of(step), S);
  };
  load_tile_async<T, Hd, Bc>(K_j, k + kv_off, k0, S);
  load_tile_async<T, Hd, Bc>(V_j, v + kv_off, k0, S);
  load_q_do(0);
  mma::cp_async_commit();
  float dk_acc[Hd / 8][4] = {}, dv_acc[Hd / 8][4] = {};   // [16][Hd] each: this warp's keys, whole loop

  for (int step = 0; step < steps; ++step) {
    mma::cp_async_wait<0>();                               // this step's Q_i, dO_i have landed
    __syncthreads();                                       // for everyone; last step's stage and dS_i are free
    if (step + 1 < steps) load_q_do(step + 1);             // the next step's stream in meanwhile
    mma::cp_async_commit();
    const T* Q_i = Q_s + (step % 2) * Br * Hd;             // [Br][Hd]
    const T* dO_i = dO_s + (step % 2) * Br * Hd;           // [Br][Hd]
    const int64_t bh = head_of(step);
    const int q0 = q0_of(step);
    // S_ij^T = K_j Q_i^T and dP_ij^T = V_j dO_i^T: [16 keys][Br queries] per warp
    float sT[Br / 8][4] = {}, dpT[Br / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < Hd / 16; ++kk) {
      uint32_t ka[4], va[4];
      const mma::RowCol sa = mma::x4_src_a(lane);
      mma::ldmatrix_x4(ka, K_j + mma::swizzle(16 * warp + sa.row, 16 * kk + sa.col, Hd));
      mma::ldmatrix_x4(va, V_j + mma::swizzle(16 * warp + sa.row, 16 * kk + sa.col, Hd));
#pragma unroll
      for (int np = 0; np < Br / 16; ++np) {
        uint32_t qb[4], ob[4];                             // B of query n-tiles 2np, 2np + 1
        const mma::RowCol sb = mma::x4_src_b(lane);
        mma::ldmatrix_x4(qb, Q_i + mma::swizzle(16 * np + sb.row, 16 * kk + sb.col, Hd));
        mma::ldmatrix_x4(ob, dO_i + mma::swizzle(16 * np + sb.row, 16 * kk + sb.col, Hd));
        mma::mma_16816<T>(sT[2 * np], ka, qb[0], qb[1]);
        mma::mma_16816<T>(sT[2 * np + 1], ka, qb[2], qb[3]);
        mma::mma_16816<T>(dpT[2 * np], va, ob[0], ob[1]);
        mma::mma_16816<T>(dpT[2 * np + 1], va, ob[2], ob[3]);
      }
    }
    // P^T = exp(S^T scale - lse) (0 where masked), dS^T = P^T (dP^T - D), in place. lse_i
    // and D_i of the lane's query columns 8 nt + 2t + c (cached reads: L1/L2 hits)
#pragma unroll
    for (int nt = 0; nt < Br / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int qi = q0 + 8 * nt + mma::frag_c(lane, c).col;
        const float lse2 = qi < S ? lse[bh * S + qi] * kLog2e : -INFINITY;  // log2 units
        const float D_q = qi < S ? D[bh * S + qi] : 0.0f;
#pragma unroll
        for (int e = c; e < 4; e += 2) {                   // rows g (e = c) and g + 8 (e = c + 2)
          const int kj = k0 + 16 * warp + mma::frag_c(lane, e).row;
          const bool valid = kj < S && qi < S && (!causal || kj <= qi) && lse2 != -INFINITY;
          const float p = valid ? exp2f(fmaf(sT[nt][e], scale_log2, -lse2)) : 0.0f;
          sT[nt][e] = p;
          dpT[nt][e] = p * (dpT[nt][e] - D_q);
        }
      }
    // dV_j += P^T dO_i and dK_j += dS^T Q_i (k = the Br queries; A fragments from registers)
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      a_from_c<T>(pa, sT, kk);
      a_from_c<T>(dsa, dpT, kk);
#pragma unroll
      for (int np = 0; np < Hd / 16; ++np) {
        uint32_t ob[4], qb[4];                             // B of Hd n-tiles 2np, 2np + 1 ([k][n] tiles)
        const mma::RowCol src = mma::x4_src_a(lane);
        mma::ldmatrix_x4_trans(ob, dO_i + mma::swizzle(16 * kk + src.row, 16 * np + src.col, Hd));
        mma::ldmatrix_x4_trans(qb, Q_i + mma::swizzle(16 * kk + src.row, 16 * np + src.col, Hd));
        mma::mma_16816<T>(dv_acc[2 * np], pa, ob[0], ob[1]);
        mma::mma_16816<T>(dv_acc[2 * np + 1], pa, ob[2], ob[3]);
        mma::mma_16816<T>(dk_acc[2 * np], dsa, qb[0], qb[1]);
        mma::mma_16816<T>(dk_acc[2 * np + 1], dsa, qb[2], qb[3]);
      }
    }
    // dS_i [Br][Bc] = (dS^T)^T into shared memory: dQ_i needs it with queries as rows
#pragma unroll
    for (int nt = 0; nt < Br / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const mma::RowCol rc = mma::frag_c(lane, e);
        dS_i[mma::swizzle(8 * nt + rc.col, 16 * warp + rc.row, Bc)] = from_float<T>(dpT[nt][e]);
      }
    __syncthreads();                                       // every warp's 16 key columns of dS_i
    // dQ_i += scale dS_i K_j: warp w takes query rows 16 rb.. and n-tiles [n_first, + kTiles)
    constexpr int kRowBlocks = Br / 16, kTiles = Hd / 8 / (mma::kWarps / kRowBlocks);
    const int rb = warp % kRowBlocks, n_first = (warp / kRowBlocks) * kTiles;
    uint32_t ds_frag[Bc / 16][4];                          // [16][Bc] rows of dS_i, A fragments
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const mma::RowCol src = mma::x4_src_a(lane);
      mma::ldmatrix_x4(ds_frag[kk], dS_i + mma::swizzle(16 * rb + src.row, 16 * kk + src.col, Bc));
    }
#pragma unroll
    for (int np = 0; np < kTiles / 2; ++np) {
      const int n0 = n_first + 2 * np;                     // n-tiles n0, n0 + 1 of Hd
      float acc[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < Bc / 16; ++kk) {
        uint32_t kb[4];                                    // K_j as B [k = keys][n = Hd]
        const mma::RowCol src = mma::x4_src_a(lane);
        mma::ldmatrix_x4_trans(kb, K_j + mma::swizzle(16 * kk + src.row, 8 * n0 + src.col, Hd));
        mma::mma_16816<T>(acc[0], ds_frag[kk], kb[0], kb[1]);
        mma::mma_16816<T>(acc[1], ds_frag[kk], kb[2], kb[3]);
      }
      // every key block adds to the same dQ_i: fp32 atomics (order not deterministic)
#pragma unroll
      for (int t2 = 0; t2 < 2; ++t2)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const mma::RowCol rc = mma::frag_c(lane, e);
          const int qi = q0 + 16 * rb + rc.row;
          if (qi < S) atomicAdd(dq_accum + (bh * S + qi) * Hd + 8 * (n0 + t2) + rc.col, scale * acc[t2][e]);
        }
    }
  }
  // dK_j = scale sum dS^T Q and dV_j, each row written once by this block: the GQA sum
  // over the group needs no atomics. Staged through this warp's rows of K_j and V_j.
  __syncthreads();                                         // every warp's last dQ_i has read K_j
  const float dk_mul[2] = {scale, scale}, dv_mul[2] = {1.0f, 1.0f};
  store_rows<T, Hd>(dk_acc, dk_mul, K_j + 16 * warp * Hd, dk + kv_off, k0 + 16 * warp, S);
  store_rows<T, Hd>(dv_acc, dv_mul, V_j + 16 * warp * Hd, dv + kv_off, k0 + 16 * warp, S);
}

// dQ: the fp32 accumulator -> q's dtype.
template <typename T>
__global__ void flash_mma_convert_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] = from_float<T>(src[idx]);
}

void check_scale(double scale) {
  TORCH_CHECK(scale > 0.0, "flash_attention_mma: scale must be > 0 (the row max is taken before scaling), got ",
              scale);
}

}  // namespace

// Forward: grid (query tile i, b * nH + h) x 128 threads, FwdLayoutMma<Hd>::bytes of shared.
std::tuple<at::Tensor, at::Tensor> flash_attention_mma_forward(const at::Tensor& q, const at::Tensor& k,
                                                               const at::Tensor& v, double scale, bool causal) {
  const int64_t nKV = check_qkv(q, k, v);
  check_scale(scale);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty(q.sizes(), q.options());                      // [B, nH, S, Hd]
  at::Tensor lse = at::empty({B, nH, S}, q.options().dtype(at::kFloat));   // [B, nH, S]
  if (q.numel() == 0) return {out, lse};
  const dim3 grid(static_cast<unsigned>((S + mma::kFwdBr - 1) / mma::kFwdBr), static_cast<unsigned>(B * nH));
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    constexpr int bytes = FwdLayoutMma<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_mma_forward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    flash_mma_forward_kernel<T, kHd><<<grid, mma::kThreads, bytes, c10::cuda::getCurrentCUDAStream()>>>(
        static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
        static_cast<const T*>(v.data_ptr()), static_cast<T*>(out.data_ptr()), lse.data_ptr<float>(),
        static_cast<int>(nH), static_cast<int>(nH / nKV), static_cast<int>(S), static_cast<float>(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, lse};
}

// Backward: D; grid (key tile j, b * nKV + kv) x 128 threads, BwdLayoutMma<Hd>::bytes of
// shared; dQ fp32 -> dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_mma_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, double scale, bool causal) {
  const int64_t nKV = check_qkv(q, k, v);
  check_scale(scale);
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
    flash_mma_dot_kernel<T, kHd><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<const T*>(dout.data_ptr()), static_cast<const T*>(out.data_ptr()), D.data_ptr<float>(), rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // 2. dK_j, dV_j per block (key tile j, b * nKV + kv head); dQ by atomics
    constexpr int bytes = BwdLayoutMma<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_mma_backward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid(static_cast<unsigned>((S + mma::kBwdBc - 1) / mma::kBwdBc), static_cast<unsigned>(B * nKV));
    flash_mma_backward_kernel<T, kHd><<<grid, mma::kThreads, bytes, stream>>>(
        static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
        static_cast<const T*>(v.data_ptr()), static_cast<const T*>(dout.data_ptr()), lse.data_ptr<float>(),
        D.data_ptr<float>(), dq_accum.data_ptr<float>(), static_cast<T*>(dk.data_ptr()),
        static_cast<T*>(dv.data_ptr()), static_cast<int>(nH), static_cast<int>(nH / nKV), static_cast<int>(S),
        static_cast<float>(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // 3. dQ: fp32 accumulator -> q's dtype
    const int64_t n = dq.numel();
    const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536));
    flash_mma_convert_kernel<T><<<blocks, 256, 0, stream>>>(dq_accum.data_ptr<float>(),
                                                            static_cast<T*>(dq.data_ptr()), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dq, dk, dv};
}

}  // namespace picotron::kernels::cuda
