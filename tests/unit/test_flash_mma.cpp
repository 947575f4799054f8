// The register-resident FlashAttention-2 rung (kernels/attention_mma.cu), checked on
// the CPU, where no GPU runs it:
//   1. the fragment tables of kernels/attention_mma_fragments.cuh against the PTX ISA's
//      text, each a bijection onto its tile; the ldmatrix address patterns; the swizzle (a permutation,
//      and no bank conflicts where the unswizzled layout has 8-way ones);
//   2. an mma.m16n8k16 emulated from those tables, its operands brought by an emulated
//      ldmatrix from swizzled tiles, = A B; and a C fragment reused as an A fragment
//      (P from S) gives (A B) C;
//   3. both kernels' warps emulated lane by lane with the same functions of
//      attention_mma_fragments.cuh (tile loops, masks, quad shuffles, online softmax, P
//      from S's registers, the dS round trip, the dQ split) = reference::flash_attention_*.
//      Emulation in fp32, reference in fp64: 1e-5 relative (fp32 rounding over sums of
//      at most S + Hd terms, ~1e-6 seen);
//   4. on a GPU, the kernels themselves = the reference (bf16 2e-2, fp16 5e-3, as the WMMA
//      rung's test); skipped without one.
// Not modelled: the 16-bit rounding of operands (fp32 throughout), cp.async's timing and
// the barriers (a tile is simply there when read), the order of the dQ atomics.
//
// Run: build/tests/unit_tests "[kernels]"
#include <torch/torch.h>  // before Catch: c10's logging defines a CHECK that Catch's must replace
//                           (in the build, torch/torch.h is the precompiled header, so first anyway)
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention_mma_fragments.cuh"
#include "kernels/kernels.h"

namespace K = picotron::kernels;
namespace fm = picotron::kernels::mma;

namespace {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;  // as the kernel
const auto kF32 = torch::TensorOptions().dtype(torch::kFloat32);

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.detach().to(torch::kCPU, torch::kFloat64), b64 = b.detach().to(torch::kCPU, torch::kFloat64);
  return (a64 - b64).norm().item<double>() / (b64.norm().item<double>() + 1e-30);
}
bool same(fm::RowCol a, fm::RowCol b) { return a.row == b.row && a.col == b.col; }

// ---- a warp's registers and a block's shared memory, as plain arrays ------------------
constexpr int kLanes = 32;
template <int N> using Regs = std::array<std::array<float, N>, kLanes>;  // [lane][element]
using FragA = Regs<8>;  // a0..a7 of every lane (fp32 here: the 16-bit rounding is not modelled)
using FragB = Regs<4>;  // b0..b3
using FragC = Regs<4>;  // c0..c3
using PerRow = std::array<std::array<float, 2>, kLanes>;  // [lane][row half]: rows g, g + 8

// Shared memory: rows x row_elems 16-bit slots, swizzled as the kernel's tiles.
struct Tile {
  int rows, row_elems;
  std::vector<float> mem;
  Tile(int r, int e) : rows(r), row_elems(e), mem(size_t(r) * e, NAN) {}
  float& at(int r, int c) { return mem[fm::swizzle(r, c, row_elems)]; }
};

// load_tile_async: rows row0.. of g [S][row_elems], 8-element chunks, zero-filled past S.
void load_tile(Tile& t, const float* g, int row0, int S) {
  const int chunks = t.row_elems / 8;
  for (int idx = 0; idx < t.rows * chunks; ++idx) {
    const int r = idx / chunks, c = (idx % chunks) * 8;
    for (int x = 0; x < 8; ++x)
      t.mem[fm::swizzle(r, c, t.row_elems) + x] = row0 + r < S ? g[int64_t(row0 + r) * t.row_elems + c + x] : 0.0f;
  }
}

// ldmatrix.x4 (.trans) at the 16 x 16 block (r0, c0): lane l hands over the address of
// (r0, c0) + src(l), row l % 8 of matrix l / 8 (8 contiguous elements); each lane receives
// from every matrix m the two elements ldmatrix_dst names. Result: [lane][2 m + j].
Regs<8> ldmatrix_x4(const Tile& t, int r0, int c0, fm::RowCol (*src)(int), bool trans) {
  int row_addr[4][8];
  for (int lane = 0; lane < kLanes; ++lane) {
    const fm::RowCol rc = src(lane);
    row_addr[lane / 8][lane % 8] = fm::swizzle(r0 + rc.row, c0 + rc.col, t.row_elems);
  }
  Regs<8> out;
  for (int lane = 0; lane < kLanes; ++lane)
    for (int m = 0; m < 4; ++m)
      for (int j = 0; j < 2; ++j) {
        const fm::RowCol d = fm::ldmatrix_dst(lane, j, trans);
        out[lane][2 * m + j] = t.mem[row_addr[m][d.row] + d.col];
      }
  return out;
}
// Registers {2n, 2n + 1} of an x4 load: the B fragment of n-tile n.
FragB b_tile(const Regs<8>& x, int n) {
  FragB b;
  for (int lane = 0; lane < kLanes; ++lane)
    for (int i = 0; i < 4; ++i) b[lane][i] = x[lane][4 * n + i];
  return b;
}

