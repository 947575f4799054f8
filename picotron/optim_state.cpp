// picotron/optim_state.cpp — AdamW's view for checkpoints and export. See optim_state.h.
#include "picotron/optim_state.h"

#include <stdexcept>

#include "picotron/optim.h"

namespace picotron {

namespace {
class AdamWState : public OptimizerState {
 public:
  explicit AdamWState(AdamW& adamw) : adamw_(adamw) {}
  int64_t steps_taken() const override { return adamw_.steps_taken(); }
  void set_steps_taken(int64_t t) override { adamw_.set_steps_taken(t); }

  std::vector<StatePiece> owned_state(const MeshCoords& here) override {
    std::vector<StatePiece> out;
    for (const auto& p : adamw_.params()) {  // whole local tensors; the copy that counts writes (dp, cp, tp replicas skip)
      if (!p.record.counts_once(here)) continue;
      const torch::Tensor state[] = {p.master, p.exp_avg, p.exp_avg_sq};
      for (int k = 0; k < 3; ++k)
        out.push_back({p.name + "/" + kStateKinds[k], p.record, 0, state[k].numel(), state[k].reshape({-1})});
    }
    return out;
  }

  void load_state(const StateReader& read) override {
    torch::NoGradGuard no_grad;
    for (auto& p : adamw_.params()) {
      const torch::Tensor state[] = {p.master, p.exp_avg, p.exp_avg_sq};
      for (int k = 0; k < 3; ++k)
        state[k].copy_(read(p.name + "/" + kStateKinds[k], p.record, 0, -1).view(state[k].sizes()));
      if (!p.master.is_same(p.param)) p.param.copy_(p.master);  // bf16/fp16: the rounding a step makes
    }
  }

  std::map<std::string, torch::Tensor> masters_by_name() override {
    std::map<std::string, torch::Tensor> out;
    for (auto& p : adamw_.params()) out[p.name] = p.master;
    return out;
  }
  std::map<std::string, torch::Tensor> weights_by_name() override {
    std::map<std::string, torch::Tensor> out;
    for (auto& p : adamw_.params()) out[p.name] = p.param;
    return out;
  }
  torch::ScalarType state_dtype() const override { return adamw_.params().front().master.scalar_type(); }

 private:
  AdamW& adamw_;
};
}  // namespace

std::unique_ptr<OptimizerState> adamw_state(AdamW& adamw) { return std::make_unique<AdamWState>(adamw); }

OptimizerState& state_of(Optimizer& optimizer, const std::string& what) {
  OptimizerState* state = optimizer.state();
  if (!state)
    throw std::invalid_argument(what + " needs the optimizer's state view (picotron/optim_state.h), and this "
                                "optimizer gives none");
  return *state;
}

}  // namespace picotron
