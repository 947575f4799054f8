// The planner (runtime/planner/layout_search.h): the Playbook cheatsheet's cases as searches, and
// the cost model's pieces (layout_cost.h) one by one. Pure: nothing allocated, no ranks.
//
// Test: build/tests/unit_tests "[plan]"
#include <algorithm>
#include <set>

#include <catch2/catch.hpp>

#include "expert_parallel/expert_parallel.h"
#include "runtime/cli/train_config.h"
#include "runtime/cli/flags.h"
#include "runtime/observe/holdings.h"
#include "runtime/planner/layout_search.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "tensor_parallel/tensor_parallel.h"

using namespace picotron;

namespace {

// As train.cpp's shard_plan_for: tensor parallelism cuts the projections, pipeline parallelism
// keeps a stage's layers, expert parallelism this ep rank's experts.
ShardPlan shard_plan_for(const TrainConfig& cfg, const MeshCoords& here) {
  ShardPlan plan = replicated_plan(cfg.llama);
  if (cfg.tp > 1) shard_for_tensor_parallel(plan, cfg.llama, here.tp, cfg.tp);
  if (cfg.pp > 1) keep_pipeline_stage(plan, cfg.llama, here.pp, cfg.pp, cfg.pp_virtual_stages,
                                      is_v_shape(parse_schedule(cfg.pp_schedule)));
  if (cfg.ep > 1) keep_local_experts(plan, cfg.llama, here.dp % cfg.ep, cfg.ep);
  return plan;
}

RunConfig planning(const std::string& model, int gpus, int64_t seq_len) {
  RunConfig c;
  c.model = model;
  c.llama = preset(model);
  c.dtype = Precision::kBF16;
  c.seq_len = seq_len;
  c.planner.gpus = gpus;
  c.planner.global_batch_tokens = 1 << 20;
  return c;
}

int axes_used(const RunConfig& c) { return (c.dp > 1) + (c.tp > 1) + (c.pp > 1) + (c.cp > 1); }

}  // namespace

TEST_CASE("plan: a model under 10B on one node gets a single technique", "[plan]") {
  const RunConfig base = planning("llama3-8b", 8, 4096);
  const LayoutSearch r = search_layouts(base, 8, shard_plan_for, 5);
  REQUIRE(r.fit > 0);
  REQUIRE(!r.best.empty());
  CHECK(r.considered >= r.valid);
  CHECK(r.valid >= r.fit);
  const RunConfig& top = r.best[0].cfg;
  INFO(command_line(r.best[0]));
  CHECK(axes_used(top) == 1);                              // TP alone, or DP / ZeRO alone
  CHECK((top.tp == 8 || (top.dp == 8 && top.zero >= 1)));  // plain DP does not fit 8B's 144 GB of state
  CHECK(r.best[0].peak_bytes <= 80e9);
}

TEST_CASE("plan: 70B on 64 GPUs gets one of the cheatsheet's 10B+ answers", "[plan]") {
  // TP in the node with PP or with ZeRO-3, or ZeRO-3 alone; no CP for a 4096-token sequence.
  const RunConfig base = planning("llama3-70b", 64, 4096);
  const LayoutSearch r = search_layouts(base, 64, shard_plan_for, 5);
  REQUIRE(!r.best.empty());
  const RunConfig& top = r.best[0].cfg;
  INFO(command_line(r.best[0]));
  const bool tp_with_pp_or_zero3 = top.tp > 1 && top.tp <= 8 && (top.pp > 1 || top.zero == 3);
  const bool zero3_alone = top.dp == 64 && top.zero == 3;
  CHECK((tp_with_pp_or_zero3 || zero3_alone));
  CHECK(top.cp == 1);
  // DP alone without ZeRO-3 cannot fit 70B: 16 bytes a parameter is 1.1 TB.
  for (const Candidate& c : r.best) CHECK((c.cfg.dp < 64 || c.cfg.zero == 3));
}

