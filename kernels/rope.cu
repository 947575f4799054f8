// kernels/rope.cu — rotary position embedding (RoFormer, arXiv 2104.09864, section 3.4.2)
// applied to q and k in one launch, the backward pass included (inverse = true).
//
// The tables are [freqs, freqs] (picotron/model.cpp: rope_tables), so element j of a head
// is rotated together with element j + h, h = Hd / 2 (the "rotate_half" layout of LLaMA
// checkpoints, not the paper's interleaved pairs (2i, 2i + 1)):
//   out_j     = x_j     * cos_j     - x_{j+h} * sin_j
//   out_{j+h} = x_{j+h} * cos_{j+h} + x_j     * sin_{j+h}
// This is a rotation by the angle of position s; inverse = true rotates by minus that
// angle (sin -> -sin), which is its transpose because sin_j = sin_{j+h} in these tables:
// the backward, dx = R^T dy.
//
// Memory traffic per element of q or k (bf16, 2 bytes): apply_rope in ATen runs -x2
// (1 + 1), cat (2 + 2), x * cos (2 + 2), rotated * sin (2 + 2), add (4 + 2) = 20 B in
// 5 launches per tensor, on the transposed view; this kernel reads x and writes out:
// 4 B, q and k together in 1 launch, on the [B, S, n, Hd] layout the projections produce.
// The tables [S, Hd] are re-read by every head of every row, from L1/L2, not DRAM.
//
// Test: build/tests/unit_tests "[kernels]"      Bench: build/bench/bench_kernels
//
// reference: kernels/reference.cpp, reference::rope, same signature.
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

// One block per token row (b, s); its threads stride over the (nH + nKV) heads x h / kVec
// chunks of kVec pairs, so q heads come first, then k heads, in one loop.
// q, q_out [B, S, nH, Hd]; k, k_out [B, S, nKV, Hd]; cos_table, sin_table [S, Hd]; h = Hd / 2.
template <typename T, int kVec>
__global__ void rope_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ cos_table,
                            const T* __restrict__ sin_table, T* __restrict__ q_out, T* __restrict__ k_out,
                            int64_t S, int n_heads, int n_kv, int h, float sin_sign) {
  const int64_t row = blockIdx.x;  // b * S + s
  const int64_t Hd = 2 * int64_t(h);
  const T* cos_row = cos_table + (row % S) * Hd;  // [Hd]
  const T* sin_row = sin_table + (row % S) * Hd;  // [Hd]
  const int chunks_per_head = h / kVec;
  const int n_chunks = (n_heads + n_kv) * chunks_per_head;

  for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) {
    const int head = c / chunks_per_head;
    const int j = (c % chunks_per_head) * kVec;  // first of the kVec pairs (j, j + h)
    const T* x;
    T* out;
    if (head < n_heads) {
      const int64_t offset = (row * n_heads + head) * Hd;  // q[b, s, head, :]
      x = q + offset, out = q_out + offset;
    } else {
      const int64_t offset = (row * n_kv + (head - n_heads)) * Hd;  // k[b, s, head - nH, :]
      x = k + offset, out = k_out + offset;
    }
    const auto x1 = load<T, kVec>(x + j), x2 = load<T, kVec>(x + j + h);
    const auto c1 = load<T, kVec>(cos_row + j), c2 = load<T, kVec>(cos_row + j + h);
    const auto s1 = load<T, kVec>(sin_row + j), s2 = load<T, kVec>(sin_row + j + h);
    Vec<T, kVec> o1, o2;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float a = float(x1.v[i]), b = float(x2.v[i]);
      o1.v[i] = T(a * float(c1.v[i]) - b * (sin_sign * float(s1.v[i])));
      o2.v[i] = T(b * float(c2.v[i]) + a * (sin_sign * float(s2.v[i])));
    }
    store<T, kVec>(out + j, o1);
    store<T, kVec>(out + j + h, o2);
  }
}

