// kernels/attention_launch.cuh — the host side every rung of the attention ladder shares
// (kernels/README.md, "The ladder"): the contract's checks (q [B, nH, S, Hd], k, v
// [B, nKV, S, Hd], bf16 or fp16, contiguous, Hd 64 or 128), the dtype / head-dim dispatch,
// and the backward's host side: its checks, its buffers, the D pre-kernel and dQ's
// conversion. The rungs: attention_naive.cu (0), attention_wmma.cu (1), attention_mma.cu (2);
// each launcher calls these first, then its own kernels.
#pragma once

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

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

namespace picotron::kernels::cuda {
namespace {  // (each .cu including this gets its own copy: internal linkage)

// ---- the forward's contract ---------------------------------------------------------
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

// ---- the backward's host side: the same for every rung ---------------------------------
// FlashAttention-2's backward (Algorithm 2) needs D_i = rowsum(dO_i * O_i) before its main
// kernel, and its dQ, summed by atomics over the key tiles, in fp32 until the end.

// Checks dout and out against q, and lse [B, nH, S] fp32 (q, k, v: check_qkv); returns nKV.
int64_t check_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& out, const at::Tensor& lse) {
  const int64_t nKV = check_qkv(q, k, v);
  check_input(dout, "dout", q);
  check_input(out, "out", q);
  TORCH_CHECK(dout.sizes() == q.sizes(), "flash_attention: dout ", dout.sizes(), " must have q's shape ", q.sizes());
  TORCH_CHECK(out.sizes() == q.sizes(), "flash_attention: out ", out.sizes(), " must have q's shape ", q.sizes());
  const int64_t B = q.size(0), nH = q.size(1), S = q.size(2);
  TORCH_CHECK(lse.is_cuda() && lse.device() == q.device(), "flash_attention: lse must be on ", q.device(),
              ", got ", lse.device());
  TORCH_CHECK(lse.scalar_type() == at::kFloat, "flash_attention: lse must be fp32, got ", lse.scalar_type());
  TORCH_CHECK(lse.is_contiguous() && lse.dim() == 3 && lse.size(0) == B && lse.size(1) == nH && lse.size(2) == S,
              "flash_attention: lse must be contiguous [B, nH, S] = [", B, ", ", nH, ", ", S, "], got ",
              lse.sizes());
  return nKV;
}

struct BackwardBuffers {
  at::Tensor dq, dk, dv;  // [B, nH, S, Hd], [B, nKV, S, Hd] twice: the results, in q's dtype
  at::Tensor D;           // [B, nH, S] fp32: rowsum(dO * O)
  at::Tensor dq_accum;    // [B, nH, S, Hd] fp32 zeros: where dQ's atomics land (fp32_dq)
};
BackwardBuffers backward_buffers(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool fp32_dq = true) {
  BackwardBuffers b{at::empty(q.sizes(), q.options()), at::empty(k.sizes(), k.options()),
                    at::empty(v.sizes(), v.options()), {}, {}};
  if (q.numel() == 0) return b;  // nothing to compute
  b.D = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
  if (fp32_dq) b.dq_accum = at::zeros(q.sizes(), q.options().dtype(at::kFloat));
  return b;
}

// D_i = rowsum(dO_i * O_i) in fp32: one warp per row of [B * nH * S].
template <typename T, int Hd>
__global__ void rowsum_dot_kernel(const T* __restrict__ dout, const T* __restrict__ out, float* __restrict__ D,
                                  int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float sum = 0.0f;
  for (int c = lane; c < Hd; c += 32) sum += to_float(dout[r * Hd + c]) * to_float(out[r * Hd + c]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) D[r] = sum;
}

// dQ: the fp32 accumulator -> q's dtype.
template <typename T>
__global__ void to_dtype_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t n) {
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[idx] = from_float<T>(src[idx]);
}

// Step 1 of a backward: D from dout and out, 8 rows (warps) per block of 256 threads.
template <typename T, int Hd>
void launch_rowsum_dot(const at::Tensor& dout, const at::Tensor& out, at::Tensor& D, cudaStream_t stream) {
  const int64_t rows = D.numel();  // B * nH * S
  rowsum_dot_kernel<T, Hd><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
      static_cast<const T*>(dout.data_ptr()), static_cast<const T*>(out.data_ptr()), D.data_ptr<float>(), rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The last step: dQ's fp32 accumulator -> dq in q's dtype.
template <typename T>
void launch_to_dtype(const at::Tensor& dq_accum, at::Tensor& dq, cudaStream_t stream) {
  const int64_t n = dq.numel();
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65536));
  to_dtype_kernel<T><<<blocks, 256, 0, stream>>>(dq_accum.data_ptr<float>(), static_cast<T*>(dq.data_ptr()), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace
}  // namespace picotron::kernels::cuda