TEST_CASE("plan: GPU-poor (one 24 GB GPU, a 1B model) gets full recompute and accumulation", "[plan]") {
  RunConfig base = planning("llama3.2-1b", 1, 1024);  // at 2048 nothing fits in 24 GB without offloading
  base.planner.gpu_memory_gb = 24;
  const LayoutSearch r = search_layouts(base, 1, shard_plan_for, 50);
  REQUIRE(!r.best.empty());
  // The optimizer offloaded (ZeRO-1 at dp 1) and no recompute ranks first: its CPU step
  // (2.7 s, layout_cost.h) costs less than a recomputed forward (7 s); test_plan_offload.cpp.
  CHECK(r.best[0].cfg.zero_offload);
  // Without offloading, the cheatsheet's answer: full recompute and accumulation.
  const auto on_gpu =
      std::find_if(r.best.begin(), r.best.end(), [](const Candidate& c) { return !c.cfg.zero_offload; });
  REQUIRE(on_gpu != r.best.end());
  const RunConfig& top = on_gpu->cfg;
  INFO(command_line(*on_gpu));
  CHECK(top.recompute == "full");
  CHECK(top.grad_acc_steps > 1);
  CHECK(tokens_per_step(top) >= double(base.planner.global_batch_tokens));
  CHECK(cheatsheet_rule(*on_gpu, hardware_of(base.planner)).find("GPU-poor") != std::string::npos);
}

TEST_CASE("plan: when nothing fits (70B on one GPU) the answer says what would", "[plan]") {
  const RunConfig base = planning("llama3-70b", 1, 4096);
  const LayoutSearch r = search_layouts(base, 1, shard_plan_for, 5);
  CHECK(r.fit == 0);
  CHECK(r.best.empty());
  CHECK(r.least_peak_bytes > 70e9 * 6);  // bf16 weights and fp32 gradients alone (the optimizer offloaded)
  const WhatWouldFit w = what_would_fit(base, r, shard_plan_for);
  CHECK(w.gpus >= 8);  // 70B x 6 bytes / 80 GB: at least 6 GPUs' worth of ZeRO-3 slices
  CHECK(w.memory_bytes == r.least_peak_bytes);
  CHECK(w.seq_len == 0);  // no sequence is short enough: weights and gradients alone are 420 GB
  // The smallest: half of it does not fit.
  CHECK(search_layouts(base, w.gpus / 2, shard_plan_for, 1).fit == 0);
  CHECK(search_layouts(base, w.gpus, shard_plan_for, 1).fit > 0);
  const std::string text = layout_search_text(base, shard_plan_for);
  CHECK_THAT(text, Catch::Contains("nothing fits") && Catch::Contains("more GPUs: --gpus " + std::to_string(w.gpus)) &&
                       Catch::Contains("more memory: a GPU of"));
}

TEST_CASE("plan: every layout returned passes check_flag_rules() and reaches the batch", "[plan]") {
  for (auto [model, gpus] : {std::pair{"llama3-8b", 8}, {"llama3-8b", 16}, {"smollm-360m", 4}}) {
    const RunConfig base = planning(model, gpus, 2048);
    const LayoutSearch r = search_layouts(base, gpus, shard_plan_for, 10);
    REQUIRE(!r.best.empty());
    for (const Candidate& c : r.best) {
      INFO(command_line(c));
      CHECK(check_flag_rules(c.cfg, gpus).empty());
      CHECK(c.cfg.dp * c.cfg.tp * c.cfg.pp * c.cfg.cp == gpus);
      CHECK(tokens_per_step(c.cfg) >= double(base.planner.global_batch_tokens));
      CHECK(c.time.total() > 0);
    }
    for (size_t i = 1; i < r.best.size(); ++i) {  // best first: by band, then the simpler, then the faster
      const Candidate &a = r.best[i - 1], &b = r.best[i];
      CHECK(a.band <= b.band);
      if (a.band == b.band) CHECK(complexity(a.cfg) <= complexity(b.cfg));
      CHECK(b.tokens_per_s_per_gpu <= r.best[0].tokens_per_s_per_gpu / (1 - kTieBand));
    }
  }
}

