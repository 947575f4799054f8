// kernels/cross_entropy.cu — fused softmax cross-entropy: per-row loss and dlogits, one kernel.
//
// For row n of the logits z [N, V] with target t (ignore_index -100 gives loss 0, dlogits 0):
//   m = max_j z_j,   d = sum_j exp(z_j - m)                   pass 1: read the row once
//   loss_n    = log(d) + m - z_t                               (= -log softmax(z)_t)
//   dlogits_n = (exp(z - m) / d - onehot(t)) * dlogits_scale   pass 2: read it again, write
// Online softmax (Milakov & Gimelshein, arXiv 1805.02867): each thread keeps a running
// state (m, d) over the logits it has seen; a new logit z > m rescales d by exp(m - z).
// Two states merge as  m = max(m_a, m_b),  d = d_a exp(m_a - m) + d_b exp(m_b - m)
// (both still empty: m_a = m_b = -inf, where exp(-inf - -inf) would be NaN: skipped).
//
// Memory traffic per logit, bf16 logits (2 bytes), reads + writes:
//   ATen  z.float() 2+4, log_softmax 4+4, nll_loss ~0; backward: nll_loss_backward writes
//         a zero fp32 [N, V] 4, log_softmax_backward 4+4+4, grad back to bf16 4+2 = 36 bytes
//   here  pass 1 reads the row (2); pass 2 re-reads it and writes dlogits (2+2)  =  6 bytes
// and no fp32 [N, V] buffer at all (ATen holds 2-3 of them: 8-12 bytes per logit). Llama-3
// vocabulary V = 128256, N = 8192 rows: 1.05e9 logits, 37.8 GB -> 6.3 GB (loss only: 2.1 GB).
// in_place writes dlogits over the logits (each row is read before it is overwritten).
//
// Test: build/tests/unit_tests "[kernels]"      Bench: build/bench/bench_kernels
//
// reference: kernels/reference.cpp, reference::cross_entropy_forward, same signature
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/macros/Macros.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

namespace picotron::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;  // one block per row: 16 warps stride over the V logits
constexpr int64_t kIgnoreIndex = -100;


// 16 bytes of T (8 bf16/fp16 or 4 fp32): one vector load or store.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

// A row [V] cut so that the middle is whole 16-byte packs, whatever V and the row's address:
// [0, head) scalar | nvec packs from head | [tail, V) scalar. The row is sizeof(T)-aligned.
struct RowSplit {
  int64_t head, nvec, tail;
};
template <typename T>
__device__ RowSplit split_row(const T* row, int64_t V) {
  const auto misaligned = reinterpret_cast<uintptr_t>(row) % 16;  // bytes past a 16-byte boundary
  const int64_t head = misaligned == 0 ? 0 : min(V, int64_t((16 - misaligned) / sizeof(T)));
  const int64_t nvec = (V - head) / Pack<T>::kN;
  return {head, nvec, head + nvec * Pack<T>::kN};
}

// Running softmax state over the logits seen so far: max m, sum d = sum exp(z - m).
struct Online {
  float m, d;
};
__device__ __forceinline__ void add(Online& s, float z) {
  if (z > s.m) {  // a new max: rescale the sum (the first logit: d = 0 * exp(-inf) + 1)
    s.d = s.d * expf(s.m - z) + 1.0f;
    s.m = z;
  } else if (z != -INFINITY) {  // -inf adds exp(-inf) = 0; skipping it avoids -inf - -inf
    s.d += expf(z - s.m);       // a NaN logit lands here and makes d NaN, as in ATen
  }
}
__device__ __forceinline__ void merge(Online& a, const Online& b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) {  // both empty (d is 0, or NaN that must survive): no exp(-inf - -inf)
    a.d += b.d;
    return;
  }
  a.d = a.d * expf(a.m - m) + b.d * expf(b.m - m);
  a.m = m;
}
// Merges the states of all kRowThreads threads; every thread gets the result. Full-warp shuffle
// masks are right because every thread of the block calls this (kRowThreads is whole warps).
__device__ Online block_merge(Online s) {
  __shared__ Online warp_state[kRowThreads / 32];
  __shared__ Online block_state;
  for (int offset = 16; offset > 0; offset /= 2)
    merge(s, Online{__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.d, offset)});
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_state[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < kRowThreads / 32 ? warp_state[lane] : Online{-INFINITY, 0.0f};
    for (int offset = 16; offset > 0; offset /= 2)
      merge(s, Online{__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.d, offset)});
    if (lane == 0) block_state = s;
  }
  __syncthreads();
  return block_state;
}

