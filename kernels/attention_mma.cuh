// kernels/attention_mma.cuh — what rung 2's forward (attention_mma.cu) and backward
// (attention_mma_backward.cu) share: tiles copied into swizzled shared memory with
// cp.async, a warp's C fragments stored back as rows, C fragments repacked as A fragments
// (P from S, dS^T from its registers), and the scale check of the launchers. The fragment
// arithmetic itself: kernels/attention_mma_fragments.cuh; the checks every rung shares:
// kernels/attention_launch.cuh.
#pragma once

#include "kernels/attention_launch.cuh"
#include "kernels/attention_mma_fragments.cuh"

namespace picotron::kernels::cuda {
namespace {  // (each .cu including this gets its own copy: internal linkage)


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

// The A fragment of k-slice kk from the C fragments c of n-tiles 2kk, 2kk + 1
// (attention_mma_fragments.cuh: P from S, dS^T from its registers), rounded to T.
template <typename T, int N>
__device__ inline void a_from_c(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
#pragma unroll
  for (int reg = 0; reg < 4; ++reg) {
    const int e0 = 2 * reg, e1 = 2 * reg + 1;
    a[reg] = mma::pack2<T>(c[2 * kk + mma::a_from_c_tile(e0)][mma::a_from_c_elem(e0)],
                           c[2 * kk + mma::a_from_c_tile(e1)][mma::a_from_c_elem(e1)]);
  }
}

void check_scale(double scale) {
  TORCH_CHECK(scale > 0.0, "flash_attention_mma: scale must be > 0 (the row max is taken before scaling), got ",
              scale);
}


}  // namespace
}  // namespace picotron::kernels::cuda
