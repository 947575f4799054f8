// kernels/attention_mma_backward.cu — the mma rung's backward: FlashAttention-2's
// Algorithm 2 with the scores, their gradients and dK_j, dV_j in registers. The picture,
// the work split and the measurements: kernels/attention_mma.cu's header; the pieces
// both directions share: attention_mma.cuh; the host side every rung shares (checks,
// buffers, the D pre-kernel, dQ's conversion): attention_launch.cuh.
//
// reference: reference::flash_attention_backward (kernels/reference.cpp, kernels/ops.h)
// test:      build/tests/unit_tests "[kernels]"   (tests/unit/test_flash_mma.cpp)
#include "kernels/attention_mma.cuh"

namespace picotron::kernels::cuda {
namespace {


// ---- backward: Algorithm 2 (D_i and dQ's conversion: attention_launch.cuh) -----------------
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

}  // namespace

// Backward: D; grid (key tile j, b * nKV + kv) x 128 threads, BwdLayoutMma<Hd>::bytes of
// shared; dQ fp32 -> dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_mma_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, double scale, bool causal) {
  const int64_t nKV = check_backward(dout, q, k, v, out, lse);
  check_scale(scale);
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2), Hd = q.size(3);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  BackwardBuffers b = backward_buffers(q, k, v);
  if (q.numel() == 0) return {b.dq, b.dk, b.dv};
  dispatch(q.scalar_type(), Hd, [&](auto t, auto hd) {
    using T = decltype(t);
    constexpr int kHd = decltype(hd)::value;
    launch_rowsum_dot<T, kHd>(dout, out, b.D, stream);  // 1. D_i = rowsum(dO_i * O_i)
    // 2. dK_j, dV_j per block (key tile j, b * nKV + kv head); dQ by atomics
    constexpr int bytes = BwdLayoutMma<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_mma_backward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid(static_cast<unsigned>((S + mma::kBwdBc - 1) / mma::kBwdBc), static_cast<unsigned>(B * nKV));
    flash_mma_backward_kernel<T, kHd><<<grid, mma::kThreads, bytes, stream>>>(
        static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
        static_cast<const T*>(v.data_ptr()), static_cast<const T*>(dout.data_ptr()), lse.data_ptr<float>(),
        b.D.data_ptr<float>(), b.dq_accum.data_ptr<float>(), static_cast<T*>(b.dk.data_ptr()),
        static_cast<T*>(b.dv.data_ptr()), static_cast<int>(nH), static_cast<int>(nH / nKV), static_cast<int>(S),
        static_cast<float>(scale), causal);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    launch_to_dtype<T>(b.dq_accum, b.dq, stream);  // 3. dQ: fp32 -> q's dtype
  });
  return {b.dq, b.dk, b.dv};
}

}  // namespace picotron::kernels::cuda
