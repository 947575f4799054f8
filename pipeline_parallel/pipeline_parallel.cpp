// pipeline_parallel/pipeline_parallel.cpp — see pipeline_parallel.h for the picture, the
// math and the communication; schedules.h for the order of the actions.
#include "pipeline_parallel/pipeline_parallel.h"
#include "picotron/step_place.h"

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>
#include <stdexcept>


namespace picotron {

// ---- the stage split (pure) ---------------------------------------------------------
namespace {

const std::string kEmbedding = "model.embed_tokens.weight";

// The pp rank that owns parameter `name`: the embedding is virtual stage 0's, layer i
// the virtual stage whose range holds i, the final norm and lm_head the last one's.
int owner_of(const std::string& name, const LlamaConfig& c, int P, int v, bool v_shape) {
  const std::string layer_prefix = "model.layers.";
  int vs = P * v - 1;
  if (name == kEmbedding) vs = 0;
  else if (name.rfind(layer_prefix, 0) == 0) {
    const int64_t layer = std::stoll(name.substr(layer_prefix.size()));
    for (vs = 0; vs < P * v; ++vs) {
      const auto r = stage_layers(c.num_hidden_layers, P, v, vs);
      if (layer >= r.first && layer < r.first + r.count) break;
    }
  }
  return stage_rank(P, vs, v_shape);
}

// A message's micro-batch and the virtual stages it leaves and reaches (an activation goes
// one stage on, its gradient one back): what observers of a run print (picotron/step_place.h).
StepPlace message_place(const Transfer& t) {
  StepPlace at = StepPlace::of_micro_batch(t.micro);
  at.from_stage = t.from_stage;
  at.to_stage = t.from_stage + (t.kind == Transfer::kActivation ? 1 : -1);
  return at;
}

}  // namespace

void keep_pipeline_stage(ShardPlan& plan, const LlamaConfig& c, int stage, int P, int v, bool v_shape) {
  for (auto it = plan.begin(); it != plan.end();) {
    auto& record = it->second;
    record.stage = owner_of(it->first, c, P, v, v_shape);
    // The last stage keeps a copy of a tied embedding: its head multiplies by it (in the
    // V the last stage is rank 0's, which holds the embedding itself).
    const bool tied_copy =
        it->first == kEmbedding && c.tie_word_embeddings && stage == stage_rank(P, P * v - 1, v_shape);
    if (record.stage == stage || tied_copy) ++it;
    else it = plan.erase(it);
  }
}

std::string pipeline_summary(const LlamaConfig& c, PipelineSchedule s, int P, int v) {
  v = schedule_chunks(s, v);
  const int last_rank = stage_rank(P, P * v - 1, is_v_shape(s));
  std::ostringstream out;
  out << "pipeline: " << P << " stages" << (v > 1 ? " x " + std::to_string(v) + " chunks" : "") << ", schedule "
      << schedule_name(s);
  for (int r = 0; r < P; ++r) {
    out << "\n  pp rank " << r << ":";
    if (r == 0) out << " embedding,";
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto range = stage_layers(c.num_hidden_layers, P, v, virtual_stage(P, r, chunk, is_v_shape(s)));
      out << (chunk ? "," : "") << " layers " << range.first << "-" << range.first + range.count - 1;
    }
    if (r == last_rank)
      out << ", final norm, "
          << (!c.tie_word_embeddings ? "lm_head" : r == 0 ? "head (tied: the embedding itself)" : "head (tied: a copy of the embedding)");
  }
  return out.str();
}