TEST_CASE("plan cost: the pipeline bubble is the schedule's formula times the compute", "[plan]") {
  RunConfig c = planning("llama3-8b", 4, 4096);
  c.pp = 4, c.micro_batch_size = 1, c.grad_acc_steps = 8;
  const Hardware hw = hardware_of(c.planner);
  for (auto [schedule, v, fraction] : {std::tuple{"afab", 1, 3.0 / 8}, {"1f1b", 1, 3.0 / 8},
                                       {"interleaved", 2, 3.0 / 16}, {"zb-h1", 1, 3.0 / 24},
                                       {"dualpipev", 2, 3.0 / 48}}) {  // (P-1)/(6m)
    c.pp_schedule = schedule, c.pp_virtual_stages = v;
    const StepTime t = predict_step(c, hw, 2e9);
    INFO(schedule);
    CHECK(t.bubble == Approx(fraction * t.compute));
  }
}

TEST_CASE("plan cost: full recompute costs one more forward, selective less", "[plan]") {
  RunConfig c = planning("llama3-8b", 1, 4096);
  const Hardware hw = hardware_of(c.planner);
  const double none = predict_step(c, hw, 8e9).compute;
  c.recompute = "full";
  CHECK(predict_step(c, hw, 8e9).compute == Approx(none * 4 / 3));
  c.recompute = "selective";
  const double selective = predict_step(c, hw, 8e9).compute;
  CHECK(selective > none);
  CHECK(selective < none * 4 / 3);
}

TEST_CASE("plan cost: tensor parallelism across nodes is slower than inside one", "[plan]") {
  RunConfig c = planning("llama3-70b", 16, 4096);
  c.tp = 8, c.dp = 2;  // rank order [dp][pp][cp][tp]: tp groups are 8 consecutive ranks
  Hardware node8 = hardware_of(c.planner), node4 = node8;
  node4.gpus_per_node = 4;
  CHECK_FALSE(tp_crosses_nodes(c, node8));
  CHECK(tp_crosses_nodes(c, node4));
  CHECK(dp_crosses_nodes(c, node8));  // the dp pairs are 8 ranks apart
  CHECK(predict_step(c, node4, 9e9).tp == Approx(predict_step(c, node8, 9e9).tp * 450.0 / 50.0));
  CHECK(predict_step(c, node4, 9e9).total() > predict_step(c, node8, 9e9).total());
  // pp groups span tp x cp x pp ranks
  c.tp = 2, c.pp = 4, c.dp = 2;
  CHECK_FALSE(pp_crosses_nodes(c, node8));
  CHECK(pp_crosses_nodes(c, node4));
}

TEST_CASE("plan cost: the ring hides behind long attention, Ulysses' all-to-alls win short and on slow links", "[plan]") {
  RunConfig c = planning("llama2-7b", 8, 2048);  // nH = nKV = 32, Hd 128: the ring moves all heads
  c.cp = 8, c.micro_batch_size = 1, c.grad_acc_steps = 1;
  Hardware hw = hardware_of(c.planner);
  hw.inter_bytes_per_s = 25e9, hw.gpus_per_node = 4;  // the cp group spans two nodes
  RunConfig ulysses = c;
  ulysses.cp_mode = "ulysses";
  const double T = 2048.0 / 8, L = 32, e = 2;
  // context_parallel/README.md: 2 x (C-1)/C x T Hd (2 nH + 2 nKV) e per layer, exposed
  CHECK(predict_step(ulysses, hw, 7e9).cp == Approx(L * 2 * 7.0 / 8 * T * 128 * (64 + 64) * e / 25e9));
  CHECK(predict_step(ulysses, hw, 7e9).cp < predict_step(c, hw, 7e9).cp);  // 22 hops of k, v barely hidden
  // llama3-8b (nKV 8) at 128k tokens in one node: attention hides every ring hop
  RunConfig long_seq = planning("llama3-8b", 8, 131072);
  long_seq.cp = 8, long_seq.micro_batch_size = 1, long_seq.grad_acc_steps = 1;
  RunConfig long_ulysses = long_seq;
  long_ulysses.cp_mode = "ulysses";
  CHECK(predict_step(long_seq, hardware_of(long_seq.planner), 8e9).cp == 0);
  CHECK(predict_step(long_ulysses, hardware_of(long_seq.planner), 8e9).cp > 0);
  // the hybrid: the all-to-all over U = 2 in the node, a ring of 4 on 2T tokens of nKV/2 heads
  RunConfig hybrid = c;
  hybrid.cp_mode = "hybrid", hybrid.cp_ulysses = 2;
  CHECK(predict_step(hybrid, hw, 7e9).cp >= L * 2 * 0.5 * T * 128 * 128 * e / hw.intra_bytes_per_s);
  CHECK(cp_modes(8) == std::vector<std::pair<std::string, int>>{{"ring", 0}, {"ulysses", 0}, {"hybrid", 2}, {"hybrid", 4}});
  CHECK(cp_modes(1) == std::vector<std::pair<std::string, int>>{{"ring", 0}});
}