// mma.m16n8k16 as the hardware computes it, the operands placed by the tables: d += a b.
void mma(FragC& d, const FragA& a, const FragB& b) {
  float A[16][16], B[16][8];
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 8; ++i) A[fm::frag_a(lane, i).row][fm::frag_a(lane, i).col] = a[lane][i];
    for (int i = 0; i < 4; ++i) B[fm::frag_b(lane, i).row][fm::frag_b(lane, i).col] = b[lane][i];
  }
  for (int lane = 0; lane < kLanes; ++lane)
    for (int i = 0; i < 4; ++i) {
      const fm::RowCol rc = fm::frag_c(lane, i);
      float sum = d[lane][i];
      for (int x = 0; x < 16; ++x) sum += A[rc.row][x] * B[x][rc.col];
      d[lane][i] = sum;
    }
}

// The kernel's a_from_c: the A fragment of a k-slice from the C fragments of its two n-tiles.
FragA a_from_c(const FragC& lo, const FragC& hi) {
  FragA a;
  for (int lane = 0; lane < kLanes; ++lane)
    for (int i = 0; i < 8; ++i) a[lane][i] = (fm::a_from_c_tile(i) == 0 ? lo : hi)[lane][fm::a_from_c_elem(i)];
  return a;
}

// v = op(v, __shfl_xor_sync(v, 1)); v = op(v, __shfl_xor_sync(v, 2)): afterwards every lane
// of quad g holds op over lanes 4g..4g+3.
template <typename Op> void quad_allreduce(std::array<float, kLanes>& v, Op op) {
  for (int mask : {1, 2}) {
    const auto before = v;
    for (int lane = 0; lane < kLanes; ++lane) v[lane] = op(before[lane], before[lane ^ mask]);
  }
}

// store_rows: a warp's 16 rows of C fragments, times mul, -> its 16 rows of the staging
// tile (stage_row0 = 16 warp) -> dst [S][Hd] rows row0.. (rows >= S skipped), by chunks.
void store_rows(const std::vector<FragC>& acc, const PerRow& mul, Tile& stage, int stage_row0, float* dst, int row0,
                int S) {
  const int Hd = stage.row_elems;
  float* base = stage.mem.data() + stage_row0 * Hd;  // the kernel's `stage` pointer
  for (int nt = 0; nt < Hd / 8; ++nt)
    for (int lane = 0; lane < kLanes; ++lane)
      for (int r = 0; r < 2; ++r) {
        const fm::RowCol rc = fm::frag_c(lane, 2 * r);
        base[fm::swizzle(rc.row, 8 * nt + rc.col, Hd)] = acc[nt][lane][2 * r] * mul[lane][r];
        base[fm::swizzle(rc.row, 8 * nt + rc.col, Hd) + 1] = acc[nt][lane][2 * r + 1] * mul[lane][r];
      }
  for (int idx = 0; idx < 16 * Hd / 8; ++idx) {
    const int r = idx / (Hd / 8), c = (idx % (Hd / 8)) * 8;
    if (row0 + r < S)
      for (int x = 0; x < 8; ++x) dst[int64_t(row0 + r) * Hd + c + x] = base[fm::swizzle(r, c, Hd) + x];
  }
}

