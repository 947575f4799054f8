// picotron/comm_titles.cpp — see comm_titles.h.
#include "picotron/comm_titles.h"

#include "picotron/saved_object.h"

namespace picotron {
namespace {

// An identity whose backward notes what the communication after it (in backward) carries.
struct NoteInBackward : torch::autograd::Function<NoteInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, Comm* comm,
                               const std::string& what) {
    ctx->saved_data["comm"] = saved_object(comm);
    ctx->saved_data["what"] = what;
    return x;  // the same values, one more node in the graph
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    saved_object_of<Comm*>(ctx->saved_data["comm"])->note(ctx->saved_data["what"].toStringRef());
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TensorMap titled(TensorMap map, Comm& comm, std::string forward, std::string backward) {
  return [map = std::move(map), &comm, forward = std::move(forward), backward = std::move(backward)](
             const torch::Tensor& x) {
    if (!comm.observed()) return map(x);
    comm.note(forward);
    return NoteInBackward::apply(map(x), &comm, backward);
  };
}

}  // namespace picotron