// ---- the executor ---------------------------------------------------------------------
Pipeline::Pipeline(LlamaForCausalLM& model, Mesh& mesh, const Options& opts, torch::TensorOptions activations)
    : model_(model), mesh_(mesh), opts_(opts), act_opts_(activations), P_(mesh.shape().pp), rank_(mesh.coords().pp) {
  v_shape_ = is_v_shape(opts_.schedule);
  opts_.virtual_stages = schedule_chunks(opts_.schedule, opts_.virtual_stages);
  last_rank_ = stage_rank(P_, P_ * opts_.virtual_stages - 1, v_shape_);  // the loss: P-1, or 0 in the V
  const bool ends = rank_ == 0 || rank_ == last_rank_;
  // In the V rank 0 holds the first and the last stage: one embedding, no group needed.
  const bool two_copies = model->config.tie_word_embeddings && P_ > 1 && last_rank_ != 0;
  holds_tied_embedding_ = two_copies && ends;
  if (two_copies)  // collective over pp: every rank splits
    embedding_group_ = mesh.pp().split(ends ? 0 : 1, rank_, ends ? "embed" : "embed/none");
  if (splits_backward(opts_.schedule)) weight_queue_ = defer_weight_gradients(model);
  positions_ = opts_.positions.defined() ? opts_.positions  // a cp rank's tokens
                                         : torch::arange(opts_.seq_len, torch::kInt64);  // RoPE sees all S tokens, also under SP
  program_ = pipeline_programs(opts_.schedule, P_, int(opts_.grad_acc_steps), opts_.virtual_stages)[rank_];
  eval_program_ = forward_only_programs(opts_.schedule, P_, int(opts_.grad_acc_steps), opts_.virtual_stages)[rank_];
  mesh.world().barrier(carries("the pipeline trace's time zero: every rank leaves together"));
  t0_ = std::chrono::steady_clock::now();
}

torch::Tensor Pipeline::run_step(int64_t step, const BatchLoader& loader, double loss_scale, const Hooks& hooks) {
  step_ = step;
  loss_sum_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(act_opts_.device()));
  for (const PipelineStep& step : program_) {  // p2p_program.h: [a group of sends and receives] [an action]
    if (!step.exchange.empty()) exchange(step.exchange);
    if (!step.action) continue;
    const PipelineAction& a = *step.action;
    if (hooks.before_action)
      hooks.before_action(action_title(a, virtual_stage(P_, rank_, a.chunk, v_shape_), bool(weight_queue_)));
    if (a.kind == PipelineAction::kForward) {
      forward(a, loader, loss_scale);
      continue;
    }
    if (hooks.before_backward) hooks.before_backward();
    if (a.kind == PipelineAction::kBackward) backward(a);
    else {
      const double start = now_us();
      weight_queue_->run(a.micro, a.chunk);
      record(TraceEvent::kWeight, a.micro, a.chunk, start);
    }
    if (hooks.after_backward) hooks.after_backward();
  }
  TORCH_CHECK(alive_.empty(), "pipeline: micro-batches left without a backward");
  TORCH_CHECK(inbox_.empty() && outbox_.empty(), "pipeline: tensors left unsent or unused");
  TORCH_CHECK(!weight_queue_ || weight_queue_->waiting() == 0, "pipeline: weight gradients left without a W");
  mesh_.pp().broadcast(loss_sum_, last_rank_, carries("the loss of the step, from the stage that computed it"));  // every rank logs it
  return loss_sum_;
}

torch::Tensor Pipeline::evaluate(int64_t index, const BatchLoader& loader) {
  torch::NoGradGuard no_grad;
  const bool trace = opts_.trace;
  opts_.trace = false;  // the trace shows training steps only
  step_ = index;
  loss_sum_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(act_opts_.device()));
  for (const PipelineStep& step : eval_program_) {
    if (!step.exchange.empty()) exchange(step.exchange);
    if (step.action) forward(*step.action, loader, /*loss_scale=*/1.0);
  }
  alive_.clear();  // no backward: the forwards' records go
  opts_.trace = trace;
  TORCH_CHECK(inbox_.empty() && outbox_.empty(), "pipeline: tensors left unsent or unused");
  mesh_.pp().broadcast(loss_sum_, last_rank_, carries("the validation loss, from the stage that computed it"));
  return loss_sum_;
}

