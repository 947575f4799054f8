// kernels/vec.cuh — the one device helper the elementwise kernels share: kVec consecutive
// elements loaded or stored as ONE 16-byte access when kVec * sizeof(T) is 16 (8 bf16 /
// fp16, or 4 fp32 per thread: the widest load a thread can issue, so a warp moves 512
// bytes per instruction). kVec = 1 is the scalar fallback each launcher takes for a
// misaligned pointer or a size that is not a multiple of kVec.
// Used by rmsnorm.cu, rope.cu, swiglu.cu.
#pragma once

namespace picotron::kernels::cuda {

template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};
template <typename T, int kVec>
__device__ inline Vec<T, kVec> load(const T* p) { return *reinterpret_cast<const Vec<T, kVec>*>(p); }
template <typename T, int kVec>
__device__ inline void store(T* p, const Vec<T, kVec>& v) { *reinterpret_cast<Vec<T, kVec>*>(p) = v; }

}  // namespace picotron::kernels::cuda
