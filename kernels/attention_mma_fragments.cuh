// kernels/attention_mma_fragments.cuh — the index arithmetic of rung 2 of the attention
// ladder, the register-resident FlashAttention-2 (kernels/attention_mma.cu): which element
// of a tile each lane holds in the registers of one tensor-core instruction,
// mma.sync.m16n8k16 (bf16 / fp16 in, fp32 accumulate), which address each lane hands to ldmatrix, and the swizzled shared layout.
// Pure constexpr functions, the same ones the kernel calls and tests/unit/test_flash_mma.cpp
// runs on the CPU; the PTX wrappers (mma, ldmatrix, cp.async) at the end exist in CUDA
// compilations only.
//
// The tables are the PTX ISA's ("Matrix Fragments for mma.m16n8k16 with floating point
// type" and "Warp-level matrix load instruction: ldmatrix"). A warp's 32 lanes split into
// 8 groups of 4 ("quads"): g = lane / 4 (groupID), t = lane % 4 (threadID_in_group).
//
//   A, 16 x 16 (row-major), 8 halves a0..a7     B, 16 x 8 ("col"), 4 halves b0..b3
//   in 4 registers {a0a1}{a2a3}{a4a5}{a6a7}     in 2 registers {b0b1}{b2b3}
//              cols 0..7       cols 8..15                    col (n) g
//          +---------------+---------------+            +-----------------+
//   row g  |   a0 a1 @2t   |  a4 a5 @8+2t  | k 2t, 2t+1 |      b0 b1      |
//   row g+8|   a2 a3 @2t   |  a6 a7 @8+2t  | k 8+2t, .. |      b2 b3      |
//          +---------------+---------------+            +-----------------+
//
//   C = D, 16 x 8 fp32, c0..c3 (4 registers)     so one lane holds rows g and g + 8 of every
//        row g:    c0 c1 at cols 2t, 2t + 1      tile: a row's 8 columns live in the 4 lanes of
//        row g+8:  c2 c3 at cols 2t, 2t + 1      quad g, and a row reduction is 2 __shfl_xor
//
// P from S without shared memory: the C fragments of two neighbouring n-tiles (columns
// 16kk..16kk+7 and 16kk+8..16kk+15) hold exactly the elements the A fragment of the k-slice
// kk needs, in the same lanes:  {a0a1} = C_2kk{c0c1}, {a2a3} = C_2kk{c2c3},
// {a4a5} = C_2kk+1{c0c1}, {a6a7} = C_2kk+1{c2c3}   (a_from_c_tile / a_from_c_elem below).
//
// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements, rows of 16 bytes anywhere in shared
// memory. Lane l hands over the address of row l % 8 of matrix l / 8; every lane receives
// one register per matrix holding two elements: (row g, cols 2t, 2t + 1) of matrix m, or
// with .trans (rows 2t, 2t + 1, col g), i.e. the matrix transposed on the way.
//   x4_src_a: matrices  0 | 2     (rows 0-7 | 8-15) x (cols 0-7 | 8-15) -> A's 4 registers
//                       1 | 3     in order; with .trans on V [keys][Hd]: B of two n-tiles
//   x4_src_b: matrices  0 | 1     of K [keys][Hd] (B = K^T, "col"): registers 0,1 = B of
//                       2 | 3     n-tile 0 (keys 0-7), 2,3 = B of n-tile 1 (keys 8-15)
//
// Shared layout: rows of R = 64 or 128 16-bit elements (8 or 16 chunks of 16 B), the chunk
// index XORed with row % 8. ldmatrix reads one 16-byte chunk from each of 8 consecutive
// rows; unswizzled, with a row stride of 128 or 256 B, all 8 sit in the same 4 banks (an
// 8-way conflict). XOR-ing spreads the 8 rows over 8 different chunks = all 32 banks,
// costs no extra bytes (padding each row by 16 B, as the WMMA rung does, works too but
// wastes 6-12% of the tile and breaks the rows' 128-byte alignment), and on 128-byte rows
// (64 elements) is exactly Hopper's 128-byte swizzle, the layout TMA writes and wgmma reads.
//
//   row 0:  c0 c1 c2 c3 c4 c5 c6 c7        physical chunk = chunk ^ (row % 8)
//   row 1:  c1 c0 c3 c2 c5 c4 c7 c6        (chunk 0 of rows 0..7 lands in columns 0..7)
//   row 2:  c2 c3 c0 c1 c6 c7 c4 c5
//
// Test: build/tests/unit_tests "[kernels]" (tests/unit/test_flash_mma.cpp: the tables checked
// against the ISA, an mma emulated from them, and the kernels' warps emulated lane by lane)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PICOTRON_HD __host__ __device__
#else
#define PICOTRON_HD
#endif

