// tensor_parallel/tensor_parallel.cpp — see tensor_parallel.h for the picture and the math.
#include "tensor_parallel/tensor_parallel.h"
#include "picotron/saved_object.h"
#include "picotron/dtype.h"

#include <algorithm>
#include <stdexcept>

namespace picotron {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// The tp Comm through autograd (picotron/saved_object.h). The graph must not outlive the
// Comm (train.cpp's mesh outlives every step's graph).
Comm& from_saved(AutogradContext* ctx) { return *saved_object_of<Comm*>(ctx->saved_data["tp"]); }

// f: fwd identity, bwd all-reduce over tp. (Each sum goes into a fresh contiguous tensor,
// never in place on one autograd may still need.)
struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* tp) {
    ctx->saved_data["tp"] = saved_object(tp);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BEGIN ASSIGNMENT tp.f_and_g
    auto dx = grads[0].contiguous().clone();  // [...]
    from_saved(ctx).all_reduce(dx, ReduceOp::kSum, carries("f: the gradient of the block's input, summed over tp"));
    return {dx, torch::Tensor()};
    // END ASSIGNMENT
  }
};

// g: fwd all-reduce over tp, bwd identity.
struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* tp) {
    // BEGIN ASSIGNMENT tp.f_and_g
    auto y = x.contiguous().clone();  // [...]
    tp->all_reduce(y, ReduceOp::kSum, carries("g: each rank's partial result, summed over tp"));
    return y;
    // END ASSIGNMENT
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// [B, S/tp, H] -> [B, S, H]: every rank's chunk of the sequence, in rank order.
torch::Tensor all_gather_seq(const torch::Tensor& x, Comm& tp) {
  // (Our activations are [B, S, H]; the sequence must lead for rank chunks to stack, so
  // this costs a transposed copy each way. Megatron keeps [S, B, H] throughout.)
  // BEGIN ASSIGNMENT tp.sequence_parallel
  auto chunk = x.transpose(/*dim0=*/0, /*dim1=*/1).contiguous();  // [S/tp, B, H]
  auto sizes = chunk.sizes().vec();
  sizes[0] *= tp.size();
  auto whole = torch::empty(sizes, chunk.options());  // [S, B, H]
  tp.all_gather(whole, chunk, carries("sequence parallelism: every tp rank's chunk of the sequence, gathered"));
  return whole.transpose(/*dim0=*/0, /*dim1=*/1);  // [B, S, H]
  // END ASSIGNMENT
}

// [B, S, H] partial sums -> [B, S/tp, H]: this rank's chunk of the sum over tp.
torch::Tensor reduce_scatter_seq(const torch::Tensor& x, Comm& tp) {
  // BEGIN ASSIGNMENT tp.sequence_parallel
  auto whole = x.transpose(/*dim0=*/0, /*dim1=*/1).contiguous();  // [S, B, H]
  auto sizes = whole.sizes().vec();
  sizes[0] /= tp.size();
  auto chunk = torch::empty(sizes, whole.options());  // [S/tp, B, H]
  tp.reduce_scatter(chunk, whole, ReduceOp::kSum, carries("sequence parallelism: partial results summed, each tp "
                                                          "rank keeping its chunk of the sequence"));
  return chunk.transpose(/*dim0=*/0, /*dim1=*/1);  // [B, S/tp, H]
  // END ASSIGNMENT
}

// fwd: all-gather along S   bwd: reduce-scatter along S
struct GatherSequence : torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* tp) {
    ctx->saved_data["tp"] = saved_object(tp);
    return all_gather_seq(x, *tp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter_seq(grads[0], from_saved(ctx)), torch::Tensor()};
  }
};

// fwd: reduce-scatter along S   bwd: all-gather along S
struct ReduceScatterSequence : torch::autograd::Function<ReduceScatterSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, Comm* tp) {
    ctx->saved_data["tp"] = saved_object(tp);
    return reduce_scatter_seq(x, *tp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather_seq(grads[0], from_saved(ctx)), torch::Tensor()};
  }
};

