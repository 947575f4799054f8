// Tensor parallelism's pieces against the full ops, under mpirun on 4 ranks (ctest -R
// tensor_parallel), at tp 4 and at tp 2 (dp 2 x tp 2). Each gives the same output and
// the same input and weight gradients as the single-process op, fp64, within 1e-12
// (the same sums in another order):
//   sequence parallelism    all-gather / reduce-scatter along S, forward and backward;
//                           the embedding's reduce-scatter; the norm gains' gradient sum
//   column-parallel linear  f, then x W_r^T            -> this rank's output columns
//   row-parallel linear     x_r W_r^T, then g          -> the whole output
//   vocab-parallel embedding                           -> the whole lookup
//   vocab-parallel cross-entropy from [N, V/tp] logits -> the loss of the full logits
// Prints "N passed, N failed"; exits non-zero on any failure.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <iostream>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "picotron/mesh.h"
#include "tensor_parallel/tensor_parallel.h"

#include "mpi_check.h"

using namespace picotron;

namespace {

using testing::check;

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// The same "random" full tensors on every rank.
torch::Tensor shared_randn(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randn(shape, gen, kF64);
}

void run(Comm& world, const MeshShape& shape) {
  Mesh mesh(world, shape);
  Comm& tp = mesh.tp();
  const int r = tp.rank(), p = tp.size(), rank = world.rank();
  const std::string tag = "tp" + std::to_string(p) + ": ";
  const int64_t B = 2, S = 3, H = 8, O = 12, V = 16;  // O, V divisible by 2 and 4

  // ---- column-parallel: f, then the rows [r*O/p, +O/p) of W ----
  testing::section(rank, [&] {
    auto x = shared_randn({B, S, H}, 1).requires_grad_(), w = shared_randn({O, H}, 2).requires_grad_();
    auto y = torch::linear(x, w);  // [B, S, O]
    (y * shared_randn({B, S, O}, 3)).sum().backward();
    auto xr = shared_randn({B, S, H}, 1).requires_grad_();
    auto wr = w.detach().narrow(0, r * O / p, O / p).clone().requires_grad_();  // [O/p, H]
    auto yr = torch::linear(copy_to_tp(xr, tp), wr);                              // [B, S, O/p]
    (yr * shared_randn({B, S, O}, 3).narrow(2, r * O / p, O / p)).sum().backward();
    check(rel_err(yr, y.detach().narrow(2, r * O / p, O / p)) < 1e-12, tag + "column-parallel output", rank);
    check(rel_err(xr.grad(), x.grad()) < 1e-12, tag + "column-parallel input grad (f's all-reduce)", rank);
    check(rel_err(wr.grad(), w.grad().narrow(0, r * O / p, O / p)) < 1e-12, tag + "column-parallel weight grad", rank);
  });
  // ---- row-parallel: the columns [r*O/p, +O/p) of W times that slice of x, then g ----
  testing::section(rank, [&] {
    auto x = shared_randn({B, S, O}, 4).requires_grad_(), w = shared_randn({H, O}, 5).requires_grad_();
    auto y = torch::linear(x, w);  // [B, S, H]
    (y * shared_randn({B, S, H}, 6)).sum().backward();
    auto xr = x.detach().narrow(2, r * O / p, O / p).clone().requires_grad_();  // [B, S, O/p]
    auto wr = w.detach().narrow(1, r * O / p, O / p).clone().requires_grad_();  // [H, O/p]
    auto yr = reduce_from_tp(torch::linear(xr, wr), tp);                         // [B, S, H]
    (yr * shared_randn({B, S, H}, 6)).sum().backward();
    check(rel_err(yr, y.detach()) < 1e-12, tag + "row-parallel output (g's all-reduce)", rank);
    check(rel_err(xr.grad(), x.grad().narrow(2, r * O / p, O / p)) < 1e-12, tag + "row-parallel input grad", rank);
    check(rel_err(wr.grad(), w.grad().narrow(1, r * O / p, O / p)) < 1e-12, tag + "row-parallel weight grad", rank);
  });
  // ---- sequence parallelism: all-gather / reduce-scatter along S and their backwards ----
  testing::section(rank, [&] {
    const int64_t Sp = 2, S_all = Sp * p;  // S/tp positions per rank
    // gather_sequence: rank r's chunk of x -> the whole x; backward sums every rank's
    // gradient of the whole x and hands rank r its chunk.
    auto x = shared_randn({B, S_all, H}, 20);
    auto xr = x.narrow(1, r * Sp, Sp).clone().requires_grad_();  // [B, S/tp, H]
    auto y = gather_sequence(xr, tp);                             // [B, S, H]
    y.backward(shared_randn({B, S_all, H}, 100 + r));            // rank r's own upstream gradient
    auto summed = torch::zeros({B, S_all, H}, kF64);
    for (int q = 0; q < p; ++q) summed += shared_randn({B, S_all, H}, 100 + q);
    check(rel_err(y, x) < 1e-12, tag + "gather_sequence output", rank);
    check(rel_err(xr.grad(), summed.narrow(1, r * Sp, Sp)) < 1e-12, tag + "gather_sequence grad (reduce-scatter)", rank);
    // reduce_scatter_sequence: every rank's partial sums -> rank r's chunk of their sum;
    // backward gathers every rank's chunk gradient.
    auto part = shared_randn({B, S_all, H}, 200 + r).requires_grad_();  // rank r's partial sums
    auto z = reduce_scatter_sequence(part, tp);                          // [B, S/tp, H]
    z.backward(shared_randn({B, Sp, H}, 300 + r));
    auto total = torch::zeros({B, S_all, H}, kF64);
    std::vector<torch::Tensor> chunk_grads;
    for (int q = 0; q < p; ++q) {
      total += shared_randn({B, S_all, H}, 200 + q);
      chunk_grads.push_back(shared_randn({B, Sp, H}, 300 + q));
    }
    check(rel_err(z, total.narrow(1, r * Sp, Sp)) < 1e-12, tag + "reduce_scatter_sequence output", rank);
    check(rel_err(part.grad(), torch::cat(chunk_grads, /*dim=*/1)) < 1e-12,
          tag + "reduce_scatter_sequence grad (all-gather)", rank);
  });
  // ---- vocab-parallel embedding ----
  testing::section(rank, [&] {
    auto ids = torch::randint(0, V, {B, S}, at::detail::createCPUGenerator(7), torch::kInt64);
    auto w = shared_randn({V, H}, 8).requires_grad_();
    auto y = torch::embedding(w, ids);
    (y * shared_randn({B, S, H}, 9)).sum().backward();
    VocabParallelEmbedding emb(w.detach().narrow(0, r * V / p, V / p).clone().requires_grad_(), r * V / p, tp,
                               /*sequence_parallel=*/false);
    auto yr = emb->forward(ids);
    (yr * shared_randn({B, S, H}, 9)).sum().backward();
    check(rel_err(yr, y.detach()) < 1e-12, tag + "vocab-parallel embedding output", rank);
    check(rel_err(emb->weight.grad(), w.grad().narrow(0, r * V / p, V / p)) < 1e-12,
          tag + "vocab-parallel embedding weight grad", rank);
  });
  // ---- the same embedding under sequence parallelism: rank r gets positions [r·S/tp, +S/tp) ----
  testing::section(rank, [&] {
    const int64_t Sp = 2, S_all = Sp * p;
    auto ids = torch::randint(0, V, {B, S_all}, at::detail::createCPUGenerator(12), torch::kInt64);
    auto w = shared_randn({V, H}, 13).requires_grad_();
    std::vector<torch::Tensor> upstream;  // every rank's gradient of its chunk
    for (int q = 0; q < p; ++q) upstream.push_back(shared_randn({B, Sp, H}, 400 + q));
    auto y = torch::embedding(w, ids);                                   // [B, S, H]
    y.backward(torch::cat(upstream, /*dim=*/1));
    VocabParallelEmbedding emb(w.detach().narrow(0, r * V / p, V / p).clone().requires_grad_(), r * V / p, tp,
                               /*sequence_parallel=*/true);
    auto yr = emb->forward(ids);                                         // [B, S/tp, H]
    yr.backward(upstream[r]);
    check(rel_err(yr, y.detach().narrow(1, r * Sp, Sp)) < 1e-12, tag + "sequence-parallel embedding output", rank);
    check(rel_err(emb->weight.grad(), w.grad().narrow(0, r * V / p, V / p)) < 1e-12,
          tag + "sequence-parallel embedding weight grad", rank);
  });
  // ---- under SP, what tp does not split (the norm gains) gets its gradient summed over tp ----
  testing::section(rank, [&] {
    ShardPlan plan;
    plan["model.norm.weight"] = {"model.norm.weight", {H}, -1, Axis::kTp, 0, 1, 0, {Axis::kDp, Axis::kCp, Axis::kTp}};
    plan["q.weight"] = {"q.weight", {O, H}, -1, Axis::kTp, 0, 1, 0, {Axis::kDp, Axis::kCp, Axis::kTp}};
    plan["q.weight"].split(/*dim=*/0, Axis::kTp, r, p);
    auto gain = torch::ones({H}, kF64).requires_grad_(), q = torch::zeros({O / p, H}, kF64).requires_grad_();
    AdamW opt({{"model.norm.weight", gain}, {"q.weight", q}}, {}, plan);
    opt.params()[0].main_grad.copy_(shared_randn({H}, 500 + r));        // a partial sum per rank
    opt.params()[1].main_grad.copy_(shared_randn({O / p, H}, 600 + r));
    sync_sequence_parallel_grads(opt.params(), tp);
    auto summed = torch::zeros({H}, kF64);
    for (int k = 0; k < p; ++k) summed += shared_randn({H}, 500 + k);
    check(rel_err(opt.params()[0].main_grad, summed) < 1e-12, tag + "SP: the norm gain's gradient is summed over tp", rank);
    check(torch::equal(opt.params()[1].main_grad, shared_randn({O / p, H}, 600 + r)),
          tag + "SP: a split parameter's gradient is left alone", rank);
  });
  // ---- vocab-parallel cross-entropy ----
  testing::section(rank, [&] {
    const int64_t N = 10;
    auto targets = torch::randint(0, V, {N}, at::detail::createCPUGenerator(10), torch::kInt64);
    auto z = (shared_randn({N, V}, 11) * 4).requires_grad_();
    auto loss = torch::nn::functional::cross_entropy(z, targets);
    loss.backward();
    auto zr = z.detach().narrow(1, r * V / p, V / p).clone().requires_grad_();  // [N, V/p]
    auto loss_r = vocab_parallel_cross_entropy(zr, targets, r * V / p, tp);
    loss_r.backward();
    check(rel_err(loss_r, loss.detach()) < 1e-12, tag + "vocab-parallel cross-entropy loss", rank);
    check(rel_err(zr.grad(), z.grad().narrow(1, r * V / p, V / p)) < 1e-12,
          tag + "vocab-parallel cross-entropy logit grads", rank);
  });
}

}  // namespace

int main() {
  return testing::run_on_ranks(4, [](Comm& world) {
    run(world, MeshShape{/*dp=*/1, /*pp=*/1, /*cp=*/1, /*tp=*/4});
    run(world, MeshShape{/*dp=*/2, /*pp=*/1, /*cp=*/1, /*tp=*/2});
  });
}