// ---- flash_mma_forward_kernel, one warp of block (query tile i, head) ------------------
// The kernel's statements in its order, each over the 32 lanes. Q, Kh, Vh, O: this head's
// [S][Hd] rows; lse: its [S].
void forward_warp(const float* Q, const float* Kh, const float* Vh, float* O, float* lse, int S, int Hd, int i,
                  int warp, float scale, bool causal) {
  constexpr int Br = fm::kFwdBr, Bc = fm::kFwdBc;
  const int q0 = i * Br, row0 = q0 + 16 * warp;
  const float scale_log2 = scale * kLog2e;
  const int Tc = (S + Bc - 1) / Bc;
  const int j_end = causal ? std::min(Tc, (std::min(q0 + Br, S) - 1) / Bc + 1) : Tc;
  Tile Q_i(Br, Hd);
  load_tile(Q_i, Q, q0, S);
  std::vector<FragA> q_frag(Hd / 16);
  for (int kk = 0; kk < Hd / 16; ++kk) q_frag[kk] = ldmatrix_x4(Q_i, 16 * warp, 16 * kk, fm::x4_src_a, false);
  std::vector<FragC> o(Hd / 8, FragC{});
  PerRow m, l;
  for (auto& x : m) x = {-INFINITY, -INFINITY};
  for (auto& x : l) x = {0.0f, 0.0f};

  for (int j = 0; j < j_end; ++j) {
    const int k0 = j * Bc;
    Tile K_j(Bc, Hd), V_j(Bc, Hd);
    load_tile(K_j, Kh, k0, S);
    load_tile(V_j, Vh, k0, S);
    // S_ij = Q_i K_j^T
    std::vector<FragC> s(Bc / 8, FragC{});
    for (int kk = 0; kk < Hd / 16; ++kk)
      for (int np = 0; np < Bc / 16; ++np) {
        const Regs<8> kb = ldmatrix_x4(K_j, 16 * np, 16 * kk, fm::x4_src_b, false);
        mma(s[2 * np], q_frag[kk], b_tile(kb, 0));
        mma(s[2 * np + 1], q_frag[kk], b_tile(kb, 1));
      }
    // masks: keys past S, keys after the query (causal)
    if (k0 + Bc > S || (causal && k0 + Bc - 1 > row0))
      for (int nt = 0; nt < Bc / 8; ++nt)
        for (int lane = 0; lane < kLanes; ++lane)
          for (int e = 0; e < 4; ++e) {
            const fm::RowCol rc = fm::frag_c(lane, e);
            const int qi = row0 + rc.row, kj = k0 + 8 * nt + rc.col;
            if (kj >= S || (causal && kj > qi)) s[nt][lane][e] = -INFINITY;
          }
    // online softmax, row half r
    for (int r = 0; r < 2; ++r) {
      std::array<float, kLanes> mx;
      for (int lane = 0; lane < kLanes; ++lane) {
        mx[lane] = -INFINITY;
        for (int nt = 0; nt < Bc / 8; ++nt) mx[lane] = std::max({mx[lane], s[nt][lane][2 * r], s[nt][lane][2 * r + 1]});
      }
      quad_allreduce(mx, [](float a, float b) { return std::max(a, b); });
      for (int lane = 0; lane < kLanes; ++lane) {
        const float m_new = std::max(m[lane][r], mx[lane] * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = std::exp2(m[lane][r] - m_use);
        m[lane][r] = m_new;
        float sum = 0.0f;
        for (int nt = 0; nt < Bc / 8; ++nt)
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[nt][lane][e] = std::exp2(std::fma(s[nt][lane][e], scale_log2, -m_use));
            sum += s[nt][lane][e];
          }
        l[lane][r] = alpha * l[lane][r] + sum;
        for (int nt = 0; nt < Hd / 8; ++nt) {
          o[nt][lane][2 * r] *= alpha;
          o[nt][lane][2 * r + 1] *= alpha;
        }
      }
    }
    // O_i += P_ij V_j, P from S's registers
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const FragA p = a_from_c(s[2 * kk], s[2 * kk + 1]);
      for (int np = 0; np < Hd / 16; ++np) {
        const Regs<8> vb = ldmatrix_x4(V_j, 16 * kk, 16 * np, fm::x4_src_a, true);
        mma(o[2 * np], p, b_tile(vb, 0));
        mma(o[2 * np + 1], p, b_tile(vb, 1));
      }
    }
  }
  // O_i /= l, lse = (m + log2 l) ln 2
  PerRow inv_l;
  for (int r = 0; r < 2; ++r) {
    std::array<float, kLanes> lr;
    for (int lane = 0; lane < kLanes; ++lane) lr[lane] = l[lane][r];
    quad_allreduce(lr, [](float a, float b) { return a + b; });
    for (int lane = 0; lane < kLanes; ++lane) {
      inv_l[lane][r] = lr[lane] > 0.0f ? 1.0f / lr[lane] : 0.0f;
      const int qi = row0 + fm::group_of(lane) + 8 * r;
      if (fm::thread_in_group(lane) == 0 && qi < S)
        lse[qi] = lr[lane] > 0.0f ? (m[lane][r] + std::log2(lr[lane])) * kLn2 : -INFINITY;
    }
  }
  store_rows(o, inv_l, Q_i, 16 * warp, O, row0, S);
}

// q [B, nH, S, Hd], k, v [B, nKV, S, Hd] fp32 -> (out, lse), every block and warp in turn.
std::tuple<torch::Tensor, torch::Tensor> emulate_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v, double scale, bool causal) {
  const int B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3), nKV = k.size(1), group = nH / nKV;
  auto out = torch::zeros_like(q), lse = torch::empty({B, nH, S}, kF32);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nH; ++h) {
      const int64_t bh = int64_t(b) * nH + h, bkv = int64_t(b) * nKV + h / group;  // GQA
      for (int i = 0; i < (S + fm::kFwdBr - 1) / fm::kFwdBr; ++i)
        for (int warp = 0; warp < fm::kWarps; ++warp)
          forward_warp(q.data_ptr<float>() + bh * S * Hd, k.data_ptr<float>() + bkv * S * Hd,
                       v.data_ptr<float>() + bkv * S * Hd, out.data_ptr<float>() + bh * S * Hd,
                       lse.data_ptr<float>() + bh * S, S, Hd, i, warp, float(scale), causal);
    }
  return {out, lse};
}