void check_input(const at::Tensor& t, const char* name, const at::Tensor& q, int64_t dim) {
  TORCH_CHECK(t.is_cuda(), "rope: ", name, " must be a CUDA tensor, got ", t.device());
  TORCH_CHECK(t.device() == q.device(), "rope: ", name, " is on ", t.device(), ", q on ", q.device());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), "rope: ", name, " is ", t.scalar_type(), ", q is ",
              q.scalar_type());
  TORCH_CHECK(t.is_contiguous(), "rope: ", name, " must be contiguous, got strides ", t.strides());
  TORCH_CHECK(t.dim() == dim, "rope: ", name, " must have ", dim, " dimensions, got ", t.sizes());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                        const at::Tensor& sin, bool inverse) {
  const auto d = q.scalar_type();
  TORCH_CHECK(d == at::kBFloat16 || d == at::kHalf || d == at::kFloat,
              "rope: q must be bf16, fp16 or fp32, got ", d);
  check_input(q, "q", q, 4);
  check_input(k, "k", q, 4);
  check_input(cos, "cos", q, 2);
  check_input(sin, "sin", q, 2);
  const int64_t B = q.size(0), S = q.size(1), n_heads = q.size(2), Hd = q.size(3), n_kv = k.size(2);
  TORCH_CHECK(k.size(0) == B && k.size(1) == S && k.size(3) == Hd, "rope: k ", k.sizes(),
              " does not match q ", q.sizes(), " in B, S or Hd");
  TORCH_CHECK(Hd % 2 == 0, "rope: head dim Hd = ", Hd, " must be even");
  TORCH_CHECK(cos.size(0) == S && cos.size(1) == Hd && sin.sizes() == cos.sizes(), "rope: cos ", cos.sizes(),
              " and sin ", sin.sizes(), " must be [S, Hd] = [", S, ", ", Hd, "]");
  TORCH_CHECK(B * S <= INT32_MAX && (n_heads + n_kv) * Hd <= INT32_MAX, "rope: q ", q.sizes(), " and k ",
              k.sizes(), " are too large for one grid");
  c10::cuda::CUDAGuard guard(q.device());
  auto q_out = at::empty(q.sizes(), q.options());  // [B, S, nH, Hd]
  auto k_out = at::empty(k.sizes(), k.options());  // [B, S, nKV, Hd]
  if (B * S == 0 || n_heads + n_kv == 0 || Hd == 0) return {q_out, k_out};
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int h = int(Hd / 2);
  const float sin_sign = inverse ? -1.0f : 1.0f;

  AT_DISPATCH_V2(d, "rope", AT_WRAP([&] {
    constexpr int kVec = 16 / sizeof(scalar_t);  // 8 bf16/fp16, 4 fp32
    const auto* q_ptr = q.const_data_ptr<scalar_t>();
    const auto* k_ptr = k.const_data_ptr<scalar_t>();
    const auto* cos_ptr = cos.const_data_ptr<scalar_t>();
    const auto* sin_ptr = sin.const_data_ptr<scalar_t>();
    auto* q_out_ptr = q_out.mutable_data_ptr<scalar_t>();
    auto* k_out_ptr = k_out.mutable_data_ptr<scalar_t>();
    const bool vec = h % kVec == 0 && aligned16(q_ptr) && aligned16(k_ptr) && aligned16(cos_ptr) &&
                     aligned16(sin_ptr) && aligned16(q_out_ptr) && aligned16(k_out_ptr);
    const int64_t n_chunks = (n_heads + n_kv) * (vec ? h / kVec : h);  // per row
    const int threads = int(std::min<int64_t>(256, (n_chunks + 31) / 32 * 32));
    const auto rows = unsigned(B * S);
    if (vec)
      rope_kernel<scalar_t, kVec><<<rows, threads, 0, stream>>>(q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr,
                                                                 S, int(n_heads), int(n_kv), h, sin_sign);
    else
      rope_kernel<scalar_t, 1><<<rows, threads, 0, stream>>>(q_ptr, k_ptr, cos_ptr, sin_ptr, q_out_ptr, k_out_ptr,
                                                             S, int(n_heads), int(n_kv), h, sin_sign);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }), at::kFloat, at::kBFloat16, at::kHalf);
  return {q_out, k_out};
}

}  // namespace picotron::kernels::cuda
