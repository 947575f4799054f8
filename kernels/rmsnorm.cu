// kernels/rmsnorm.cu — fused RMSNorm forward and backward (LLaMA's norm, no mean, no bias).
//
//   forward    r   = rsqrt(mean_j(x_j^2) + eps)              one fp32 scalar per row
//              y_j = w_j * (x_j * r)                         (x_j * r rounded to x's dtype first,
//                                                            as picotron/model.cpp does)
//   backward   with g_j = dy_j * w_j and dr/dx_k = -r^3 x_k / H:
//              dx_k = sum_j g_j (r delta_jk + x_j dr/dx_k) = r * (g_k - x_k * r^2 * mean_j(g_j x_j))
//              dw_j = sum over rows of dy_j * x_j * r
//
// Memory traffic per element (bf16, 2 bytes), forward: the ATen chain of model.cpp runs
// x.to(fp32) (2 read + 4 write), pow (4 + 4), mean (4), mul by r (4 + 4), .to(bf16)
// (4 + 2), mul by w (2 + 2) = 36 B in 8 launches (with + eps and rsqrt on [N, 1]); this
// kernel reads x and writes y: 4 B in one launch (it reads the row twice, the second time
// from L1/L2). Backward: autograd over that chain moves roughly 80 B/element in about a
// dozen launches and keeps an fp32 copy of x alive from forward to backward; this kernel
// reads dy, x and writes dx: 6 B, and the forward kept only r [N] fp32.
// dw is reduced without atomics: each block sums its range of rows into its own row of
// an fp32 buffer [G, H], then a small kernel sums the G rows of each column.
//
// Test: build/tests/unit_tests "[kernels]"      Bench: build/bench/bench_kernels
//
// reference: kernels/reference.cpp, reference::rms_norm_forward / rms_norm_backward,
// same signatures.
#include <algorithm>
#include <cstdint>

#include <ATen/Dispatch_v2.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/kernels.h"
#include "kernels/vec.cuh"

namespace picotron::kernels::cuda {
namespace {

// Vec, load, store: 16-byte accesses (kernels/vec.cuh).

// Sum of `v` over the block; every thread gets the total. blockDim.x is a multiple of 32
// (whole warps, so the full shuffle mask is right), at most 1024 (32 warps).
__device__ float block_sum(float v, float* warp_sums /* shared [32] */) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? warp_sums[lane] : 0.0f;  // every warp sums the partials
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // warp_sums is free again for the next call
  return v;
}

// One block per row. x, y [N, H]; w [H]; inv_rms [N] fp32. H % kVec == 0.
template <typename T, int kVec>
__global__ void rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                        float* __restrict__ inv_rms, int64_t H, float eps) {
  __shared__ float warp_sums[32];
  const int64_t row = blockIdx.x;
  const T* x_row = x + row * H;  // [H]
  T* y_row = y + row * H;        // [H]
  const int64_t n_vec = H / kVec;

  float sum_sq = 0.0f;
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const auto xv = load<T, kVec>(x_row + i * kVec);
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum_sq += float(xv.v[k]) * float(xv.v[k]);
  }
  const float r = rsqrtf(block_sum(sum_sq, warp_sums) / float(H) + eps);
  if (threadIdx.x == 0) inv_rms[row] = r;

  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {  // x again: now from L1/L2
    const auto xv = load<T, kVec>(x_row + i * kVec), wv = load<T, kVec>(w + i * kVec);
    Vec<T, kVec> yv;
#pragma unroll
    for (int k = 0; k < kVec; ++k) yv.v[k] = T(float(T(float(xv.v[k]) * r)) * float(wv.v[k]));
    store<T, kVec>(y_row + i * kVec, yv);
  }
}