// ---- flash_mma_backward_kernel, one block (key tile j, kv head), its warps in turn ------
struct BwdArgs {  // fp32 [B, heads, S, Hd] tensors' data, and the sizes
  const float *q, *k, *v, *dout, *lse, *D;
  float *dq, *dk, *dv;
  int nH, group, S, Hd;
  float scale;
  bool causal;
};
void backward_block(const BwdArgs& a, int b, int kvh, int j) {
  const int S = a.S, Hd = a.Hd, Br = fm::bwd_br(Hd), Bc = fm::kBwdBc, k0 = j * Bc;
  const int64_t kv_off = (int64_t(b) * (a.nH / a.group) + kvh) * S * Hd;
  const float scale_log2 = a.scale * kLog2e;
  Tile K_j(Bc, Hd), V_j(Bc, Hd);
  load_tile(K_j, a.k + kv_off, k0, S);
  load_tile(V_j, a.v + kv_off, k0, S);
  std::vector<std::vector<FragC>> dk_acc(fm::kWarps, std::vector<FragC>(Hd / 8, FragC{})), dv_acc = dk_acc;
  const int Tr = (S + Br - 1) / Br, i_start = a.causal ? k0 / Br : 0, n_i = Tr - i_start;
  for (int step = 0; step < a.group * n_i; ++step) {
    const int64_t bh = int64_t(b) * a.nH + kvh * a.group + step / n_i;
    const int q0 = (i_start + step % n_i) * Br;
    Tile Q_i(Br, Hd), dO_i(Br, Hd), dS_i(Br, Bc);
    load_tile(Q_i, a.q + bh * S * Hd, q0, S);
    load_tile(dO_i, a.dout + bh * S * Hd, q0, S);
    for (int warp = 0; warp < fm::kWarps; ++warp) {  // up to the __syncthreads after dS_i
      // S^T = K_j Q_i^T, dP^T = V_j dO_i^T: this warp's 16 keys x Br queries
      std::vector<FragC> sT(Br / 8, FragC{}), dpT(Br / 8, FragC{});
      for (int kk = 0; kk < Hd / 16; ++kk) {
        const FragA ka = ldmatrix_x4(K_j, 16 * warp, 16 * kk, fm::x4_src_a, false);
        const FragA va = ldmatrix_x4(V_j, 16 * warp, 16 * kk, fm::x4_src_a, false);
        for (int np = 0; np < Br / 16; ++np) {
          const Regs<8> qb = ldmatrix_x4(Q_i, 16 * np, 16 * kk, fm::x4_src_b, false);
          const Regs<8> ob = ldmatrix_x4(dO_i, 16 * np, 16 * kk, fm::x4_src_b, false);
          mma(sT[2 * np], ka, b_tile(qb, 0));
          mma(sT[2 * np + 1], ka, b_tile(qb, 1));
          mma(dpT[2 * np], va, b_tile(ob, 0));
          mma(dpT[2 * np + 1], va, b_tile(ob, 1));
        }
      }
      // P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D), at the lane's query columns
      for (int nt = 0; nt < Br / 8; ++nt)
        for (int lane = 0; lane < kLanes; ++lane)
          for (int c = 0; c < 2; ++c) {
            const int qi = q0 + 8 * nt + fm::frag_c(lane, c).col;
            const float lse2 = qi < S ? a.lse[bh * S + qi] * kLog2e : -INFINITY;
            const float D_q = qi < S ? a.D[bh * S + qi] : 0.0f;
            for (int e = c; e < 4; e += 2) {
              const int kj = k0 + 16 * warp + fm::frag_c(lane, e).row;
              const bool valid = kj < S && qi < S && (!a.causal || kj <= qi) && lse2 != -INFINITY;
              const float p = valid ? std::exp2(std::fma(sT[nt][lane][e], scale_log2, -lse2)) : 0.0f;
              sT[nt][lane][e] = p;
              dpT[nt][lane][e] = p * (dpT[nt][lane][e] - D_q);
            }
          }
      // dV_j += P^T dO_i, dK_j += dS^T Q_i
      for (int kk = 0; kk < Br / 16; ++kk) {
        const FragA pa = a_from_c(sT[2 * kk], sT[2 * kk + 1]), dsa = a_from_c(dpT[2 * kk], dpT[2 * kk + 1]);
        for (int np = 0; np < Hd / 16; ++np) {
          const Regs<8> ob = ldmatrix_x4(dO_i, 16 * kk, 16 * np, fm::x4_src_a, true);
          const Regs<8> qb = ldmatrix_x4(Q_i, 16 * kk, 16 * np, fm::x4_src_a, true);
          mma(dv_acc[warp][2 * np], pa, b_tile(ob, 0));
          mma(dv_acc[warp][2 * np + 1], pa, b_tile(ob, 1));
          mma(dk_acc[warp][2 * np], dsa, b_tile(qb, 0));
          mma(dk_acc[warp][2 * np + 1], dsa, b_tile(qb, 1));
        }
      }
      // dS_i [Br][Bc] = (dS^T)^T into shared memory
      for (int nt = 0; nt < Br / 8; ++nt)
        for (int lane = 0; lane < kLanes; ++lane)
          for (int e = 0; e < 4; ++e) {
            const fm::RowCol rc = fm::frag_c(lane, e);
            dS_i.at(8 * nt + rc.col, 16 * warp + rc.row) = dpT[nt][lane][e];
          }
    }
    for (int warp = 0; warp < fm::kWarps; ++warp) {  // after the barrier: dQ_i += scale dS_i K_j
      const int row_blocks = Br / 16, tiles = Hd / 8 / (fm::kWarps / row_blocks);
      const int rb = warp % row_blocks, n_first = (warp / row_blocks) * tiles;
      std::vector<FragA> ds_frag(Bc / 16);
      for (int kk = 0; kk < Bc / 16; ++kk) ds_frag[kk] = ldmatrix_x4(dS_i, 16 * rb, 16 * kk, fm::x4_src_a, false);
      for (int np = 0; np < tiles / 2; ++np) {
        const int n0 = n_first + 2 * np;
        FragC acc[2] = {};
        for (int kk = 0; kk < Bc / 16; ++kk) {
          const Regs<8> kb = ldmatrix_x4(K_j, 16 * kk, 8 * n0, fm::x4_src_a, true);
          mma(acc[0], ds_frag[kk], b_tile(kb, 0));
          mma(acc[1], ds_frag[kk], b_tile(kb, 1));
        }
        for (int t2 = 0; t2 < 2; ++t2)
          for (int lane = 0; lane < kLanes; ++lane)
            for (int e = 0; e < 4; ++e) {
              const fm::RowCol rc = fm::frag_c(lane, e);
              const int qi = q0 + 16 * rb + rc.row;
              if (qi < S) a.dq[(bh * S + qi) * Hd + 8 * (n0 + t2) + rc.col] += a.scale * acc[t2][lane][e];  // atomicAdd
            }
      }
    }
  }
  PerRow dk_mul, dv_mul;
  for (int lane = 0; lane < kLanes; ++lane) {
    dk_mul[lane] = {a.scale, a.scale};  // dK = scale sum dS^T Q, the scale applied once
    dv_mul[lane] = {1.0f, 1.0f};
  }
  for (int warp = 0; warp < fm::kWarps; ++warp) {
    store_rows(dk_acc[warp], dk_mul, K_j, 16 * warp, a.dk + kv_off, k0 + 16 * warp, S);
    store_rows(dv_acc[warp], dv_mul, V_j, 16 * warp, a.dv + kv_off, k0 + 16 * warp, S);
  }
}

