// picotron/saved_object.h — a C++ object through autograd. A custom op's saved_data
// (torch::autograd::Function) holds IValues, not C++ objects: saved_object wraps one in
// an IValue "capsule", reference-counted, so it lives exactly as long as the graph that
// saved it (a value is freed with the graph even if backward never runs).
//
//   ctx->saved_data["tp"] = saved_object(&tp);            // a pointer: tp outlives the graph
//   Comm& tp = *saved_object_of<Comm*>(ctx->saved_data["tp"]);
//   ctx->saved_data["fn"] = saved_object(std::move(fn));  // a value, owned by the graph
//
// Used by tensor_parallel/ (the tp Comm), context_parallel/ (the cp Comm),
// pipeline_parallel/zero_bubble.cpp (the weight-gradient queue) and picotron/recompute.cpp
// (the function to run again).
#pragma once

#include <utility>

#include <torch/torch.h>

namespace picotron {

template <typename T>
struct SavedObject : torch::CustomClassHolder {
  explicit SavedObject(T v) : value(std::move(v)) {}
  T value;
};

template <typename T>
c10::IValue saved_object(T value) {
  return c10::IValue::make_capsule(c10::make_intrusive<SavedObject<T>>(std::move(value)));
}

// The object saved_object(T) stored; the IValue keeps it alive.
template <typename T>
T& saved_object_of(const c10::IValue& saved) {
  return static_cast<SavedObject<T>*>(saved.toCapsule().get())->value;
}

}  // namespace picotron