TEST_CASE("plan cost: data parallelism's all-reduce hides behind the last backward", "[plan]") {
  RunConfig c = planning("llama3-8b", 8, 4096);
  c.dp = 8, c.micro_batch_size = 1, c.grad_acc_steps = 32;
  Hardware hw = hardware_of(c.planner);
  const double params = 1e9;  // a small model's gradients: hidden but for the last bucket
  const StepTime hidden = predict_step(c, hw, params);
  CHECK(hidden.dp == Approx(c.dp_bucket_mb * 1024 * 1024 * 7 / 8 / 450e9));
  hw.intra_bytes_per_s = 1e9;  // a slow link: most of it is exposed
  CHECK(predict_step(c, hw, params).dp > 0.5 * 2 * 7.0 / 8 * params * 4 / 1e9);
  c.zero = 1;  // ZeRO-1: reduce-scatter after backward + all-gather, not overlapped
  CHECK(predict_step(c, hardware_of(c.planner), params).dp == Approx(7.0 / 8 * params * (4 + 2) / 450e9));
}

TEST_CASE("plan: one given layout (--plan-layout) is costed as the search costs it", "[plan]") {
  const RunConfig base = planning("llama3-8b", 8, 4096);
  const LayoutSearch r = search_layouts(base, 8, shard_plan_for, 5);
  REQUIRE(!r.best.empty());
  for (const Candidate& found : r.best) {
    INFO(command_line(found));
    const Candidate again = evaluate_layout(found.cfg, shard_plan_for);
    CHECK(again.peak_bytes == found.peak_bytes);
    CHECK(again.time.total() == Approx(found.time.total()));
    CHECK(again.tokens_per_s_per_gpu == Approx(found.tokens_per_s_per_gpu));
    CHECK(int(again.stage_peak_bytes.size()) == found.cfg.pp);
  }
  // A pipeline: one peak per stage, the worst one is the layout's.
  RunConfig c = base;
  c.pp = 4, c.dp = 2, c.micro_batch_size = 1, c.grad_acc_steps = 8;
  const Candidate p = evaluate_layout(c, shard_plan_for);
  REQUIRE(p.stage_peak_bytes.size() == 4);
  CHECK(p.peak_bytes == p.stage_peak_bytes[p.worst_stage]);
  for (double stage : p.stage_peak_bytes) CHECK(stage <= p.peak_bytes);
  c.planner.layout_only = true;
  CHECK_THAT(layout_search_text(c, shard_plan_for), Catch::StartsWith("plan-layout: llama3-8b") &&
                                         Catch::Contains("memory of stage 3 at its peak: ") &&
                                         Catch::Contains(" tokens/s per GPU | MFU "));
}