// Block b owns rows [b * rows_per_block, min(N, (b + 1) * rows_per_block)). It writes dx
// for them and their dw contribution into dw_partial[b, :]. Each thread touches the same
// columns in every row, so its read-modify-write of dw_partial needs no atomics and no
// synchronisation (the [G, H] buffer is small enough to stay in L2).
// dy, x, dx [N, H]; w [H]; inv_rms [N] fp32; dw_partial [G, H] fp32.
template <typename T, int kVec>
__global__ void rms_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                         const T* __restrict__ w, const float* __restrict__ inv_rms,
                                         T* __restrict__ dx, float* __restrict__ dw_partial, int64_t N,
                                         int64_t H, int64_t rows_per_block) {
  __shared__ float warp_sums[32];
  const int64_t n_vec = H / kVec;
  float* partial = dw_partial + blockIdx.x * H;  // [H]
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) store<float, kVec>(partial + i * kVec, {});

  const int64_t row_begin = blockIdx.x * rows_per_block;
  const int64_t row_end = row_begin + rows_per_block < N ? row_begin + rows_per_block : N;
  for (int64_t row = row_begin; row < row_end; ++row) {  // the same trip count for the whole block
    const T* dy_row = dy + row * H;  // [H]
    const T* x_row = x + row * H;    // [H]
    const float r = inv_rms[row];

    float dot = 0.0f;  // sum_j dy_j w_j x_j
    for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
      const auto gv = load<T, kVec>(dy_row + i * kVec), xv = load<T, kVec>(x_row + i * kVec),
                 wv = load<T, kVec>(w + i * kVec);
#pragma unroll
      for (int k = 0; k < kVec; ++k) dot += float(gv.v[k]) * float(wv.v[k]) * float(xv.v[k]);
    }
    const float c = r * r * block_sum(dot, warp_sums) / float(H);  // r^2 * mean(dy w x)

    for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
      const auto gv = load<T, kVec>(dy_row + i * kVec), xv = load<T, kVec>(x_row + i * kVec),
                 wv = load<T, kVec>(w + i * kVec);
      auto pv = load<float, kVec>(partial + i * kVec);
      Vec<T, kVec> dxv;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float g = float(gv.v[k]), xk = float(xv.v[k]);
        dxv.v[k] = T(r * (g * float(wv.v[k]) - xk * c));
        pv.v[k] += g * xk * r;
      }
      store<T, kVec>(dx + row * H + i * kVec, dxv);
      store<float, kVec>(partial + i * kVec, pv);
    }
  }
}

// dw_partial [G, H] fp32 -> dw [H]: blockDim (32, 8), 32 columns per block; the 8 rows of
// threads stride over G, then one shared-memory sum per column. Reads stay coalesced.
template <typename T>
__global__ void column_sum_kernel(const float* __restrict__ dw_partial, T* __restrict__ dw, int64_t G, int64_t H) {
  __shared__ float sums[8][32];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.0f;
  if (col < H)
    for (int64_t g = threadIdx.y; g < G; g += 8) s += dw_partial[g * H + col];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < H) {
    float total = 0.0f;
    for (int i = 0; i < 8; ++i) total += sums[i][threadIdx.x];
    dw[col] = T(total);
  }
}

// Whole warps, one vector per thread, at most 512 threads per row.
int threads_for(int64_t n_vec) { return int(std::min<int64_t>(512, (n_vec + 31) / 32 * 32)); }