// Cross-entropy from vocabulary shards: three all-reduces of N numbers forward, none backward.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t vocab_offset, Comm* tp_comm) {
    Comm& tp = *tp_comm;
    torch::NoGradGuard no_grad;
    // BEGIN ASSIGNMENT tp.vocab_parallel_cross_entropy
    const int64_t n = logits.size(0), local_vocab = logits.size(1);
    auto m = std::get<0>(logits.max(/*dim=*/1)).contiguous();                // [N] local max
    tp.all_reduce(m, ReduceOp::kMax, carries("the loss: each row's largest logit over the vocabulary shards"));  // [N]
    auto e = (logits - m.unsqueeze(1)).exp_();                                // [N, V/tp] exp(z - m)
    auto z = e.sum(/*dim=*/1).contiguous();                                    // [N] local sum
    tp.all_reduce(z, ReduceOp::kSum, carries("the loss: each row's sum of exp over the vocabulary shards"));  // [N] Z
    auto local_t = targets - vocab_offset;                                     // [N] target's local column
    auto mine = (local_t >= 0).logical_and(local_t < local_vocab);            // [N] this rank holds it
    auto index = local_t.clamp(0, local_vocab - 1).unsqueeze(1);              // [N, 1]
    auto target_logit = (logits.gather(/*dim=*/1, index).squeeze(1) - m).masked_fill(~mine, 0.0);  // [N] z_t - m, or 0
    target_logit = target_logit.contiguous();
    tp.all_reduce(target_logit, ReduceOp::kSum, carries("the loss: each row's target logit, from the rank holding it"));  // [N]
    ctx->save_for_backward({e.div_(z.unsqueeze(1)), index, mine});             // softmax [N, V/tp]
    ctx->saved_data["n"] = n;
    return (z.log() - target_logit).mean();                                    // scalar
    // END ASSIGNMENT
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // BEGIN ASSIGNMENT tp.vocab_parallel_cross_entropy
    auto saved = ctx->get_saved_variables();
    auto dlogits = saved[0].clone();                                           // softmax [N, V/tp]
    const auto& index = saved[1];
    const auto mine = saved[2].to(dlogits.scalar_type()).unsqueeze(1);        // [N, 1]
    dlogits.scatter_add_(/*dim=*/1, index, -mine);                             // - one-hot of the target
    dlogits.mul_(grads[0] / double(ctx->saved_data["n"].toInt()));            // d(mean) / dz
    return {dlogits, torch::Tensor(), torch::Tensor(), torch::Tensor()};
    // END ASSIGNMENT
  }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, Comm& tp) { return CopyToTp::apply(x, &tp); }