// Block n owns row n. logits, dlogits [N, V] (dlogits may be nullptr: loss only, or equal to
// logits: in place); targets [N] int64; loss [N] fp32. dlogits_vec: dlogits has the same
// address mod 16 as logits, so pass 2 can store the packs it loads.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    cross_entropy_kernel(const T* logits, const int64_t* targets, float* loss, T* dlogits, int64_t V,
                         float dlogits_scale, bool dlogits_vec) {
  const int64_t n = blockIdx.x;
  const T* z = logits + n * V;                           // [V] this row
  T* dz = dlogits == nullptr ? nullptr : dlogits + n * V;  // [V]
  const int64_t t = targets[n];
  if (t == kIgnoreIndex) {  // the whole block leaves together: t is the same for all threads
    if (threadIdx.x == 0) loss[n] = 0.0f;
    if (dz == nullptr) return;
    const T zero = from_float<T>(0.0f);
    Pack<T> zeros;
#pragma unroll
    for (int k = 0; k < Pack<T>::kN; ++k) zeros.v[k] = zero;
    const RowSplit w = split_row(dz, V);
    for (int64_t j = threadIdx.x; j < w.head; j += kRowThreads) dz[j] = zero;
    for (int64_t i = threadIdx.x; i < w.nvec; i += kRowThreads) reinterpret_cast<Pack<T>*>(dz + w.head)[i] = zeros;
    for (int64_t j = w.tail + threadIdx.x; j < V; j += kRowThreads) dz[j] = zero;
    return;
  }
  CUDA_KERNEL_ASSERT(t >= 0 && t < V);  // a bad target stops the run (cudaErrorAssert)
  const float z_t = to_float(z[t]);     // read before block_merge's barrier: pass 2 may overwrite it

  // Pass 1: the online softmax state of the row, reading each logit once.
  const RowSplit r = split_row(z, V);
  const Pack<T>* z_packs = reinterpret_cast<const Pack<T>*>(z + r.head);  // [nvec] 16-byte aligned
  Online s{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < r.head; j += kRowThreads) add(s, to_float(z[j]));
  for (int64_t i = threadIdx.x; i < r.nvec; i += kRowThreads) {
    const Pack<T> p = z_packs[i];
#pragma unroll
    for (int k = 0; k < Pack<T>::kN; ++k) add(s, to_float(p.v[k]));
  }
  for (int64_t j = r.tail + threadIdx.x; j < V; j += kRowThreads) add(s, to_float(z[j]));
  s = block_merge(s);  // (m, d) of the whole row, in every thread
  if (threadIdx.x == 0) loss[n] = logf(s.d) + s.m - z_t;
  if (dz == nullptr) return;

  // Pass 2: dlogits = (softmax - onehot) * scale. In place is safe: each thread reads a
  // logit, then writes the same element; nobody reads another thread's elements here.
  const float inv_d = 1.0f / s.d;
  auto grad = [&](int64_t j, float zj) {
    return from_float<T>((expf(zj - s.m) * inv_d - (j == t ? 1.0f : 0.0f)) * dlogits_scale);
  };
  const RowSplit w = dlogits_vec ? r : RowSplit{0, 0, 0};  // else: every element scalar
  Pack<T>* dz_packs = reinterpret_cast<Pack<T>*>(dz + w.head);
  for (int64_t j = threadIdx.x; j < w.head; j += kRowThreads) dz[j] = grad(j, to_float(z[j]));
  for (int64_t i = threadIdx.x; i < w.nvec; i += kRowThreads) {
    const Pack<T> p = z_packs[i];
    Pack<T> q;
#pragma unroll
    for (int k = 0; k < Pack<T>::kN; ++k) q.v[k] = grad(w.head + i * Pack<T>::kN + k, to_float(p.v[k]));
    dz_packs[i] = q;
  }
  for (int64_t j = w.tail + threadIdx.x; j < V; j += kRowThreads) dz[j] = grad(j, to_float(z[j]));
}