// ---- what each rank holds (runtime/observe/holdings.h), from the same plans -----------
TEST_CASE("the start-up table says which layers, heads, vocabulary rows and tokens each rank holds", "[holdings]") {
  CHECK(ranges_text({0, 1, 2, 5, 7, 8}) == "0-2, 5, 7-8");
  CHECK(ranges_text({}).empty());
  RunConfig c;  // tiny: H 128, I 384, 4 layers, 4 heads, 2 kv heads, V 256
  c.seq_len = 32;
  c.tp = 2, c.pp = 2;
  const auto plans = [&](const MeshCoords& h) { return shard_plan_for(c, h); };
  const std::string four = holdings_summary(c, {1, 2, 1, 2}, plans);  // 4 ranks: a line each
  CHECK_THAT(four, Catch::Contains("rank 0 (dp 0 pp 0 cp 0 tp 0): embedding, layers 0-1 | heads 0-1 of 4, kv heads 0 of 2, "
                                   "mlp columns 0-191 of 384, vocab rows 0-127 of 256 | tokens 0-31 of 32"));
  CHECK_THAT(four, Catch::Contains("rank 3 (dp 0 pp 1 cp 0 tp 1): layers 2-3, final norm, head (a copy of the embedding) | "
                                   "heads 2-3 of 4, kv heads 1 of 2, mlp columns 192-383 of 384, vocab rows 128-255 of 256"));
  c.dp = 2, c.cp = 2;  // 16 ranks: a line per coordinate
  const std::string sixteen = holdings_summary(c, {2, 2, 2, 2}, plans);
  CHECK_THAT(sixteen, Catch::Contains("\n  pp 1: layers 2-3, final norm, head (a copy of the embedding)"));
  CHECK_THAT(sixteen, Catch::Contains("\n  tp 1: heads 2-3 of 4"));
  CHECK_THAT(sixteen, Catch::Contains("\n  cp 1: tokens 8-23 of 32 (zigzag)"));
  CHECK(sixteen.find("rank 15") == std::string::npos);
}

TEST_CASE("plan: a mixture of experts is planned with --ep too", "[plan]") {
  // The sizes tried: divisors of dp that divide E; a dense model only ep 1.
  CHECK(expert_parallel_sizes(preset("mixtral-8x7b"), 64) == std::vector<int>{1, 2, 4, 8});
  CHECK(expert_parallel_sizes(preset("tiny-moe"), 6) == std::vector<int>{1, 2});  // E = 4
  CHECK(expert_parallel_sizes(preset("llama3-8b"), 8) == std::vector<int>{1});
  // tiny-moe on 8 GPUs: every layout fits; the list (each layout once) holds ep 2 and 4.
  RunConfig base = planning("tiny-moe", 8, 1024);
  base.planner.global_batch_tokens = 1 << 16;
  const LayoutSearch r = search_layouts(base, 8, shard_plan_for, 1000);
  std::set<int> eps;
  for (const Candidate& c : r.best) {
    INFO(command_line(c));
    CHECK(check_flag_rules(c.cfg, 8).empty());
    eps.insert(c.cfg.ep);
    if (c.cfg.ep > 1) {
      CHECK(c.cfg.dp % c.cfg.ep == 0);
      CHECK_THAT(command_line(c), Catch::Contains(" --ep " + std::to_string(c.cfg.ep)));
      CHECK(c.time.ep > 0);
    } else {
      CHECK(c.time.ep == 0);
    }
  }
  CHECK(eps.count(2) == 1);
  CHECK(eps.count(4) == 1);
  // A rank holds E/ep experts: the planner's memory follows the plan's parameters.
  RunConfig one = base;
  one.dp = 8, one.micro_batch_size = 1, one.grad_acc_steps = 8;
  RunConfig four = one;
  four.ep = 4;
  CHECK(evaluate_layout(four, shard_plan_for).peak_bytes < evaluate_layout(one, shard_plan_for).peak_bytes);
}