torch::Tensor reduce_from_tp(const torch::Tensor& x, Comm& tp) { return ReduceFromTp::apply(x, &tp); }
torch::Tensor gather_sequence(const torch::Tensor& x, Comm& tp) { return GatherSequence::apply(x, &tp); }
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Comm& tp) {
  return ReduceScatterSequence::apply(x, &tp);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           int64_t vocab_offset, Comm& tp) {
  return VocabParallelCrossEntropy::apply(logits, targets, vocab_offset, &tp);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(torch::Tensor w, int64_t offset, Comm& tp, bool sp)
    : vocab_offset(offset), sequence_parallel(sp), tp_(&tp) {
  weight = register_parameter("weight", w);
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  auto local = ids - vocab_offset;                                            // [B, S]
  auto mine = (local >= 0).logical_and(local < weight.size(0));              // [B, S]
  auto rows = torch::embedding(weight, local.clamp(0, weight.size(0) - 1));   // [B, S, H]
  rows = rows.masked_fill(~mine.unsqueeze(-1), 0.0);                           // zeros for others' ids
  if (sequence_parallel) return reduce_scatter_sequence(rows, *tp_);         // [B, S/tp, H]
  return reduce_from_tp(rows, *tp_);                                          // [B, S, H] (g)
}

void shard_for_tensor_parallel(ShardPlan& plan, const LlamaConfig& c, int index, int count) {
  // Whole heads, MLP columns and vocabulary rows per rank (check_flag_rules() says so naming the
  // flags; checked here too for callers that skip it).
  for (auto [what, n] : {std::pair{"attention heads", c.num_attention_heads}, {"key/value heads", c.num_key_value_heads},
                         {"intermediate size", c.intermediate_size}, {"vocabulary size", c.vocab_size}})
    TORCH_CHECK(n % count == 0, "tensor parallelism: ", what, " ", n, " is not divisible by --tp ", count);
  for (auto& [name, r] : plan) {
    for (const char* column : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight"})
      if (ends_with(name, column)) r.split(/*dim=*/0, Axis::kTp, index, count);  // output features
    for (const char* row : {"o_proj.weight", "down_proj.weight"})
      if (ends_with(name, row)) r.split(/*dim=*/1, Axis::kTp, index, count);     // input features
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
      r.split(/*dim=*/0, Axis::kTp, index, count);                              // vocabulary rows
  }
}

void apply_tensor_parallel(LlamaForCausalLM& model, const ShardPlan& plan, Comm& tp, bool sp) {
  auto& m = *model;
  // f / g, or their sequence versions under SP: [B, S(/tp), H] -> [B, S, H] -> [B, S(/tp), H].
  BlockMap enter = [&tp](const torch::Tensor& x) { return copy_to_tp(x, tp); };
  BlockMap exit = [&tp](const torch::Tensor& x) { return reduce_from_tp(x, tp); };
  if (sp) {
    enter = [&tp](const torch::Tensor& x) { return gather_sequence(x, tp); };
    exit = [&tp](const torch::Tensor& x) { return reduce_scatter_sequence(x, tp); };
  }
  // Blocks: f before the column-parallel projections, g after the row-parallel one.
  // (The projections themselves are plain linears of the plan's local shapes.)
  // A mixture-of-experts layer (expert_parallel/moe.h) keeps its experts whole and runs them on
  // the tokens this rank holds: all of them (the same on every tp rank), or S/tp under SP
  // (then, like the norms, its gradients are summed over tp, and its balancing statistics
  // too: router_stats_sum).
  for (auto& [index, layer] : m.model->layers->items) {
    layer->self_attn->enter = enter, layer->self_attn->exit = exit;
    if (layer->mlp) layer->mlp->enter = enter, layer->mlp->exit = exit;
  }
  // The vocabulary slice: from the embedding or the lm_head, whichever this rank holds
  // (a middle pipeline stage holds neither, and needs no offset).
  const bool has_embedding = plan.count("model.embed_tokens.weight") > 0;
  if (!has_embedding && !plan.count("lm_head.weight")) return;
  const auto& vocab = plan.at(has_embedding ? "model.embed_tokens.weight" : "lm_head.weight");
  TORCH_CHECK(vocab.is_split() && vocab.split_axis == Axis::kTp && vocab.index == tp.rank(),
              "tensor parallelism: the plan does not split the vocabulary over this tp group");
  const int64_t vocab_offset = vocab.slice().offset;  // this rank's rows [offset, offset + V/tp)
  if (!m.model->embed_tokens.is_empty()) {
    auto weight = m.model->embed_tokens.ptr()->named_parameters(/*recurse=*/false)["weight"];
    replace_slot(*m.model, "embed_tokens", m.model->embed_tokens,
                 torch::nn::AnyModule(VocabParallelEmbedding(weight, vocab_offset, tp, sp)));
  }
  // Head: [B, S, H] -> f -> [B, S, V/tp] logits; loss: vocab-parallel cross-entropy.
  LlamaForCausalLMImpl* self = &m;
  m.head = [self, enter](const torch::Tensor& hidden) {
    return torch::linear(enter(hidden), self->head_weight());  // [B, S(/tp), H] -> [B, S, V/tp]
  };
  m.loss_fn = [self, &tp, vocab_offset](const torch::Tensor& hidden, const torch::Tensor& targets) {
    auto logits = self->logits(hidden);                                   // [B, S, V/tp]
    const auto wide = accumulate_type(logits.scalar_type());
    return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}).to(wide),  // [N, V/tp]
                                        targets.reshape({-1}), vocab_offset, tp);          // [N]
  };
}

void sync_sequence_parallel_grads(std::vector<TrainableParam>& params, Comm& tp) {
  std::vector<torch::Tensor> grads;  // the main grads of what tp does not split: the norm gains
  for (auto& p : params) {
    const auto& axes = p.record.replica_axes;
    if (std::find(axes.begin(), axes.end(), Axis::kTp) != axes.end()) grads.push_back(p.main_grad);
  }
  // [(2L + 1) H] in one call instead of one per gain
  all_reduce_together(grads, tp, ReduceOp::kSum, carries("sequence parallelism: the norm gains' gradients, summed over tp"));
}

}  // namespace picotron
