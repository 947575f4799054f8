// kernels/fp8.cpp — FP8 linear layers: see fp8.h for the recipe and where scales are synced.
#include "kernels/fp8.h"

#include "picotron/saved_object.h"

#include <algorithm>
#include <stdexcept>

namespace picotron::fp8 {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

double max_of(Format f) { return f == Format::kE4M3 ? 448.0 : 57344.0; }
torch::ScalarType dtype_of(Format f) { return f == Format::kE4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2; }

namespace {
// The dtype the scaling arithmetic runs in: fp64 for an fp64 run (the emulation adds no
// rounding of its own there), fp32 otherwise (torchao's and the tensor cores' choice).
torch::ScalarType wide(torch::ScalarType t) { return t == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }
}  // namespace

torch::Tensor scale_from_amax(const torch::Tensor& amax, Format f) {
  // BEGIN ASSIGNMENT kernels.fp8_scale
  // s = fp8_max / amax: the largest |t| lands on the format's largest number. An all-zero
  // tensor has nothing to scale (and 448 / 0 would make it inf): 1. A tiny amax is floored at
  // kAmaxFloor (torchao's 1e-12): 448 / 1e-39 is inf in fp32, and inf * 0 a NaN.
  const auto a = amax.to(torch::kFloat32);                        // []
  return torch::where(a > 0, torch::full_like(a, max_of(f)) / a.clamp_min(kAmaxFloor), torch::ones_like(a));  // []
  // END ASSIGNMENT
}

Quantized quantize(const torch::Tensor& t, const torch::Tensor& scale, Format f) {
  const double m = max_of(f);
  // clamp: t * s may round past fp8_max by an ulp, and e4m3fn has no inf (it would be NaN).
  auto scaled = (t.to(wide(t.scalar_type())) * scale).clamp(-m, m);  // t's shape
  return {scaled.to(dtype_of(f)), scale};                            // round to nearest even
}

torch::Tensor dequantize(const Quantized& q, torch::ScalarType dtype) {
  return (q.data.to(wide(dtype)) / q.scale).to(dtype);
}

std::string device_problem(int major, int minor, const std::string& name) {
  if (major * 10 + minor >= 89) return "";
  return "--fp8 needs fp8 tensor cores (compute capability 8.9 or newer: Ada, Hopper); " + name + " is " +
         std::to_string(major) + "." + std::to_string(minor) + " (use --dtype bf16 without --fp8)";
}

torch::Tensor amax_over(const std::vector<torch::Tensor>& ts, const std::vector<Comm*>& groups) {
  std::vector<torch::Tensor> local;
  for (const auto& t : ts)
    local.push_back(t.numel() ? t.detach().abs().max().to(torch::kFloat32) : torch::scalar_tensor(0.0, t.options().dtype(torch::kFloat32)));
  auto amax = torch::stack(local);  // [n]
  // BEGIN ASSIGNMENT kernels.fp8_amax_sync
  for (Comm* group : groups)  // tp, then cp: the max over every rank holding a piece
    group->all_reduce(amax, ReduceOp::kMax, carries("fp8: the amax of the tensors about to be quantised (x and W forward, "
                                                    "dY backward), max over the ranks holding pieces of them"));
  // END ASSIGNMENT
  return amax;
}

torch::Tensor scaled_mm(const Quantized& a, const Quantized& b, torch::ScalarType out_dtype) {
  const int64_t M = a.data.size(0), K = a.data.size(1), N = b.data.size(0);
  const bool tensor_cores = a.data.is_cuda() && out_dtype != torch::kFloat64 && M % 16 == 0 && K % 16 == 0 &&
                            N % 16 == 0;
  if (tensor_cores) {
    // _scaled_mm(A [M, K] row-major, B [K, N] column-major, scale_a, scale_b): A B with
    // A = data_a * scale_a, so its scales are our 1 / s. fp32 accumulation.
    return at::_scaled_mm(a.data.contiguous(), b.data.contiguous().t(), a.scale.reciprocal(),
                          b.scale.reciprocal(), /*bias=*/{}, /*scale_result=*/{}, out_dtype);  // [M, N]
  }
  // Emulated as the tensor cores compute it: the fp8 values (exact in fp32) multiplied and
  // summed in fp32 (fp64 in an fp64 run), both scales applied to the sum, and ONE rounding to
  // out_dtype at the end (rounding each dequantised operand to bf16 first would differ from
  // the GPU in about half the outputs).
  const auto w = wide(out_dtype);
  const auto sum = torch::matmul(a.data.to(w), b.data.to(w).t());                   // [M, N]
  return (sum * (a.scale.to(w).reciprocal() * b.scale.to(w).reciprocal())).to(out_dtype);  // [M, N]
}

namespace {
std::vector<Comm*>& groups_of(AutogradContext* ctx) { return saved_object_of<std::vector<Comm*>>(ctx->saved_data["groups"]); }

// fwd: Y = deq(q4 x) deq(q4 W)^T   bwd: dX = deq(q5 dY) deq(q4 W), dW = deq(q5 dY)^T deq(q4 x)
struct Fp8Linear : torch::autograd::Function<Fp8Linear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               std::vector<Comm*> groups) {
    const auto x2 = x.reshape({-1, x.size(-1)});                  // [N, in]
    const auto amax = amax_over({x2, w}, groups);                  // [2]: x, W
    const auto qx = quantize(x2, scale_from_amax(amax[0], Format::kE4M3), Format::kE4M3);  // [N, in] e4m3
    const auto qw = quantize(w, scale_from_amax(amax[1], Format::kE4M3), Format::kE4M3);   // [out, in] e4m3
    ctx->save_for_backward({qx.data, qx.scale, qw.data, qw.scale});  // the fp8 copies, not x and W
    ctx->saved_data["groups"] = saved_object(std::move(groups));
    ctx->saved_data["dtype"] = int64_t(x.scalar_type());
    auto out_shape = x.sizes().vec();
    out_shape.back() = w.size(0);
    return scaled_mm(qx, qw, x.scalar_type()).view(out_shape);  // [..., out]
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Quantized qx{saved[0], saved[1]}, qw{saved[2], saved[3]};
    const auto dtype = torch::ScalarType(ctx->saved_data["dtype"].toInt());
    const auto dy = grads[0].reshape({-1, qw.data.size(0)});  // [N, out]
    const auto amax = amax_over({dy}, groups_of(ctx));         // [1]
    const auto qdy = quantize(dy, scale_from_amax(amax[0], Format::kE5M2), Format::kE5M2);  // [N, out] e5m2
    // dX = dY W: B's rows are W's columns, so hand W^T [in, out].
    const auto dx = scaled_mm(qdy, {qw.data.t().contiguous(), qw.scale}, dtype);  // [N, in]
    // dW = dY^T x: A = dY^T [out, N], B's rows = x's columns, x^T [in, N].
    const auto dw = scaled_mm({qdy.data.t().contiguous(), qdy.scale}, {qx.data.t().contiguous(), qx.scale},
                              dtype);  // [out, in]
    auto dx_shape = grads[0].sizes().vec();
    dx_shape.back() = qx.data.size(1);
    return {dx.view(dx_shape), dw, torch::Tensor()};
  }
};
}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const std::vector<Comm*>& groups) {
  return Fp8Linear::apply(x, w, groups);
}

