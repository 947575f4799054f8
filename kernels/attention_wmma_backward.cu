// kernels/attention_wmma_backward.cu — rung 1's backward: FlashAttention-2's (arXiv 2307.08691,
// Algorithm 2): dQ, dK, dV from dO, recomputing the scores tile by tile from Q, K and the
// forward's lse instead of keeping the S x S probabilities. The tiling, the memory and
// FLOP arithmetic: kernels/attention_wmma.cu's header. Shared pieces: attention_wmma.cuh
// (rung 1's tiles and GEMM), attention_launch.cuh (every rung's checks and buffers).
//
//   D_i  = rowsum(dO_i * O_i)                                (a small kernel first)
//   per key tile j (one block per (j, b * nKV + kv)), for every query head of the group
//   and every query tile i at or below the diagonal:
//     P_ij = exp(scale Q_i K_j^T - lse_i);  dV_j += P_ij^T dO_i;  dP_ij = dO_i V_j^T
//     dS_ij = P_ij * (dP_ij - D_i);  dK_j += scale dS_ij^T Q_i;  dQ_i += scale dS_ij K_j (atomics)
//
// reference: kernels/reference.cpp, reference::flash_attention_backward (kernels/ops.h)
// test:      build/tests/unit_tests "[kernels]"      bench: build/bench/bench_kernels
// alone:     build/kernels/attention_rung 1
#include "kernels/attention_wmma.cuh"

namespace picotron::kernels::cuda {
namespace {

// ---- backward: Algorithm 2 (D_i and dQ's conversion: attention_launch.cuh) -----------------
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

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                                        const at::Tensor& k, const at::Tensor& v,
                                                                        const at::Tensor& out, const at::Tensor& lse,
                                                                        double scale, bool causal) {
  const int64_t nKV = check_backward(dout, q, k, v, out, lse);
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
    constexpr int bytes = BwdSmem<kHd>::bytes;
    C10_CUDA_CHECK(cudaFuncSetAttribute(flash_backward_kernel<T, kHd>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    const dim3 grid(static_cast<unsigned>((S + kBc - 1) / kBc), static_cast<unsigned>(B * nKV));  // (j, b * nKV + kv)
    flash_backward_kernel<T, kHd><<<grid, kThreads, bytes, stream>>>(
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