void check_norm_input(const at::Tensor& t, const char* name, const at::Tensor& x) {
  TORCH_CHECK(t.is_cuda(), "rms_norm: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == x.device(), "rms_norm: ", name, " is on ", t.device(), ", x on ", x.device());
  TORCH_CHECK(t.is_contiguous(), "rms_norm: ", name, " must be contiguous, got strides ", t.strides());
}

void check_dtype(const at::Tensor& t, const char* name, const at::Tensor& x) {
  const auto d = x.scalar_type();
  TORCH_CHECK(d == at::kBFloat16 || d == at::kHalf || d == at::kFloat,
              "rms_norm: x must be bf16, fp16 or fp32, got ", d);
  TORCH_CHECK(t.scalar_type() == d, "rms_norm: ", name, " is ", t.scalar_type(), ", x is ", d);
}

// x [..., H] is read as [N, H], N = the product of the leading dimensions.
int64_t checked_rows(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() >= 1 && w.dim() == 1, "rms_norm: want x [N, H] and w [H], got ", x.sizes(), " and ",
              w.sizes());
  const int64_t H = x.size(-1);
  TORCH_CHECK(H > 0 && w.size(0) == H, "rms_norm: w has ", w.size(0), " elements, x rows have H = ", H);
  const int64_t N = x.numel() / H;
  TORCH_CHECK(N <= INT32_MAX, "rms_norm: ", N, " rows exceed one grid dimension (2^31 - 1)");
  return N;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_norm_input(x, "x", x);
  check_norm_input(w, "w", x);
  check_dtype(w, "w", x);
  const int64_t N = checked_rows(x, w), H = x.size(-1);
  c10::cuda::CUDAGuard guard(x.device());
  auto y = at::empty(x.sizes(), x.options());                    // [N, H]
  auto inv_rms = at::empty({N}, x.options().dtype(at::kFloat));  // [N]
  if (N == 0) return {y, inv_rms};
  const auto stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_V2(x.scalar_type(), "rms_norm_forward", AT_WRAP([&] {
    constexpr int kVec = 16 / sizeof(scalar_t);  // 8 bf16/fp16, 4 fp32
    const auto* x_ptr = x.const_data_ptr<scalar_t>();
    const auto* w_ptr = w.const_data_ptr<scalar_t>();
    auto* y_ptr = y.mutable_data_ptr<scalar_t>();
    auto* r_ptr = inv_rms.mutable_data_ptr<float>();
    if (H % kVec == 0 && aligned16(x_ptr) && aligned16(w_ptr) && aligned16(y_ptr))
      rms_norm_forward_kernel<scalar_t, kVec>
          <<<unsigned(N), threads_for(H / kVec), 0, stream>>>(x_ptr, w_ptr, y_ptr, r_ptr, H, float(eps));
    else
      rms_norm_forward_kernel<scalar_t, 1>
          <<<unsigned(N), threads_for(H), 0, stream>>>(x_ptr, w_ptr, y_ptr, r_ptr, H, float(eps));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }), at::kFloat, at::kBFloat16, at::kHalf);
  return {y, inv_rms};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                                                     const at::Tensor& inv_rms) {
  check_norm_input(x, "x", x);
  check_norm_input(dy, "dy", x);
  check_norm_input(w, "w", x);
  check_norm_input(inv_rms, "inv_rms", x);
  check_dtype(dy, "dy", x);
  check_dtype(w, "w", x);
  const int64_t N = checked_rows(x, w), H = x.size(-1);
  TORCH_CHECK(dy.sizes() == x.sizes(), "rms_norm: dy is ", dy.sizes(), ", x is ", x.sizes());
  TORCH_CHECK(inv_rms.scalar_type() == at::kFloat && inv_rms.numel() == N, "rms_norm: inv_rms must be fp32 [",
              N, "], got ", inv_rms.scalar_type(), " ", inv_rms.sizes());
  c10::cuda::CUDAGuard guard(x.device());
  auto dx = at::empty(x.sizes(), x.options());  // [N, H]
  if (N == 0) return {dx, at::zeros(w.sizes(), w.options())};

  // G blocks of rows: 256 fills an H100 (132 SMs) twice over, and a fixed G keeps the
  // order of the dw sum, hence its rounding, the same on every GPU.
  constexpr int64_t kBlocks = 256;
  const int64_t rows_per_block = (N + kBlocks - 1) / kBlocks;
  const int64_t G = (N + rows_per_block - 1) / rows_per_block;         // no block without rows
  auto dw_partial = at::empty({G, H}, x.options().dtype(at::kFloat));  // [G, H]
  auto dw = at::empty(w.sizes(), w.options());                         // [H]
  const auto stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_V2(x.scalar_type(), "rms_norm_backward", AT_WRAP([&] {
    constexpr int kVec = 16 / sizeof(scalar_t);
    const auto* dy_ptr = dy.const_data_ptr<scalar_t>();
    const auto* x_ptr = x.const_data_ptr<scalar_t>();
    const auto* w_ptr = w.const_data_ptr<scalar_t>();
    const auto* r_ptr = inv_rms.const_data_ptr<float>();
    auto* dx_ptr = dx.mutable_data_ptr<scalar_t>();
    // A fresh allocation (aligned to far more than 32 bytes): with H % kVec == 0 every row
    // of dw_partial is aligned for its kVec-float accesses too.
    auto* partial_ptr = dw_partial.mutable_data_ptr<float>();
    if (H % kVec == 0 && aligned16(dy_ptr) && aligned16(x_ptr) && aligned16(w_ptr) && aligned16(dx_ptr))
      rms_norm_backward_kernel<scalar_t, kVec><<<unsigned(G), threads_for(H / kVec), 0, stream>>>(
          dy_ptr, x_ptr, w_ptr, r_ptr, dx_ptr, partial_ptr, N, H, rows_per_block);
    else
      rms_norm_backward_kernel<scalar_t, 1><<<unsigned(G), threads_for(H), 0, stream>>>(
          dy_ptr, x_ptr, w_ptr, r_ptr, dx_ptr, partial_ptr, N, H, rows_per_block);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    column_sum_kernel<scalar_t><<<unsigned((H + 31) / 32), dim3(32, 8), 0, stream>>>(
        partial_ptr, dw.mutable_data_ptr<scalar_t>(), G, H);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }), at::kFloat, at::kBFloat16, at::kHalf);
  return {dx, dw};
}

}  // namespace picotron::kernels::cuda