// The launcher's three steps: D = rowsum(dO O), the blocks, (dQ's fp32 -> dtype: nothing in fp32).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> emulate_backward(
    const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& lse, double scale, bool causal) {
  const int B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3), nKV = k.size(1);
  auto D = (dout * out).sum(/*dim=*/-1).contiguous();  // [B, nH, S]
  auto dq = torch::zeros_like(q), dk = torch::zeros_like(k), dv = torch::zeros_like(v);
  const BwdArgs a{q.data_ptr<float>(),  k.data_ptr<float>(),  v.data_ptr<float>(),  dout.data_ptr<float>(),
                  lse.data_ptr<float>(), D.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                  dv.data_ptr<float>(),  nH,                  nH / nKV,             S,
                  Hd,                    float(scale),        causal};
  for (int b = 0; b < B; ++b)
    for (int kvh = 0; kvh < nKV; ++kvh)
      for (int j = 0; j < (S + fm::kBwdBc - 1) / fm::kBwdBc; ++j) backward_block(a, b, kvh, j);
  return {dq, dk, dv};
}

struct Shape {
  int64_t B, nH, nKV, S, Hd;
};
// {B, nH, nKV, S, Hd}: S = 1 (one key; nH 2 on one kv head), 77 (tails of every tile),
// 130 at Hd 128 (3 forward tiles, 5 backward query steps of 32; GQA 6 / 2), 64 (exactly
// one tile, no mask but the diagonal; nH = nKV).
const std::vector<Shape> kShapes = {{2, 2, 1, 1, 64}, {1, 4, 2, 77, 64}, {1, 6, 2, 130, 128}, {1, 2, 2, 64, 128}};

}  // namespace

// ---- 1. the tables ----------------------------------------------------------------------