TEST_CASE("plan cost: the experts' all-to-all is zero at ep 1 and grows with ep", "[plan]") {
  RunConfig c = planning("mixtral-8x7b", 16, 4096);
  c.dp = 16, c.micro_batch_size = 1, c.grad_acc_steps = 4;
  const Hardware hw = hardware_of(c.planner);
  CHECK(expert_all_to_all_time(c, hw) == 0);
  CHECK(predict_step(c, hw, 1e9).ep == 0);
  // 4 all-to-alls per layer and micro-batch, k T H e (ep-1)/ep bytes each, in the node at 450 GB/s
  c.ep = 2;
  const double k = 2, T = 4096, H = 4096, e = 2, L = 32;
  CHECK(expert_all_to_all_time(c, hw) == Approx(4 * L * 4 * k * T * H * e * 0.5 / 450e9));
  CHECK(predict_step(c, hw, 1e9).ep == Approx(expert_all_to_all_time(c, hw)));
  double previous = expert_all_to_all_time(c, hw);
  for (int ep : {4, 8}) {  // (ep-1)/ep of the rows leave the rank
    c.ep = ep;
    CHECK_FALSE(ep_crosses_nodes(c, hw));
    CHECK(expert_all_to_all_time(c, hw) > previous);
    previous = expert_all_to_all_time(c, hw);
  }
  c.ep = 16;  // 16 consecutive dp ranks: across two nodes, at 50 GB/s
  CHECK(ep_crosses_nodes(c, hw));
  CHECK(expert_all_to_all_time(c, hw) == Approx(4 * L * 4 * k * T * H * e * 15.0 / 16 / 50e9));
  // A dense model has no all-to-all whatever --ep says.
  RunConfig dense = planning("llama3-8b", 16, 4096);
  dense.dp = 16, dense.ep = 2;
  CHECK(expert_all_to_all_time(dense, hw) == 0);
}

TEST_CASE("plan cost: under tp a MoE's experts run whole, on every token without sp", "[plan]") {
  RunConfig c = planning("mixtral-8x7b", 16, 4096);
  c.dp = 8, c.tp = 2, c.micro_batch_size = 1, c.grad_acc_steps = 4;
  const Hardware hw = hardware_of(c.planner);
  RunConfig sp = c;
  sp.sp = true;
  // Without sp each tp rank repeats the experts' 18 k H I L FLOPs per token of its tokens.
  const double k = 2, H = 4096, I = 14336, L = 32;
  const double extra = predict_step(c, hw, 1e9).compute - predict_step(sp, hw, 1e9).compute;
  CHECK(extra / predict_step(sp, hw, 1e9).compute ==
        Approx((2 - 1) * 18 * k * H * I * L / model_flops_per_token(c)).epsilon(1e-9));
  CHECK(extra > 0);
  // tp's all-reduces: the attention's alone (a MoE block has no f/g), L + 1 per pass.
  RunConfig dense = planning("llama3-8b", 16, 4096);
  dense.dp = 8, dense.tp = 2, dense.micro_batch_size = 1, dense.grad_acc_steps = 4;
  const double T = 4096, e = 2;
  CHECK(predict_step(c, hw, 1e9).tp == Approx(2 * 0.5 * 2 * (L + 1) * T * H * 4 * e / 450e9));
  CHECK(predict_step(dense, hw, 1e9).tp == Approx(2 * 0.5 * 2 * (2 * L + 1) * T * H * 4 * e / 450e9));
  // Under sp each tp rank routes half the tokens: half the all-to-all.
  c.ep = 2, sp.ep = 2;
  CHECK(expert_all_to_all_time(sp, hw) == Approx(expert_all_to_all_time(c, hw) / 2));
}

TEST_CASE("plan cost: with --ep the experts' gradients reduce over their replicas only", "[plan]") {
  RunConfig c = planning("mixtral-8x7b", 16, 4096);
  c.dp = 16, c.zero = 1, c.micro_batch_size = 1, c.grad_acc_steps = 4, c.ep = 16;
  const Hardware hw = hardware_of(c.planner);
  const double H = 4096, I = 14336, L = 32, experts = L * 8.0 / 16 * 3 * H * I;  // one expert per layer here
  const double P = 3e9, bw = 50e9;  // 16 dp ranks span two nodes
  // ep = dp: each expert has one copy, nothing to reduce; the rest: reduce-scatter fp32 + all-gather bf16.
  CHECK(predict_step(c, hw, P).dp == Approx(15.0 / 16 * (P - experts) * (4 + 2) / bw));
  c.ep = 8;  // two copies of each expert: a ring of 2 instead of 16
  const double ep8 = L * 8.0 / 8 * 3 * H * I;
  CHECK(predict_step(c, hw, P).dp == Approx((15.0 / 16 * (P - ep8) + 0.5 * ep8) * (4 + 2) / bw));
}

