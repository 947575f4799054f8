// kernels/vec.cuh — what the kernels share. Vec: kVec consecutive
// elements loaded or stored as ONE 16-byte access when kVec * sizeof(T) is 16 (8 bf16 /
// fp16, or 4 fp32 per thread: the widest load a thread can issue, so a warp moves 512
// bytes per instruction). kVec = 1 is the scalar fallback each launcher takes for a
// misaligned pointer or a size that is not a multiple of kVec.
// Used by rmsnorm.cu, rope.cu, swiglu.cu. Beside it, the fp32 <-> storage dtype conversions
// (round to nearest even) and the 16-byte alignment test, used by every .cu file that needs
// them (one definition each: the fast build compiles all .cu files as one translation unit).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace picotron::kernels::cuda {

// Whether a pointer allows 16-byte vector accesses.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};
template <typename T, int kVec>
__device__ inline Vec<T, kVec> load(const T* p) { return *reinterpret_cast<const Vec<T, kVec>*>(p); }
template <typename T, int kVec>
__device__ inline void store(T* p, const Vec<T, kVec>& v) { *reinterpret_cast<Vec<T, kVec>*>(p) = v; }

}  // namespace picotron::kernels::cuda
