// kernels/attention_wmma.cuh — what rung 1's forward (attention_wmma.cu) and backward
// (attention_wmma_backward.cu) share: the tile sizes, the WMMA fragments, the tile load and
// one warp's 16-row GEMM on tensor cores. The checks and the dispatch of the launchers, the
// same for every rung: attention_launch.cuh. kernels/attention_wmma.cu's header explains
// the tiling.
#pragma once

#include "kernels/attention_launch.cuh"

#include <mma.h>

namespace picotron::kernels::cuda {
namespace {  // (each .cu including this gets its own copy: internal linkage)

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

}  // namespace
}  // namespace picotron::kernels::cuda