void Pipeline::forward(const PipelineAction& a, const BatchLoader& loader, double loss_scale) {
  const int v = opts_.virtual_stages, vs = virtual_stage(P_, rank_, a.chunk, v_shape_);
  const auto layers = stage_layers(model_->config.num_hidden_layers, P_, v, vs);
  InFlight f;
  Transfer t;
  torch::Tensor x;
  if (model_->layer_stats) model_->layer_stats->start();  // this micro-batch's statistics, afresh
  if (receives(a, P_, v, rank_, &t, v_shape_)) {  // (the V's bottom: from its own outbox)
    Message in = take(t.peer == rank_ ? outbox_ : inbox_, t);
    f.input = in.x.requires_grad_(true);  // [B, S, H]: a leaf, so backward leaves its gradient in .grad
    x = f.input;
    for (auto& side : in.side) f.side_in.push_back(side.requires_grad_(true));  // the earlier stages' records
    if (opts_.side.carry) opts_.side.carry(f.side_in);
  }
  const double start = now_us();
  PlaceScope in_micro_batch(StepPlace::of_micro_batch(a.micro));  // (for whoever observes: picotron/step_place.h)
  Batch batch;
  if (vs == 0 || vs == P_ * v - 1) batch = loader.micro_batch(step_, a.micro);  // first: tokens, last: targets
  if (vs == 0) x = model_->embed(batch.inputs.to(act_opts_.device()));        // [B, S, H]
  auto h = model_->run_layers(x, positions_, layers.first, layers.count);      // [B, S, H]
  if (vs == P_ * v - 1) {
    // The single process's loss: each micro-batch's mean divided by m, summed over m.
    auto loss = model_->head_loss(h, batch.targets.to(act_opts_.device())) /
                double(opts_.grad_acc_steps);
    loss_sum_ += loss.detach().to(torch::kFloat64);
    f.output = loss * loss_scale;
  } else {
    f.output = h;
    if (opts_.side.take) f.side_out = opts_.side.take();  // the earlier stages' records plus this stage's
  }
  record(TraceEvent::kForward, a.micro, a.chunk, start);
  if (sends(a, P_, v, rank_, &t, v_shape_)) {
    Message out{h.detach().contiguous(), {}};  // sent when the next stage asks
    for (const auto& side : f.side_out) out.side.push_back(side.detach().contiguous());
    outbox_[key(t)] = std::move(out);
  }
  alive_[{a.micro, a.chunk}] = std::move(f);
}

void Pipeline::backward(const PipelineAction& a) {
  const int v = opts_.virtual_stages;
  auto it = alive_.find({a.micro, a.chunk});
  TORCH_CHECK(it != alive_.end(), "pipeline: backward of micro-batch ", a.micro, " chunk ", a.chunk,
              " before its forward");
  InFlight f = std::move(it->second);
  alive_.erase(it);  // the graph and the activations go when this backward is done
  Transfer t;
  // dL/d(output) [B, S, H] and dL/d(side_out) from the next stage; none for the loss
  std::vector<torch::Tensor> outputs{f.output}, grads;
  if (receives(a, P_, v, rank_, &t, v_shape_)) {  // (the V's bottom: from its own outbox)
    Message in = take(t.peer == rank_ ? outbox_ : inbox_, t);
    outputs.insert(outputs.end(), f.side_out.begin(), f.side_out.end());
    grads.push_back(in.x);
    grads.insert(grads.end(), in.side.begin(), in.side.end());
  }
  const double start = now_us();
  if (weight_queue_) weight_queue_->begin(a.micro, a.chunk);  // zb-h1: dW waits for W
  PlaceScope in_micro_batch(StepPlace::of_micro_batch(a.micro));
  torch::autograd::backward(outputs, grads);  // (no grads: the loss, dL/dL = 1)
  if (weight_queue_) weight_queue_->end();
  record(TraceEvent::kBackward, a.micro, a.chunk, start);
  if (sends(a, P_, v, rank_, &t, v_shape_)) {
    Message out{f.input.grad(), {}};  // dL/d(input), for the previous stage
    for (const auto& side : f.side_in)  // (zeros where no loss term reached them)
      out.side.push_back(side.grad().defined() ? side.grad() : torch::zeros_like(side));
    outbox_[key(t)] = std::move(out);
  }
}