namespace picotron::kernels::mma {

// ---- the tiles of attention_mma.cu ----------------------------------------------
constexpr int kWarps = 4, kThreads = 32 * kWarps;  // a block: 4 warps, each owns 16 rows
constexpr int kFwdBr = 16 * kWarps;                // forward: query rows per block (Q_i)
constexpr int kFwdBc = 64;                         // forward: keys per K_j, V_j tile
constexpr int kBwdBc = 16 * kWarps;                // backward: keys per block (K_j, V_j)
// backward: query rows per step; 32 at Hd 128 keeps dK_j, dV_j (2 x 64 fp32 registers per
// lane) beside S_ij^T and dP_ij^T (2 x Br/2) under the 255 registers of a thread
PICOTRON_HD constexpr int bwd_br(int Hd) { return Hd == 128 ? 32 : 64; }

// ---- mma.m16n8k16 fragments: (lane, element) -> (row, col) of the tile -----------------
struct RowCol {
  int row, col;
};
PICOTRON_HD constexpr int group_of(int lane) { return lane >> 2; }         // g: rows g, g + 8
PICOTRON_HD constexpr int thread_in_group(int lane) { return lane & 3; }   // t: cols 2t, 2t + 1

// A [16][16]: element i = 0..7 (register i / 2, half i % 2)
PICOTRON_HD constexpr RowCol frag_a(int lane, int i) {
  return {group_of(lane) + 8 * ((i >> 1) & 1), 2 * thread_in_group(lane) + (i & 1) + 8 * (i >> 2)};
}
// B [16][8] (row = k, col = n): element i = 0..3 (register i / 2, half i % 2)
PICOTRON_HD constexpr RowCol frag_b(int lane, int i) {
  return {2 * thread_in_group(lane) + (i & 1) + 8 * (i >> 1), group_of(lane)};
}
// C, D [16][8] fp32: element i = 0..3
PICOTRON_HD constexpr RowCol frag_c(int lane, int i) {
  return {group_of(lane) + 8 * (i >> 1), 2 * thread_in_group(lane) + (i & 1)};
}
// The A fragment of k-slice kk from the C fragments of n-tiles 2kk and 2kk + 1: element i
// of A is element a_from_c_elem(i) of C tile 2kk + a_from_c_tile(i), in the same lane.
PICOTRON_HD constexpr int a_from_c_tile(int i) { return i >> 2; }
PICOTRON_HD constexpr int a_from_c_elem(int i) { return i & 3; }

// ---- ldmatrix ------------------------------------------------------------------------
// Half j (0, 1) of the register a lane receives from one 8 x 8 matrix: its (row, col) in
// the matrix as stored in shared memory.
PICOTRON_HD constexpr RowCol ldmatrix_dst(int lane, int j, bool trans) {
  return trans ? RowCol{2 * thread_in_group(lane) + j, group_of(lane)}
               : RowCol{group_of(lane), 2 * thread_in_group(lane) + j};
}
// .x4 of a 16 x 16 block: the (row, col) within the block of the 8-element row whose address
// lane hands over (lane / 8 = the matrix). Matrix order 0 1 2 3 = top-left, bottom-left,
// top-right, bottom-right: A's registers; with .trans, B of n-tiles 0, 1 from a [k][n] tile.
PICOTRON_HD constexpr RowCol x4_src_a(int lane) {
  return {(lane & 7) + 8 * ((lane >> 3) & 1), 8 * (lane >> 4)};
}
// Matrix order 0 1 2 3 = top-left, top-right, bottom-left, bottom-right: B ("col") of
// n-tiles 0 and 1 from an [n][k] tile (K_j read as K_j^T), registers {0,1} and {2,3}.
PICOTRON_HD constexpr RowCol x4_src_b(int lane) {
  return {(lane & 7) + 8 * (lane >> 4), 8 * ((lane >> 3) & 1)};
}

// ---- the shared layout ---------------------------------------------------------------
// Element (row, col) of a tile with row_elems 16-bit elements per row (a multiple of 64:
// at least 8 chunks, so chunk ^ (row % 8) stays inside the row). 8-element chunks stay
// contiguous: a 16-byte load or an ldmatrix row reads one.
PICOTRON_HD constexpr int swizzle(int row, int col, int row_elems) {
  return row * row_elems + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}

}  // namespace picotron::kernels::mma

// ---- the PTX wrappers (CUDA compilations only) ---------------------------------------
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace picotron::kernels::mma {

// d += a b on the tensor cores: a [16][16], b [16][8] (T = bf16 or fp16), d [16][8] fp32.
template <typename T>
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_16816: bf16 or fp16");
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8 x 8 matrices; row_addr: the row this lane hands over (x4_src_a / x4_src_b).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 16 bytes global -> shared without passing through registers (.cg: cached in L2 only).
// valid = false writes 16 zero bytes and reads nothing (src-size 0): the tails of a tile.
__device__ inline void cp_async_16(void* dst, const void* src, bool valid) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// The copies issued since the last commit form one group ...
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// ... and this waits until at most n groups are still in flight (this thread's copies).
template <int n> __device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

// Two floats -> one register of two 16-bit elements, the first in the low half (the
// lower column, as every fragment above expects).
template <typename T> __device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

}  // namespace picotron::kernels::mma
#endif  // __CUDACC__
