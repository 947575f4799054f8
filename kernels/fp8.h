// kernels/fp8.h — FP8 linear layers (--fp8, and --dtype fp8 = bf16 + --fp8): the GEMMs
// of q/k/v/o_proj and gate/up/down_proj take 8-bit inputs with per-tensor scales.
// The recipe is dynamic per-tensor scaling (the Ultra-Scale Playbook, "FP8 pretraining";
// torchao's float8 "tensorwise" recipe; Micikevicius et al., arXiv 2209.05433):
//
//   format  e4m3 (4 exponent, 3 mantissa bits, max 448)    weights W, activations x
//           e5m2 (5 exponent, 2 mantissa bits, max 57344)  output gradients dY
//   scale   s = fp8_max / amax,  amax = max |t| over the WHOLE tensor (1 when amax is 0;
//           an amax below 1e-12 counts as 1e-12, as in torchao, so s stays finite)
//   q(t)    = fp8(clamp(t * s, -fp8_max, fp8_max))         deq(q) = q / s
//
//   forward   Y  = deq(q4(x)) @ deq(q4(W))^T     x [N, in], W [out, in] -> Y [N, out]
//             (computed as (q4(x) @ q4(W)^T) / (s_x s_W) in fp32, rounded once)
//   backward  dX = deq(q5(dY)) @ deq(q4(W))      [N, out] @ [out, in]   -> [N, in]
//             dW = deq(q5(dY))^T @ deq(q4(x))    [out, N] @ [N, in]     -> [out, in]
//
// Only the fp8 copies q4(x), q4(W) and their scales are saved for backward.
// On CUDA the three GEMMs run on the FP8 tensor cores (at::_scaled_mm, bf16/fp32 out, fp32
// accumulation; compute capability 8.9 or newer, else --fp8 is refused at start-up); on the
// CPU they are emulated the same way: the fp8 values multiplied and summed in fp32, the two
// scales applied to the sum, one rounding to the output dtype (in an fp64 run all of it in
// fp64: exact up to the quantisation, so every mesh can be compared with the single process
// at 1e-9).
//
// Scale synchronisation. A scale is set by an amax, and the amax must be the max over the
// WHOLE tensor, or two ranks holding pieces of it quantise with different scales and the
// run depends on the mesh. Pieces of a linear's tensors live on:
//   tp  column-parallel W [out/tp, in], its dY [N, out/tp]; row-parallel W [out, in/tp],
//       its x [N, in/tp]   (x of a column-parallel linear and dY of a row-parallel one are
//       whole on every tp rank, sequence-parallel or not: gathered / all-gathered first)
//   cp  x and dY of every linear: [B, S/cp, .] (each cp rank its tokens)
// So each linear all-reduces (MAX) its amaxes over tp, then over cp: [amax x, amax W] in
// forward, [amax dY] in backward; max is exact and order-free, so this costs 2 scalars
// per linear and direction and the result is the same number the single process finds.
// (A tensor whole on every rank of a group gives its own amax back: no harm.)
// Not needed:
//   dp  each micro-batch is scaled by itself (dynamic scaling), as the single process
//       scales its micro-batches one by one: a dp rank's micro-batch j is the reference's
//       micro-batch d x acc + j, the same rows, the same amax. No dp sync for x or dY.
//   ZeRO-3  W's amax is taken after the gather (the layer runs on the full tp shard).
//   pp  each stage owns whole layers.
//
// Test: build/tests/unit_tests "[fp8]" ; equivalence: ctest -R equivalence.fp8
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/model.h"

namespace picotron::fp8 {

enum class Format { kE4M3, kE5M2 };  // e4m3fn: W and x;  e5m2: dY
double max_of(Format f);              // 448 | 57344
torch::ScalarType dtype_of(Format f);  // torch::kFloat8_e4m3fn | torch::kFloat8_e5m2

// scale = fp8_max / max(amax, kAmaxFloor), in fp32; amax 0 (an all-zero tensor) gives 1.  [] -> []
constexpr double kAmaxFloor = 1e-12;  // torchao's: below it fp8_max / amax overflows fp32 to inf
torch::Tensor scale_from_amax(const torch::Tensor& amax, Format f);

// "" when a GPU of compute capability major.minor (`name`, for the message) can run the
// fp8 GEMMs, else the one line that says why not: fp8 tensor cores need 8.9 (Ada, Hopper)
// or newer. Pure: the caller reads the device (runtime/preflight/startup.h checks it before the run).
std::string device_problem(int major, int minor, const std::string& name);

// A quantised tensor: t ≈ data / scale.
struct Quantized {
  torch::Tensor data;   // the fp8 values, t's shape
  torch::Tensor scale;  // [] fp32
};
Quantized quantize(const torch::Tensor& t, const torch::Tensor& scale, Format f);
torch::Tensor dequantize(const Quantized& q, torch::ScalarType dtype);  // data / scale in `dtype`

// max |t| of each tensor, reduced (MAX) over each group in turn.  -> [n] fp32
// The groups: every rank holding a piece of one of the tensors (see the header).
torch::Tensor amax_over(const std::vector<torch::Tensor>& ts, const std::vector<Comm*>& groups);

// deq(a) @ deq(b)^T in `out_dtype`: a [M, K], b [N, K] -> [M, N]. CUDA: at::_scaled_mm when
// the sizes suit the tensor cores (multiples of 16), else (and on the CPU) emulated.
torch::Tensor scaled_mm(const Quantized& a, const Quantized& b, torch::ScalarType out_dtype);

// The FP8 linear as an autograd op.  x [..., in], w [out, in] -> [..., out]
// fwd: Y = deq(q4 x) deq(q4 W)^T   bwd: dX = deq(q5 dY) deq(q4 W), dW = deq(q5 dY)^T deq(q4 x)
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const std::vector<Comm*>& groups);

// A projection slot's module: the same weight tensor as the Linear it replaces.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(torch::Tensor weight, std::vector<Comm*> amax_groups);
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out]
  torch::Tensor weight;                           // [out, in] (a tp shard's local shape)
  std::vector<Comm*> amax_groups;                 // tp, cp: where pieces of x, W, dY live
};
TORCH_MODULE(Linear);

// Puts an fp8 Linear in the attention projections (q, k, v, o) of every layer this rank holds
// and in the MLP projections of every dense one (the embedding, the lm_head and a mixture of
// experts' experts stay in the run's dtype). `amax_groups`: the groups
// that split a projection's tensors (tp, cp; those of one rank are left out); they must
// outlive the model. Returns a one-line summary.
std::string apply_fp8(LlamaForCausalLM& model, std::vector<Comm*> amax_groups);

}  // namespace picotron::fp8