LinearImpl::LinearImpl(torch::Tensor w, std::vector<Comm*> groups) : amax_groups(std::move(groups)) {
  weight = register_parameter("weight", w);  // the same tensor, under the same name
}
torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return linear(x, weight, amax_groups); }

std::string apply_fp8(LlamaForCausalLM& model, std::vector<Comm*> amax_groups) {
  amax_groups.erase(std::remove_if(amax_groups.begin(), amax_groups.end(), [](const Comm* g) { return g->size() == 1; }),
                    amax_groups.end());  // a group of one: nothing to max-reduce over
  int64_t count = 0;
  auto to_fp8 = [&](torch::nn::Module& owner, const std::string& name, torch::nn::AnyModule& slot) {
    auto weight = slot.ptr()->named_parameters(/*recurse=*/false)["weight"];
    replace_slot(owner, name, slot, torch::nn::AnyModule(Linear(weight, amax_groups)));
    ++count;
  };
  for (auto& [index, layer] : model->model->layers->items) {
    auto& attn = *layer->self_attn;
    for (auto [name, slot] : {std::pair{"q_proj", &attn.q_proj}, {"k_proj", &attn.k_proj}, {"v_proj", &attn.v_proj},
                              {"o_proj", &attn.o_proj}})
      to_fp8(attn, name, *slot);
    if (!layer->mlp) continue;  // a mixture-of-experts layer: its experts stay in the run's dtype
    auto& mlp = *layer->mlp;
    for (auto [name, slot] : {std::pair{"gate_proj", &mlp.gate_proj}, {"up_proj", &mlp.up_proj},
                              {"down_proj", &mlp.down_proj}})
      to_fp8(mlp, name, *slot);
  }
  std::string groups;
  for (Comm* g : amax_groups) groups += (groups.empty() ? "" : ", ") + g->name();
  return "fp8: " + std::to_string(count) + " linears in e4m3 (x, W) / e5m2 (dY), dynamic per-tensor scales" +
         (groups.empty() ? "" : "; amax all-reduced (max) over " + groups);
}

}  // namespace picotron::fp8
