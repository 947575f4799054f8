// picotron/step_place.cpp — see step_place.h.
#include "picotron/step_place.h"

#include <torch/csrc/autograd/graph_task.h>

namespace picotron {

namespace {

thread_local StepPlace t_place;

StepPlace merged(StepPlace outer, const StepPlace& inner) {
  if (inner.micro_batch >= 0) outer.micro_batch = inner.micro_batch;
  if (inner.layer >= 0) outer.layer = inner.layer;
  if (inner.part != Part::kNone) outer.part = inner.part;
  if (inner.from_stage >= 0) outer.from_stage = inner.from_stage;
  if (inner.to_stage >= 0) outer.to_stage = inner.to_stage;
  return outer;
}

// fwd: identity   bwd: identity, and this thread's place becomes the saved one (see the header)
struct PlaceMark : torch::autograd::Function<PlaceMark> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, StepPlace place) {
    ctx->saved_data["micro_batch"] = int64_t(place.micro_batch);
    ctx->saved_data["layer"] = int64_t(place.layer);
    ctx->saved_data["part"] = int64_t(place.part);
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    t_place = StepPlace{int(ctx->saved_data["micro_batch"].toInt()), int(ctx->saved_data["layer"].toInt()),
                        Part(ctx->saved_data["part"].toInt())};
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

const char* part_name(Part part) {
  switch (part) {
    case Part::kEmbedding: return "embedding";
    case Part::kAttention: return "attention";
    case Part::kMlp: return "MLP";
    case Part::kExperts: return "experts";
    case Part::kHead: return "head";
    case Part::kNone: break;
  }
  return "";
}

StepPlace current_place() { return t_place; }

bool in_backward() { return torch::autograd::get_current_graph_task_id() != -1; }

PlaceScope::PlaceScope(StepPlace place) : outer_(t_place) { t_place = merged(outer_, place); }
PlaceScope::~PlaceScope() { t_place = outer_; }

torch::Tensor in_place(StepPlace inner, const torch::Tensor& x,
                       const std::function<torch::Tensor(const torch::Tensor&)>& part) {
  const StepPlace outer = t_place, here = merged(outer, inner);
  const bool grad = torch::GradMode::is_enabled();
  torch::Tensor y;
  {
    PlaceScope scope(inner);
    y = part(grad && x.requires_grad() ? PlaceMark::apply(x, outer) : x);  // its backward: back outside the part
  }
  return grad && y.requires_grad() ? PlaceMark::apply(y, here) : y;  // its backward: into the part
}

}  // namespace picotron