// One group of the program: this rank's sends and receives of one round, posted together
// and waited together (NCCL: ncclSend/ncclRecv inside ncclGroupStart/End; MPI:
// MPI_Isend/MPI_Irecv, then a wait for all). NCCL has no tags, so neither do we: every
// message between two ranks carries tag 0, and the program's order is what matches them.
void Pipeline::exchange(const std::vector<PipelineStep::Op>& group) {
  const double start = now_us();
  // BEGIN ASSIGNMENT pp.send_recv
  // Shapes are known in advance: no handshake. SP keeps S/tp tokens per tp rank.
  const int64_t tokens = opts_.sequence_parallel ? opts_.seq_len / mesh_.shape().tp : opts_.seq_len;
  std::vector<P2POp> ops;
  for (const auto& op : group) {
    const bool activation = op.t.kind == Transfer::kActivation;
    const char* x = activation ? "pipeline: an activation" : "pipeline: an activation's gradient";
    const char* side_tensor = activation ? "pipeline: a side tensor, after its activation"
                                         : "pipeline: a side tensor's gradient, after its activation's";
    const StepPlace at = message_place(op.t);  // its micro-batch and stages, for whoever observes
    if (op.send) {
      const Message m = take(outbox_, op.t);  // made by an earlier action
      ops.push_back({P2POp::kSend, m.x, op.t.peer, /*tag=*/0, x, at});
      for (const auto& side : m.side) ops.push_back({P2POp::kSend, side, op.t.peer, /*tag=*/0, side_tensor, at});  // after it, in order
    } else {
      Message m{torch::empty({opts_.micro_batch_size, tokens, model_->config.hidden_size}, act_opts_),  // [B, S, H]
                opts_.side.buffers ? opts_.side.buffers() : std::vector<torch::Tensor>{}};
      ops.push_back({P2POp::kRecv, m.x, op.t.peer, /*tag=*/0, x, at});
      for (const auto& side : m.side) ops.push_back({P2POp::kRecv, side, op.t.peer, /*tag=*/0, side_tensor, at});
      inbox_[key(op.t)] = std::move(m);  // for the action that needs it
    }
  }
  mesh_.pp().batch_p2p(ops);  // posted together, waited together
  // END ASSIGNMENT
  for (const auto& op : group) record(op.send ? TraceEvent::kSend : TraceEvent::kRecv, op.t.micro, op.t.kind, start, op.t.peer);
}

Pipeline::Message Pipeline::take(std::map<TensorKey, Message>& box, const Transfer& t) {
  const auto it = box.find(key(t));
  TORCH_CHECK(it != box.end(), "pipeline: ", t.kind == Transfer::kActivation ? "activation" : "gradient", " of micro-batch ",
              t.micro, " from virtual stage ", t.from_stage, " is not here (the program is out of order)");
  Message m = std::move(it->second);
  box.erase(it);
  return m;
}

void Pipeline::sync_tied_embedding(std::vector<TrainableParam>& params) {
  if (!holds_tied_embedding_) return;  // untied, pp = 1, or a middle stage
  for (auto& p : params)
    if (p.name == kEmbedding)  // lookup + head parts
      embedding_group_.all_reduce(p.main_grad, ReduceOp::kSum, carries("the tied embedding's gradient: the lookup's part + the head's"));
}

// ---- the trace --------------------------------------------------------------------------
double Pipeline::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
}

void Pipeline::record(TraceEvent::Kind k, int micro, int chunk, double start, int peer) {
  if (!opts_.trace) return;
  trace_.push_back({k, micro, chunk, step_ + 1, start, now_us() - start, peer});
}

}  // namespace picotron