TEST_CASE("flash mma rung: fragment tables = the PTX ISA's, each a bijection onto its tile", "[kernels]") {
  for (int lane = 0; lane < kLanes; ++lane) {
    const int g = lane / 4, t = lane % 4;  // groupID, threadID_in_group
    // The ISA's text, transcribed apart from attention_mma_fragments.cuh:
    for (int i = 0; i < 8; ++i) {  // A: row g for a0, a1, a4, a5, else g + 8; col 2t + (i & 1), + 8 for i >= 4
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      CHECK(same(fm::frag_a(lane, i), {row, col}));
    }
    for (int i = 0; i < 4; ++i) {  // B: row (k) 2t + (i & 1), + 8 for b2, b3; col (n) g
      CHECK(same(fm::frag_b(lane, i), {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), g}));
      // C: row g for c0, c1, g + 8 for c2, c3; col 2t + (i & 1)
      CHECK(same(fm::frag_c(lane, i), {i < 2 ? g : g + 8, t * 2 + (i & 1)}));
    }
  }
  // spot checks, read off the ISA's figures
  CHECK(same(fm::frag_c(0, 0), {0, 0}));
  CHECK(same(fm::frag_c(5, 1), {1, 3}));
  CHECK(same(fm::frag_c(5, 2), {9, 2}));
  CHECK(same(fm::frag_c(31, 3), {15, 7}));
  CHECK(same(fm::frag_a(6, 5), {1, 13}));
  CHECK(same(fm::frag_a(31, 7), {15, 15}));
  CHECK(same(fm::frag_b(6, 3), {13, 1}));
  // bijections: every element of the tile in exactly one (lane, element)
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 8; ++i) a.insert({fm::frag_a(lane, i).row, fm::frag_a(lane, i).col});
    for (int i = 0; i < 4; ++i) b.insert({fm::frag_b(lane, i).row, fm::frag_b(lane, i).col});
    for (int i = 0; i < 4; ++i) c.insert({fm::frag_c(lane, i).row, fm::frag_c(lane, i).col});
  }
  CHECK((a.size() == 256 && a.begin()->first == 0 && a.rbegin()->first == 15 && a.rbegin()->second == 15));
  CHECK((b.size() == 128 && b.rbegin()->first == 15 && b.rbegin()->second == 7));
  CHECK((c.size() == 128 && c.rbegin()->first == 15 && c.rbegin()->second == 7));
  // P from S: A element i of k-slice kk sits, in the same lane, where C tile 2kk + a_from_c_tile(i)
  // holds element a_from_c_elem(i) (8 columns further for the second tile)
  for (int lane = 0; lane < kLanes; ++lane)
    for (int i = 0; i < 8; ++i) {
      const fm::RowCol c_rc = fm::frag_c(lane, fm::a_from_c_elem(i));
      CHECK(same(fm::frag_a(lane, i), {c_rc.row, c_rc.col + 8 * fm::a_from_c_tile(i)}));
    }
  // ldmatrix: each lane gets 2 elements of every 8 x 8 matrix, 64 distinct; .trans transposes
  for (bool trans : {false, true}) {
    std::set<std::pair<int, int>> got;
    for (int lane = 0; lane < kLanes; ++lane)
      for (int j = 0; j < 2; ++j) {
        const fm::RowCol d = fm::ldmatrix_dst(lane, j, trans), n = fm::ldmatrix_dst(lane, j, !trans);
        got.insert({d.row, d.col});
        CHECK(same(d, {n.col, n.row}));
      }
    CHECK((got.size() == 64 && got.rbegin()->first == 7 && got.rbegin()->second == 7));
  }
  CHECK(same(fm::ldmatrix_dst(9, 1, false), {2, 3}));  // lane 9: row 9 / 4, cols 2 (9 % 4) + j
  // x4 addresses: the 32 lanes name the 32 (row, 8-column half) of the 16 x 16 block; lane l
  // names row l % 8 of its matrix l / 8, the matrices in the order the fragments want
  for (auto src : {fm::x4_src_a, fm::x4_src_b}) {
    std::set<std::pair<int, int>> rows;
    for (int lane = 0; lane < kLanes; ++lane) {
      rows.insert({src(lane).row, src(lane).col});
      CHECK(src(lane).row % 8 == lane % 8);
      CHECK(src(lane).col % 8 == 0);
    }
    CHECK(rows.size() == 32);
  }
  for (int m = 0; m < 4; ++m) {
    CHECK(same(fm::x4_src_a(8 * m), {8 * (m & 1), 8 * (m >> 1)}));  // 0 | 2 over 1 | 3
    CHECK(same(fm::x4_src_b(8 * m), {8 * (m >> 1), 8 * (m & 1)}));  // 0 | 1 over 2 | 3
  }
  // the quad shuffles: after xor 1 and xor 2, each lane holds the sum over lanes 4g..4g+3
  std::array<float, kLanes> ids;
  for (int lane = 0; lane < kLanes; ++lane) ids[lane] = float(lane);
  quad_allreduce(ids, [](float x, float y) { return x + y; });
  for (int lane = 0; lane < kLanes; ++lane) CHECK(ids[lane] == float(16 * (lane / 4) + 6));
}

