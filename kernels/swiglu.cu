// kernels/swiglu.cu — the SwiGLU gate of the LLaMA MLP (Shazeer, arXiv 2002.05202, section 2),
// forward and backward, elementwise, all math in fp32.
//
//   forward    sig = 1 / (1 + exp(-g)),  silu(g) = g * sig,  out = silu(g) * u
//   backward   d silu / dg = sig + g * sig * (1 - sig) = sig * (1 + g * (1 - sig))
//              dgate = dy * u * sig * (1 + g * (1 - sig)),   dup = dy * silu(g)
//
// Memory traffic per element (bf16, 2 bytes): the ATen forward F::silu(g) * u reads g and
// writes silu(g) (2 + 2), then reads it and u and writes out (4 + 2) = 10 B in 2 launches,
// and autograd keeps silu(g) alive for the backward (2 B/element of activation memory).
// This kernel reads g, u and writes out: 6 B. Backward: autograd runs dy * u (4 + 2),
// dy * silu(g) (4 + 2), silu_backward (4 + 2) = 18 B in 3 launches; this kernel reads
// dy, g, u and writes dgate, dup: 10 B in one, recomputing sig from g (free: memory-bound).
//
// Test: build/tests/unit_tests "[kernels]"      Bench: build/bench/bench_kernels
//
// reference: kernels/reference.cpp, reference::swiglu_forward / swiglu_backward,
// same signatures.
#include <algorithm>
#include <cstdint>

#include <ATen/Dispatch_v2.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

namespace picotron::kernels::cuda {
namespace {

// Vec, load, store: 16-byte accesses (kernels/vec.cuh).

// expf, not __expf: the kernel is memory-bound, so the accurate exp costs nothing.
// For g < -88, expf(-g) is inf and sig is 0: no NaN.
__device__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__device__ float swiglu_forward_one(float g, float u) { return g * sigmoid(g) * u; }

__device__ void swiglu_backward_one(float dy, float g, float u, float& dgate, float& dup) {
  const float sig = sigmoid(g);
  dgate = dy * u * sig * (1.0f + g * (1.0f - sig));
  dup = dy * g * sig;
}

// gate, up, out [n] (any shape, flattened). Grid-stride over chunks of kVec elements,
// then the last n % kVec elements one per thread.
template <typename T, int kVec>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      int64_t n) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t n_vec = n / kVec;
  for (int64_t i = first; i < n_vec; i += stride) {
    const auto gv = load<T, kVec>(gate + i * kVec), uv = load<T, kVec>(up + i * kVec);
    Vec<T, kVec> ov;
#pragma unroll
    for (int k = 0; k < kVec; ++k) ov.v[k] = T(swiglu_forward_one(float(gv.v[k]), float(uv.v[k])));
    store<T, kVec>(out + i * kVec, ov);
  }
  for (int64_t e = n_vec * kVec + first; e < n; e += stride)  // the tail, fewer than kVec
    out[e] = T(swiglu_forward_one(float(gate[e]), float(up[e])));
}

// dy, gate, up, dgate, dup [n]. Same walk as the forward.
template <typename T, int kVec>
__global__ void swiglu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ dgate, T* __restrict__ dup,
                                       int64_t n) {
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t n_vec = n / kVec;
  for (int64_t i = first; i < n_vec; i += stride) {
    const auto dv = load<T, kVec>(dy + i * kVec), gv = load<T, kVec>(gate + i * kVec),
               uv = load<T, kVec>(up + i * kVec);
    Vec<T, kVec> dgv, duv;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float dg, du;
      swiglu_backward_one(float(dv.v[k]), float(gv.v[k]), float(uv.v[k]), dg, du);
      dgv.v[k] = T(dg), duv.v[k] = T(du);
    }
    store<T, kVec>(dgate + i * kVec, dgv);
    store<T, kVec>(dup + i * kVec, duv);
  }
  for (int64_t e = n_vec * kVec + first; e < n; e += stride) {  // the tail, fewer than kVec
    float dg, du;
    swiglu_backward_one(float(dy[e]), float(gate[e]), float(up[e]), dg, du);
    dgate[e] = T(dg), dup[e] = T(du);
  }
}

