// kernels/attention_mma.cu — rung 2 of the attention ladder (kernels/README.md):
// FlashAttention-2 as the paper builds it, scores, softmax state and output in registers
// (mma.sync), tiles copied asynchronously. Rung 1, kernels/attention_wmma.cu, computes the
// same thing with WMMA and stages S, P and O in shared memory.
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
//     operands both rungs read. Here a C fragment's layout is known
//     (attention_mma_fragments.cuh): the softmax works on it in place (a row reduction:
//     2 shuffles within a quad), and P's A fragments are S's registers repacked. Only
//     K_j, V_j come from shared memory.
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
//            same signatures (kernels/ops.h); the fragment arithmetic:
//            kernels/attention_mma_fragments.cuh
// test:      build/tests/unit_tests "[kernels]"   (tests/unit/test_flash_mma.cpp: the warps of
//            both kernels emulated lane by lane on the CPU, and on a GPU the kernels)
// bench:     build/bench/bench_kernels   (one row per rung, against SDPA)
// alone:     build/kernels/attention_rung 2   (this rung against the reference, timed; a GPU)
// This file: the forward and its launcher; the backward: attention_mma_backward.cu; what
// both share: attention_mma.cuh; the checks every rung's launcher shares: attention_launch.cuh.
#include "kernels/attention_mma.cuh"

namespace picotron::kernels::cuda {
namespace {

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

}  // namespace picotron::kernels::cuda