TEST_CASE("flash mma rung: the swizzle is a permutation, and ldmatrix and cp.async hit 8 bank groups", "[kernels]") {
  for (int E : {64, 128}) {  // elements per row: Hd 64 / Bc 64, Hd 128
    INFO("row of " << E << " elements");
    const int rows = 64;
    std::set<int> offsets;
    for (int r = 0; r < rows; ++r)
      for (int col = 0; col < E; ++col) {
        offsets.insert(fm::swizzle(r, col, E));
        CHECK(fm::swizzle(r, col, E) == fm::swizzle(r, col & ~7, E) + (col & 7));  // chunks stay whole
        CHECK(fm::swizzle(r, col, E) / E == r);                                     // and in their row
      }
    CHECK((offsets.size() == size_t(rows * E) && *offsets.rbegin() == rows * E - 1));
    // 16-byte chunk -> one of 8 groups of 4 banks: (byte offset / 16) % 8
    auto bank_group = [&](int r, int col) { return (fm::swizzle(r, col, E) * 2 / 16) % 8; };
    for (int r0 = 0; r0 < rows; r0 += 8)
      for (int chunk = 0; chunk < E / 8; ++chunk) {
        std::set<int> ldsm, unswizzled;  // one ldmatrix 8 x 8 matrix: chunk `chunk` of 8 rows
        for (int x = 0; x < 8; ++x) {
          ldsm.insert(bank_group(r0 + x, 8 * chunk));
          unswizzled.insert(((r0 + x) * E * 2 + 16 * chunk) / 16 % 8);
        }
        CHECK(ldsm.size() == 8);
        CHECK(unswizzled.size() == 1);  // what the swizzle avoids: an 8-way conflict
      }
    for (int r = 0; r < rows; ++r)  // 8 threads' cp.async stores: 8 consecutive chunks of a row
      for (int c0 = 0; c0 < E / 8; c0 += 8) {
        std::set<int> st;
        for (int x = 0; x < 8; ++x) st.insert(bank_group(r, 8 * (c0 + x)));
        CHECK(st.size() == 8);
      }
  }
}

// ---- 2. one mma, its operands through ldmatrix ------------------------------------------

TEST_CASE("flash mma rung: ldmatrix + mma emulated from the tables = A B, and S's registers as P give (A B) C",
          "[kernels]") {
  torch::manual_seed(1);
  auto A = torch::randn({16, 16}, kF32), B1 = torch::randn({16, 16}, kF32), B2 = torch::randn({16, 16}, kF32);
  // Tiles of 16 rows x 64 slots, NaN wherever the blocks are not: a wrong address shows.
  Tile tA(16, 64), tB1t(16, 64), tB1(16, 64), tB2(16, 64);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      tA.at(r, 16 + c) = A[r][c].item<float>();     // A at columns 16..31
      tB1t.at(c, 32 + r) = B1[r][c].item<float>();  // B1^T ([n][k], as K_j) at columns 32..47
      tB1.at(r, 48 + c) = B1[r][c].item<float>();   // B1 ([k][n], as V_j) at columns 48..63
      tB2.at(r, c) = B2[r][c].item<float>();
    }
  const FragA a = ldmatrix_x4(tA, 0, 16, fm::x4_src_a, false);
  const Regs<8> kb = ldmatrix_x4(tB1t, 0, 32, fm::x4_src_b, false);  // K_j-style: B from [n][k]
  const Regs<8> vb = ldmatrix_x4(tB1, 0, 48, fm::x4_src_a, true);    // V_j-style: B from [k][n]
  CHECK(kb == vb);                                                   // the same B fragments
  FragC c[2] = {};
  mma(c[0], a, b_tile(kb, 0));
  mma(c[1], a, b_tile(kb, 1));
  auto gather = [](const FragC (&f)[2]) {  // two n-tiles of C fragments -> [16][16]
    auto out = torch::empty({16, 16}, kF32);
    for (int n = 0; n < 2; ++n)
      for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 4; ++i) out[fm::frag_c(lane, i).row][8 * n + fm::frag_c(lane, i).col] = f[n][lane][i];
    return out;
  };
  const auto AB = torch::matmul(A, B1);
  CHECK(rel_diff(gather(c), AB) < 1e-6);
  // C reused as an A fragment (P from S), times B2 through ldmatrix.trans
  const FragA p = a_from_c(c[0], c[1]);
  const Regs<8> b2 = ldmatrix_x4(tB2, 0, 0, fm::x4_src_a, true);
  FragC d[2] = {};
  mma(d[0], p, b_tile(b2, 0));
  mma(d[1], p, b_tile(b2, 1));
  CHECK(rel_diff(gather(d), torch::matmul(AB, B2)) < 1e-6);
}

// ---- 3. the kernels' warps, emulated --------------------------------------------------

TEST_CASE("flash mma rung: the forward's warps, emulated lane by lane, = reference::flash_attention_forward",
          "[kernels]") {
  for (const Shape& s : kShapes)
    for (bool causal : {true, false}) {
      INFO("B " << s.B << " nH " << s.nH << " nKV " << s.nKV << " S " << s.S << " Hd " << s.Hd << " causal " << causal);
      torch::manual_seed(s.S);
      auto q = 2 * torch::randn({s.B, s.nH, s.S, s.Hd}, kF32);  // peaky rows: the rescale matters
      auto k = torch::randn({s.B, s.nKV, s.S, s.Hd}, kF32), v = torch::randn({s.B, s.nKV, s.S, s.Hd}, kF32);
      const double scale = 1.0 / std::sqrt(double(s.Hd));
      auto [o, lse] = emulate_forward(q, k, v, scale, causal);
      auto [o_ref, lse_ref] = K::reference::flash_attention_forward(q.to(torch::kFloat64), k.to(torch::kFloat64),
                                                                    v.to(torch::kFloat64), scale, causal);
      CHECK(rel_diff(o, o_ref) < 1e-5);
      CHECK(rel_diff(lse, lse_ref) < 1e-5);
    }
}