constexpr int kBlockThreads = 256;
// Enough blocks for one chunk per thread, capped: the grid-stride loop covers the rest
// (4096 blocks of 256 = about 8 waves of resident threads on an H100).
unsigned blocks_for(int64_t n_chunks) {
  return unsigned(std::clamp<int64_t>((n_chunks + kBlockThreads - 1) / kBlockThreads, 1, 4096));
}

void check_swiglu_input(const at::Tensor& t, const char* name, const at::Tensor& gate) {
  TORCH_CHECK(t.is_cuda(), "swiglu: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == gate.device(), "swiglu: ", name, " is on ", t.device(), ", gate on ", gate.device());
  TORCH_CHECK(t.scalar_type() == gate.scalar_type(), "swiglu: ", name, " is ", t.scalar_type(), ", gate is ",
              gate.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "swiglu: ", name, " must be contiguous, got strides ", t.strides());
  TORCH_CHECK(t.sizes() == gate.sizes(), "swiglu: ", name, " is ", t.sizes(), ", gate is ", gate.sizes());
}

void check_dtype(const at::Tensor& gate) {
  const auto d = gate.scalar_type();
  TORCH_CHECK(d == at::kBFloat16 || d == at::kHalf || d == at::kFloat,
              "swiglu: gate must be bf16, fp16 or fp32, got ", d);
}

}  // namespace

at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up) {
  check_dtype(gate);
  check_swiglu_input(gate, "gate", gate);
  check_swiglu_input(up, "up", gate);
  c10::cuda::CUDAGuard guard(gate.device());
  auto out = at::empty(gate.sizes(), gate.options());  // [..., I]
  const int64_t n = gate.numel();
  if (n == 0) return out;
  const auto stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_V2(gate.scalar_type(), "swiglu_forward", AT_WRAP([&] {
    constexpr int kVec = 16 / sizeof(scalar_t);  // 8 bf16/fp16, 4 fp32
    const auto* g_ptr = gate.const_data_ptr<scalar_t>();
    const auto* u_ptr = up.const_data_ptr<scalar_t>();
    auto* out_ptr = out.mutable_data_ptr<scalar_t>();
    if (aligned16(g_ptr) && aligned16(u_ptr) && aligned16(out_ptr))
      swiglu_forward_kernel<scalar_t, kVec>
          <<<blocks_for(n / kVec), kBlockThreads, 0, stream>>>(g_ptr, u_ptr, out_ptr, n);
    else
      swiglu_forward_kernel<scalar_t, 1><<<blocks_for(n), kBlockThreads, 0, stream>>>(g_ptr, u_ptr, out_ptr, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }), at::kFloat, at::kBFloat16, at::kHalf);
  return out;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& gate,
                                                   const at::Tensor& up) {
  check_dtype(gate);
  check_swiglu_input(gate, "gate", gate);
  check_swiglu_input(up, "up", gate);
  check_swiglu_input(dy, "dy", gate);
  c10::cuda::CUDAGuard guard(gate.device());
  auto dgate = at::empty(gate.sizes(), gate.options());  // [..., I]
  auto dup = at::empty(up.sizes(), up.options());        // [..., I]
  const int64_t n = gate.numel();
  if (n == 0) return {dgate, dup};
  const auto stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_V2(gate.scalar_type(), "swiglu_backward", AT_WRAP([&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const auto* dy_ptr = dy.const_data_ptr<scalar_t>();
    const auto* g_ptr = gate.const_data_ptr<scalar_t>();
    const auto* u_ptr = up.const_data_ptr<scalar_t>();
    auto* dg_ptr = dgate.mutable_data_ptr<scalar_t>();
    auto* du_ptr = dup.mutable_data_ptr<scalar_t>();
    if (aligned16(dy_ptr) && aligned16(g_ptr) && aligned16(u_ptr) && aligned16(dg_ptr) && aligned16(du_ptr))
      swiglu_backward_kernel<scalar_t, kVec>
          <<<blocks_for(n / kVec), kBlockThreads, 0, stream>>>(dy_ptr, g_ptr, u_ptr, dg_ptr, du_ptr, n);
    else
      swiglu_backward_kernel<scalar_t, 1>
          <<<blocks_for(n), kBlockThreads, 0, stream>>>(dy_ptr, g_ptr, u_ptr, dg_ptr, du_ptr, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }), at::kFloat, at::kBFloat16, at::kHalf);
  return {dgate, dup};
}

}  // namespace picotron::kernels::cuda
