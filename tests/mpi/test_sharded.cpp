// Sharded parameters across a real mesh, under mpirun (ctest -R sharded):
//   * the global gradient norm over shards equals the norm of the full gradient on
//     every rank (each element counted once: tp pieces summed, dp/cp replicas once,
//     a tied embedding held by two pipeline stages once);
//   * an inf/nan in one shard on one rank makes every rank see a non-finite norm (the
//     fp16 overflow decision agrees everywhere);
//   * gather_full_tensors reassembles, on rank 0, the single-process parameters exactly.
// Runs on 4 ranks with two meshes: dp2 x tp2, and pp2 x tp2 (a stage split, tied embedding).
// Prints "N passed, N failed"; exits non-zero on any failure.
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "runtime/checkpoint/checkpoint.h"
#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "picotron/init.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/shard.h"

#include "mpi_check.h"

using namespace picotron;

namespace {

using testing::check;

LlamaConfig config() {
  LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.vocab_size = 51;  // odd: the embedding splits unevenly over tp
  c.tie_word_embeddings = true;
  return c;
}

// A tensor-parallel-like plan: column projections split by rows, row projections by
// columns, the embedding by vocabulary rows; with pp > 1, layers in contiguous stages,
// the embedding on the first stage and (tied) a copy for the head on the last.
ShardPlan test_plan(const LlamaConfig& c, const MeshShape& shape, const MeshCoords& here) {
  ShardPlan plan;
  const int64_t per_stage = c.num_hidden_layers / shape.pp;
  for (auto [name, r] : replicated_plan(c)) {
    const auto ends = [&](const char* s) { return name.size() > strlen(s) && name.rfind(s) == name.size() - strlen(s); };
    if (ends("q_proj.weight") || ends("k_proj.weight") || ends("v_proj.weight") || ends("gate_proj.weight") ||
        ends("up_proj.weight") || name == "model.embed_tokens.weight")
      r.split(0, Axis::kTp, here.tp, shape.tp);
    if (ends("o_proj.weight") || ends("down_proj.weight")) r.split(1, Axis::kTp, here.tp, shape.tp);
    if (name.rfind("model.layers.", 0) == 0) {
      r.stage = int(std::stoll(name.substr(13)) / per_stage);
      if (r.stage != here.pp) continue;  // another stage's layer
    } else if (name == "model.norm.weight") {
      r.stage = shape.pp - 1;
      if (here.pp != r.stage) continue;
    } else if (name == "model.embed_tokens.weight") {
      r.stage = 0;  // owned by stage 0; the last stage holds a copy for the tied head
      if (here.pp != 0 && here.pp != shape.pp - 1) continue;
    }
    plan[name] = r;
  }
  return plan;
}

// A deterministic "gradient" for every full parameter.
torch::Tensor full_grad(const std::string& name, const std::vector<int64_t>& shape) {
  return initial_value(name + "#grad", shape, /*seed=*/99, /*init_std=*/1.0).to(torch::kFloat64);
}

void run_mesh(Comm& world, const MeshShape& shape) {
  const int rank = world.rank();
  const std::string tag = "dp" + std::to_string(shape.dp) + " pp" + std::to_string(shape.pp) + " tp" +
                          std::to_string(shape.tp) + ": ";
  Mesh mesh(world, shape);
  const auto c = config();
  const ShardPlanOf shard_plan_of = [&](const MeshCoords& here) { return test_plan(c, shape, here); };
  const ShardPlan plan = shard_plan_of(mesh.coords());
  LlamaForCausalLM model(c, plan, torch::TensorOptions().dtype(torch::kFloat64));
  init_parameters(*model, plan, /*seed=*/5, /*init_std=*/0.02);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : model->named_parameters()) named.emplace_back(p.key(), p.value());
  AdamW opt(named, {}, plan);

  // ---- the global norm of the full gradient ----
  double full_sq = 0;
  for (const auto& [name, s] : parameter_shapes(c)) full_sq += full_grad(name, s).pow(2).sum().item<double>();
  const double expected = std::sqrt(full_sq);
  for (auto& p : opt.params()) p.main_grad.copy_(local_slice(full_grad(p.name, p.record.full_shape), p.record));
  const double norm = global_grad_norm(opt.params(), mesh.world(), mesh.coords());
  check(std::abs(norm - expected) <= 1e-12 * expected,
        tag + "global norm " + std::to_string(norm) + " equals the full gradient's " + std::to_string(expected), rank);

  // ---- one inf in one shard of one rank: every rank sees it ----
  // Rank 1 (tp 1) holds a tp piece that counts. (A copy that does not count is a replica:
  // after the gradient sync it equals the one that counts, inf included.)
  TrainableParam* counted = nullptr;
  for (auto& p : opt.params())
    if (!counted && p.record.is_split() && p.record.counts_once(mesh.coords())) counted = &p;
  for (double bad : {double(INFINITY), double(NAN)}) {
    if (rank == 1) counted->main_grad.view({-1})[0] = bad;
    const double n = global_grad_norm(opt.params(), mesh.world(), mesh.coords());
    check(!std::isfinite(n), tag + "a non-finite gradient on rank 1 makes every rank's norm non-finite", rank);
    if (rank == 1) counted->main_grad.view({-1})[0] = 0.0;
  }

  // ---- gather: the single-process parameters, exactly ----
  std::map<std::string, torch::Tensor> local;
  for (auto& p : opt.params()) local[p.name] = p.param;
  const auto full = gather_full_tensors(local, c, shape, shard_plan_of, torch::kFloat64, world);
  if (rank == 0) {
    LlamaForCausalLM whole(c);
    whole->to(torch::kFloat64);
    init_parameters(*whole, 5, 0.02);
    const auto ref = whole->named_parameters();
    bool all_equal = full.size() == ref.size();
    for (const auto& [name, t] : full) all_equal = all_equal && torch::equal(t, ref[name]);
    check(all_equal, tag + "gathered parameters equal the single-process init", rank);
  } else {
    check(full.empty(), tag + "only rank 0 receives the full tensors", rank);
  }
}

}  // namespace

int main() {
  return testing::run_on_ranks(4, [](Comm& world) {
    run_mesh(world, MeshShape{/*dp=*/2, /*pp=*/1, /*cp=*/1, /*tp=*/2});
    run_mesh(world, MeshShape{/*dp=*/1, /*pp=*/2, /*cp=*/1, /*tp=*/2});
  });
}
