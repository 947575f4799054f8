// runtime/debug_text.cpp — see debug_text.h.
// The debugger calls picotron_tensor_impl_text on whatever a local's bytes hold, built or
// not. LibTorch's debug-only checks would abort the program on such bytes (reclaim()
// asserts "refcount > 0 => weakcount > 0") before this file can look at them and say
// "not built"; this file's own checks below replace them, so they are off here.
#ifndef NDEBUG
#define NDEBUG
#endif
#include "runtime/debug_text.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <functional>
#include <sstream>

namespace picotron {

std::string tensor_text(const at::Tensor& t, int values) {
  if (!t.defined()) return "undefined tensor";
  std::ostringstream out;
  const auto list = [&](at::IntArrayRef v, const char* open, const char* close) {
    out << open;
    for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
    out << close;
  };
  list(t.sizes(), "[", "]");
  out << " " << c10::toString(t.scalar_type()) << " " << t.device().str();
  if (t.layout() == at::kStrided) {
    out << " strides ";
    list(t.strides(), "(", ")");
  }
  if (t.requires_grad()) out << " requires_grad";
  at::NoGradGuard no_grad;  // reading the values must not touch any graph
  const int64_t n = std::min<int64_t>(values, t.numel());
  if (t.layout() == at::kStrided && n > 0) {
    const auto first = t.reshape({-1}).narrow(0, 0, n).to(at::kCPU, at::kDouble);
    out << " {";
    char buf[32];
    for (int64_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof buf, "%.4g", first[i].item<double>());
      out << (i ? ", " : "") << buf;
    }
    out << (t.numel() > n ? ", ...}" : "}");
  }
  return out.str();
}

}  // namespace picotron

namespace {
const char* kept_text(const std::function<std::string()>& make) {
  static std::string text;
  try {
    text = make();
  } catch (const std::exception& e) {
    text = std::string("<tensor: ") + e.what() + ">";
  }
  return text.c_str();
}
}  // namespace

extern "C" __attribute__((used, noinline)) const char* picotron_tensor_text(const void* tensor) {
  return kept_text([&] { return picotron::tensor_text(*static_cast<const at::Tensor*>(tensor)); });
}

extern "C" __attribute__((used, noinline)) const char* picotron_tensor_impl_text(const void* impl) {
  return kept_text([&] {
    if (!impl) return std::string("<not built>");
    auto* target = static_cast<c10::TensorImpl*>(const_cast<void*>(impl));
    if (target == c10::UndefinedTensorImpl::singleton()) return std::string("undefined tensor");
    // A local the program has not built yet, or one already destroyed, points at memory
    // whose counts are 0 (or garbage): taking a reference would abort the program
    // ("Cannot increase refcount after it reached zero"). Read both counts without touching
    // them; a live TensorImpl has refcount >= 1 and weakcount >= 1 (the strong references
    // together hold one weak one).
    auto peek = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(target);
    const uint32_t refs = peek.use_count(), weak = peek.weak_use_count();
    peek.release();  // give the pointer back without a decrement
    if (refs == 0 || refs > (1u << 24) || weak == 0 || weak > (1u << 24)) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "<not built, or freed: TensorImpl %p, counts %u strong %u weak>", impl, refs, weak);
      return std::string(buf);
    }
    // A new reference to the same TensorImpl (the count goes up, and down again on return).
    const at::Tensor t(c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
        static_cast<c10::TensorImpl*>(const_cast<void*>(impl))));
    return picotron::tensor_text(t);
  });
}
