// kernels/cuda_missing.cpp — a build without the CUDA parts (no CUDA toolkit or a CPU
// LibTorch at configure time) has no cuda:: kernels: each entry throws one line. Only a
// CUDA tensor reaches them (kernels/autograd.cpp), and --kernels fused is refused
// without a GPU (runtime/cli/flag_rules.cpp, runtime/preflight/startup.cpp), so this is a
// guard, not a path.
#include <stdexcept>

#include "kernels/kernels.h"

namespace picotron::kernels::cuda {

namespace {
[[noreturn]] void no_kernels(const char* name) {
  throw std::runtime_error(std::string("kernels: ") + name +
                           ": this build has no CUDA kernels (configure with a CUDA toolkit and a CUDA LibTorch)");
}
}  // namespace

std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor&, const at::Tensor&, double) {
  no_kernels("rms_norm_forward");
}
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&) {
  no_kernels("rms_norm_backward");
}
std::tuple<at::Tensor, at::Tensor> rope(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        bool) {
  no_kernels("rope");
}
at::Tensor swiglu_forward(const at::Tensor&, const at::Tensor&) { no_kernels("swiglu_forward"); }
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  no_kernels("swiglu_backward");
}
std::tuple<at::Tensor, at::Tensor> cross_entropy_forward(const at::Tensor&, const at::Tensor&, double, bool) {
  no_kernels("cross_entropy_forward");
}
void adamw_step(const std::vector<at::Tensor>&, const std::vector<at::Tensor>&, const std::vector<at::Tensor>&,
                const std::vector<at::Tensor>&, const std::vector<at::Tensor>&, const std::vector<bool>&,
                const AdamWHyper&) {
  no_kernels("adamw_step");
}
std::tuple<at::Tensor, at::Tensor> flash_attention_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                           double, bool) {
  no_kernels("flash_attention_forward");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_backward(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&, double,
                                                                        bool) {
  no_kernels("flash_attention_backward");
}
std::tuple<at::Tensor, at::Tensor> flash_attention_mma_forward(const at::Tensor&, const at::Tensor&,
                                                               const at::Tensor&, double, bool) {
  no_kernels("flash_attention_mma_forward");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_attention_mma_backward(const at::Tensor&, const at::Tensor&,
                                                                            const at::Tensor&, const at::Tensor&,
                                                                            const at::Tensor&, const at::Tensor&,
                                                                            double, bool) {
  no_kernels("flash_attention_mma_backward");
}
std::tuple<at::Tensor, at::Tensor> attention_naive_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                           double, bool) {
  no_kernels("attention_naive_forward");
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_naive_backward(const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&,
                                                                        const at::Tensor&, const at::Tensor&, double,
                                                                        bool) {
  no_kernels("attention_naive_backward");
}

}  // namespace picotron::kernels::cuda