TEST_CASE("plan: across nodes HSDP (ZeRO-3 inside the node, replicated across) beats ZeRO-3 over every rank", "[plan]") {
  // llama2-7b (6.7B) on 4 nodes of 8 GPUs of 40 GB: a step of 2^20 tokens is 256 sequences of
  // 4096. ZeRO-3 over all 32 ranks gathers and reduce-scatters every micro-batch over the
  // 50 GB/s links between nodes; HSDP does so over a node's 450 GB/s NVLink and sends only
  // its slice's all-reduce across nodes, once per step (zero/zero_groups.h: 16 B a parameter
  // over 8 ranks instead of 32, 35 GB at a micro-batch of one sequence: it still fits).
  RunConfig base = planning("llama2-7b", 32, 4096);
  base.planner.gpu_memory_gb = 40;
  const LayoutSearch r = search_layouts(base, 32, shard_plan_for, 5);
  REQUIRE(!r.best.empty());
  const Candidate& top = r.best[0];
  INFO(command_line(top));
  CHECK(top.cfg.dp == 32);
  CHECK(top.cfg.zero == 3);
  CHECK(top.cfg.zero_shard == 8);  // the dp ranks of one node
  CHECK(command_line(top).find("--zero 3 --zero-shard 8") != std::string::npos);
  CHECK(cheatsheet_rule(top, hardware_of(base.planner)).find("HSDP: ZeRO inside the node") != std::string::npos);
  REQUIRE(top.whole_group);
  const Candidate& whole = *top.whole_group;
  CHECK(whole.cfg.zero_shard == 0);
  // The two predicted steps (layout_cost.h), as --plan prints them, both at a micro-batch of
  // 1 x grad-acc 8 (2 does not fit either): HSDP 3460 ms, of it dp 114 ms (the replicas'
  // all-reduce, 2 x 3/4 x 6.7e9/8 x 4 B / 50 GB/s = 100 ms, and one layer's gathers); ZeRO-3
  // over the 32 ranks 8356 ms, of it dp 5009 ms: per micro-batch 31/32 x 6.7e9 x (2 + 2 + 4) B
  // / 50 GB/s = 1.04 s of gathers and reduce-scatter between nodes, 0.42 s hidden by compute.
  const double hsdp_s = top.time.total(), whole_s = whole.time.total();
  INFO("HSDP " << hsdp_s * 1e3 << " ms (dp " << top.time.dp * 1e3 << "), whole group " << whole_s * 1e3 << " ms (dp "
               << whole.time.dp * 1e3 << ")");
  CHECK(hsdp_s == Approx(3.460).epsilon(0.01));
  CHECK(whole_s == Approx(8.356).epsilon(0.01));
  CHECK(top.peak_bytes > whole.peak_bytes);  // the price: slices of 1/8 instead of 1/32
}

TEST_CASE("plan cost: HSDP's collectives stay in the node, the replicas all-reduce the slice across nodes", "[plan]") {
  RunConfig c = planning("llama2-7b", 32, 4096);
  c.dp = 32, c.zero = 1, c.micro_batch_size = 1, c.grad_acc_steps = 8;
  const Hardware hw = hardware_of(c.planner);
  const double P = 6.7e9, intra = 450e9, inter = 50e9;
  // ZeRO-1 over 32 ranks of 4 nodes: reduce-scatter fp32 + all-gather bf16, ring(32), between nodes.
  CHECK(predict_step(c, hw, P).dp == Approx(31.0 / 32 * P * (4 + 2) / inter));
  // --zero-shard 8: the same over 8 ranks of a node, + my slice P/8 all-reduced over 4 replicas.
  c.zero_shard = 8;
  CHECK(predict_step(c, hw, P).dp == Approx(7.0 / 8 * P * (4 + 2) / intra + 2 * 3.0 / 4 * P / 8 * 4 / inter));
  c.zero_shard = 0;
  CHECK(node_local_zero_shard(c, hw) == 8);
  c.tp = 2, c.dp = 16;  // two tp ranks per dp rank: 4 dp ranks a node
  CHECK(node_local_zero_shard(c, hw) == 4);
  c.tp = 1, c.dp = 8;  // one node: nothing to gain
  CHECK(node_local_zero_shard(c, hw) == 0);
}