template <typename T>
void launch(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& loss, const at::Tensor& dlogits,
            double dlogits_scale) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const T* z = static_cast<const T*>(logits.const_data_ptr());
  T* dz = dlogits.defined() ? static_cast<T*>(dlogits.data_ptr()) : nullptr;
  // Rows of logits and dlogits move by the same n * V * sizeof(T): one check covers all rows.
  const bool dlogits_vec = dz != nullptr && (reinterpret_cast<uintptr_t>(dz) - reinterpret_cast<uintptr_t>(z)) % 16 == 0;
  cross_entropy_kernel<T><<<static_cast<unsigned>(N), kRowThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      z, targets.const_data_ptr<int64_t>(), loss.data_ptr<float>(), dz, V, static_cast<float>(dlogits_scale),
      dlogits_vec);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

// logits [N, V] fp, targets [N] int64 -> (loss [N] fp32, dlogits [N, V] in the logits' dtype;
// undefined when dlogits_scale == 0; the logits tensor itself when in_place).
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets,
                                                         double dlogits_scale, bool in_place) {
  TORCH_CHECK(logits.is_cuda(), "cross_entropy_forward: logits must be a CUDA tensor, got ", logits.device());
  TORCH_CHECK(targets.device() == logits.device(), "cross_entropy_forward: targets are on ", targets.device(),
              ", logits on ", logits.device());
  TORCH_CHECK(logits.dim() == 2, "cross_entropy_forward: logits must be [N, V], got ", logits.sizes());
  TORCH_CHECK(logits.is_contiguous(), "cross_entropy_forward: logits [", logits.size(0), ", ", logits.size(1),
              "] must be contiguous, strides ", logits.strides());
  const auto dtype = logits.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf || dtype == at::kFloat,
              "cross_entropy_forward: logits must be bf16, fp16 or fp32, got ", dtype);
  const int64_t N = logits.size(0), V = logits.size(1);
  TORCH_CHECK(V > 0, "cross_entropy_forward: the vocabulary V must be > 0, got logits ", logits.sizes());
  TORCH_CHECK(N <= int64_t(INT32_MAX), "cross_entropy_forward: N = ", N, " rows, at most ", INT32_MAX,
              " (one block each)");
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy_forward: targets must be int64, got ",
              targets.scalar_type());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == N, "cross_entropy_forward: targets must be [N] = [", N,
              "], got ", targets.sizes());
  TORCH_CHECK(targets.is_contiguous(), "cross_entropy_forward: targets [", N, "] must be contiguous, stride ",
              targets.strides());

  c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor loss = at::empty({N}, logits.options().dtype(at::kFloat));  // [N]
  at::Tensor dlogits;                                                    // [N, V] or undefined
  if (dlogits_scale != 0) dlogits = in_place ? logits : at::empty(logits.sizes(), logits.options());
  if (N == 0) return {loss, dlogits};
  switch (dtype) {
    case at::kBFloat16: launch<__nv_bfloat16>(logits, targets, loss, dlogits, dlogits_scale); break;
    case at::kHalf: launch<__half>(logits, targets, loss, dlogits, dlogits_scale); break;
    default: launch<float>(logits, targets, loss, dlogits, dlogits_scale); break;
  }
  return {loss, dlogits};
}

}  // namespace picotron::kernels::cuda
