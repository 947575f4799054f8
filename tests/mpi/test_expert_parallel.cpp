// Expert parallelism under mpirun, the world being the ep group (ctest -R expert_parallel):
//  - the dispatch order (pure): pairs sorted by owner rank, then expert, stable; the
//    counts per rank; its inverse;
//  - Comm::all_to_all against a gather-based reference: uneven row counts, empty ones, a
//    rank's own rows, and the ledger (the elements that leave the rank);
//  - one MoE layer with its experts split over the ranks (ExpertParallel::run) against the
//    whole layer on every rank: the output and dL/dx equal it (fp64, 1e-12), each expert's
//    gradient equals the sum over the ranks of the whole layer's, and the ep group's
//    ledger moves 2 x (pairs that leave) x H rows, their expert ids and N - 1 counts
//    each way.
// Run with 2 and 4 ranks. Prints "N passed, M failed"; exits non-zero on any failure.
#include <torch/torch.h>

#include "expert_parallel/expert_parallel.h"
#include "picotron/init.h"

#include "mpi_check.h"

using namespace picotron;
using testing::check;

namespace {

int64_t ledger(const Comm& c, const std::string& kind) {
  return c.ledger().count(kind) ? c.ledger().at(kind).elements : 0;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

int main() {
  Distributed dist(detect_launch(process_environment()));
  torch::set_num_threads(1);
  Comm world = Comm::world(dist, torch::kCPU, std::chrono::seconds(60));
  const int N = world.size(), rank = world.rank();
  const auto f64 = torch::dtype(torch::kFloat64);

  testing::section(rank, [&] {  // ---- the dispatch order, pure ----
    torch::manual_seed(1);
    const int64_t E = 2 * N, T = 9, k = 2;
    const auto experts = torch::randint(E, {T, k}, torch::kInt64);
    const Dispatch d = dispatch_order(experts, E, N);
    const auto sorted = experts.reshape({-1}).index_select(0, d.order);
    bool ordered = true;
    for (int64_t i = 1; i < T * k; ++i) {
      const int64_t a = sorted[i - 1].item<int64_t>(), b = sorted[i].item<int64_t>();
      const int64_t pa = d.order[i - 1].item<int64_t>(), pb = d.order[i].item<int64_t>();
      ordered = ordered && (a < b || (a == b && pa < pb));
    }
    check(ordered, "dispatch order: by expert (so by owner rank), pairs of one expert in token order", rank);
    int64_t total = 0;
    bool counts = true;
    for (int r = 0; r < N; ++r) {
      const int64_t to_r = (experts.div(E / N, "floor") == r).sum().item<int64_t>();
      counts = counts && d.send_rows[size_t(r)] == to_r;
      total += d.send_rows[size_t(r)];
    }
    check(counts && total == T * k, "dispatch order: the pairs for each rank counted", rank);
    const auto inv = inverse_order(d.order);
    check(torch::equal(inv.index_select(0, d.order), torch::arange(T * k)), "the inverse order undoes it", rank);
  });

  testing::section(rank, [&] {  // ---- all_to_all against a gather-based reference ----
    // rows[s][r]: how many rows rank s sends rank r (the same matrix on every rank; some 0).
    torch::manual_seed(2);
    const auto rows = torch::randint(0, 4, {N, N}, torch::kInt64);
    const int64_t H = 3;
    auto send_of = [&](int s) {  // rank s's rows: value = 1000 s + 10 r + i
      std::vector<torch::Tensor> parts;
      for (int r = 0; r < N; ++r)
        for (int64_t i = 0; i < rows[s][r].item<int64_t>(); ++i) parts.push_back(torch::full({1, H}, 1000.0 * s + 10 * r + i, f64));
      return parts.empty() ? torch::zeros({0, H}, f64) : torch::cat(parts);
    };
    std::vector<int64_t> send(static_cast<size_t>(N), 0), recv(static_cast<size_t>(N), 0);
    std::vector<torch::Tensor> expected;
    for (int r = 0; r < N; ++r) {
      send[size_t(r)] = rows[rank][r].item<int64_t>();
      recv[size_t(r)] = rows[r][rank].item<int64_t>();
      // What rank r sends me: its rows for me, in order.
      int64_t before = 0;
      for (int q = 0; q < rank; ++q) before += rows[r][q].item<int64_t>();
      if (recv[size_t(r)] > 0) expected.push_back(send_of(r).narrow(0, before, recv[size_t(r)]));
    }
    const auto want = expected.empty() ? torch::zeros({0, H}, f64) : torch::cat(expected);
    auto out = torch::empty({want.size(0), H}, f64);
    world.reset_ledger();
    world.all_to_all(out, send_of(rank), send, recv);
    check(torch::equal(out, want), "all_to_all: every rank's rows for me, in rank order", rank);
    const int64_t leaving = (rows[rank].sum().item<int64_t>() - rows[rank][rank].item<int64_t>()) * H;
    check(N == 1 || ledger(world, "all_to_all") == leaving,
          "all_to_all: the ledger counts the elements that leave (" + std::to_string(ledger(world, "all_to_all")) +
              ", want " + std::to_string(leaving) + ")",
          rank);
  });

  testing::section(rank, [&] {  // ---- one MoE layer, experts over the ranks ----
    LlamaConfig c;  // a tiny MoE: H 16, 2N experts of I 24, top-2, 1 layer
    c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 1, c.num_attention_heads = 2;
    c.num_key_value_heads = 2, c.vocab_size = 32, c.num_local_experts = 2 * N, c.num_experts_per_tok = 2;
    const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    LlamaForCausalLM whole(c, replicated_plan(c), opts);
    add_experts(*whole, replicated_plan(c), opts);
    init_parameters(*whole, replicated_plan(c), /*seed=*/5, 0.2);
    ShardPlan mine = replicated_plan(c);
    keep_local_experts(mine, c, rank, N);
    LlamaForCausalLM split(c, mine, opts);
    add_experts(*split, mine, opts);
    init_parameters(*split, mine, /*seed=*/5, 0.2);  // the same values, by name
    ExpertParallel ep(split, world, N);
    torch::manual_seed(100 + rank);  // each rank its own tokens
    const int64_t T = 6 + rank;      // and not the same number of them
    const auto x = torch::randn({1, T, c.hidden_size}, f64), dy = torch::randn({1, T, c.hidden_size}, f64);
    auto xw = x.clone().requires_grad_(), xs = x.clone().requires_grad_();
    const auto yw = moe_of(*whole->model->layers->items[0].second)->forward(xw);
    ep.ep_group().reset_ledger();
    const auto ys = moe_of(*split->model->layers->items[0].second)->forward(xs);
    const int64_t fwd = ledger(ep.ep_group(), "all_to_all");
    yw.backward(dy);
    ys.backward(dy);
    check(max_diff(ys, yw) < 1e-12, "the experts over the ranks give the whole layer's output", rank);
    check(max_diff(xs.grad(), xw.grad()) < 1e-12, "... and its dL/dx", rank);
    // Each expert's gradient: the sum over every rank's tokens.
    bool grads = true;
    auto& held = moe_of(*split->model->layers->items[0].second)->experts;
    for (int64_t e = 0; e < c.num_local_experts; ++e) {  // every rank, every expert: the all-reduces match
      const auto g = moe_of(*whole->model->layers->items[0].second)->experts.at(e)->w1.grad();
      auto sum = g.defined() ? g.clone() : torch::zeros({c.intermediate_size, c.hidden_size}, f64);
      world.all_reduce(sum, ReduceOp::kSum);
      if (held.count(e)) grads = grads && held.at(e)->w1.grad().defined() && max_diff(held.at(e)->w1.grad(), sum) < 1e-12;
    }
    check(grads, "each expert's gradient sums every rank's tokens", rank);
    // The ledger, forward: N - 1 counts; my pairs for other ranks (rows x H and their
    // expert ids); coming back, the rows my experts computed for other ranks' pairs.
    // pairs[s][o]: rank s's (token, slot) pairs whose expert rank o owns.
    const auto probs = torch::linear(x.reshape({T, -1}), moe_of(*whole->model->layers->items[0].second)->gate).softmax(-1);
    const auto owner = std::get<1>(probs.topk(2, -1)).div(2, "floor").reshape({-1});  // [T·k], 2 experts per rank
    auto pairs = torch::zeros({N, N}, torch::kInt64);
    pairs[rank] = torch::bincount(owner, {}, N);
    world.all_reduce(pairs, ReduceOp::kSum);
    const int64_t out = pairs[rank].sum().item<int64_t>() - pairs[rank][rank].item<int64_t>();
    const int64_t in = pairs.select(1, rank).sum().item<int64_t>() - pairs[rank][rank].item<int64_t>();
    const int64_t want = (N - 1) + out * (c.hidden_size + 1) + in * c.hidden_size;
    check(N == 1 || fwd == want, "forward ledger: N-1 counts + (H + 1) per pair leaving + H per pair going back (" +
                                     std::to_string(fwd) + ", want " + std::to_string(want) + ")",
          rank);
  });

  world.barrier();
  return testing::summary(rank);
}