TEST_CASE("flash mma rung: the backward's warps, emulated lane by lane, = reference::flash_attention_backward",
          "[kernels]") {
  for (const Shape& s : kShapes)
    for (bool causal : {true, false}) {
      INFO("B " << s.B << " nH " << s.nH << " nKV " << s.nKV << " S " << s.S << " Hd " << s.Hd << " causal " << causal);
      torch::manual_seed(s.S + 1);
      const auto f64 = torch::kFloat64;
      auto q = 2 * torch::randn({s.B, s.nH, s.S, s.Hd}, kF32), dout = torch::randn({s.B, s.nH, s.S, s.Hd}, kF32);
      auto k = torch::randn({s.B, s.nKV, s.S, s.Hd}, kF32), v = torch::randn({s.B, s.nKV, s.S, s.Hd}, kF32);
      const double scale = 1.0 / std::sqrt(double(s.Hd));
      auto [o_ref, lse_ref] = K::reference::flash_attention_forward(q.to(f64), k.to(f64), v.to(f64), scale, causal);
      auto [dq, dk, dv] = emulate_backward(dout, q, k, v, o_ref.to(torch::kFloat32).contiguous(),
                                           lse_ref.to(torch::kFloat32).contiguous(), scale, causal);
      auto [dq_ref, dk_ref, dv_ref] = K::reference::flash_attention_backward(dout.to(f64), q.to(f64), k.to(f64),
                                                                             v.to(f64), o_ref, lse_ref, scale, causal);
      CHECK(rel_diff(dv, dv_ref) < 1e-5);
      if (s.S == 1) {  // one key: dS = P (dP - D) = 0 exactly, so dq = dk = 0 up to rounding
        const double size = dv_ref.abs().max().item<double>();
        CHECK(dq.abs().max().item<double>() <= 1e-5 * size);
        CHECK(dk.abs().max().item<double>() <= 1e-5 * size);
      } else {
        CHECK(rel_diff(dq, dq_ref) < 1e-5);
        CHECK(rel_diff(dk, dk_ref) < 1e-5);
      }
    }
}

// ---- 4. on a GPU: the kernels --------------------------------------------------------

TEST_CASE("kernels on the GPU: the mma flash attention rung = the reference (GQA, causal, odd S)", "[kernels][gpu]") {
  if (!torch::cuda::is_available() || !K::fused_built()) {
    WARN("SKIPPED: no CUDA device (or a build without the CUDA kernels)");
    return;
  }
  const auto tolerance = [](torch::ScalarType t) { return t == torch::kHalf ? 5e-3 : 2e-2; };
  for (auto dt : {torch::kBFloat16, torch::kHalf})
    for (auto [s, nh, nkv, hd] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 2, 1, 64}, {77, 4, 2, 64},
                                  {130, 6, 2, 128}, {1024, 16, 4, 128}})
      for (bool causal : {true, false}) {
        INFO("flash mma " << c10::toString(dt) << " S " << s << " nH " << nh << " nKV " << nkv << " Hd " << hd
                          << " causal " << causal);
        const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dt);
        auto q = torch::randn({2, nh, s, hd}, opts), k = torch::randn({2, nkv, s, hd}, opts),
             v = torch::randn({2, nkv, s, hd}, opts);
        const double scale = 1.0 / std::sqrt(double(hd));
        auto [o, lse] = K::cuda::flash_attention_mma_forward(q, k, v, scale, causal);
        auto [o_ref, lse_ref] = K::reference::flash_attention_forward(q, k, v, scale, causal);
        CHECK(rel_diff(o, o_ref) < tolerance(dt));
        CHECK(rel_diff(lse, lse_ref) < 1e-3);
        auto dout = torch::randn_like(o);
        auto [dq, dk, dv] = K::cuda::flash_attention_mma_backward(dout, q, k, v, o, lse, scale, causal);
        auto [dq_ref, dk_ref, dv_ref] =
            K::reference::flash_attention_backward(dout, q, k, v, o_ref, lse_ref, scale, causal);
        CHECK(rel_diff(dv, dv_ref) < 2 * tolerance(dt));  // P and dS rounded to 16 bits before their products
        if (s == 1) {
          // One key: dS = P (dP - D) is exactly 0, and so are dq and dk; both sides hold rounding
          // noise, so bound the kernel's against the gradients' own size, |dv|.
          const double size = dv_ref.abs().max().item<double>();
          CHECK(dq.abs().max().item<double>() <= 1e-2 * size);
          CHECK(dk.abs().max().item<double>() <= 1e-2 * size);
        } else {
          CHECK(rel_diff(dq, dq_ref) < 2 * tolerance(dt));
          CHECK(rel_diff(dk, dk_ref) < 2 * tolerance(dt));
        }
      }
}
