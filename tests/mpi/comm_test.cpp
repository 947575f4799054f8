// tests/mpi/comm_test.cpp — every collective of Comm, checked against closed forms, under mpirun.
//
// Each rank r of a group of p fills its input from r with a formula whose result is
// known in closed form, so the test never trusts one collective to check another:
//
//   all_reduce      x_r[i] = (r+1)(i%7+1)   sum = (i%7+1) p(p+1)/2   max = (i%7+1) p
//                                            avg = sum / p
//   reduce_scatter  the same x_r over p*n elements; rank r gets chunk r of those results
//   all_gather      x_r[j] = 10r + j        out[10q + j ... ] = 10q + j for every rank q
//   broadcast       root fills 10*root + j + 1, the others -1; all end with root's values
//   p2p ring        send 10r + j to r+1 (and to r-1): receive 10(r-1) + j (and 10(r+1) + j)
//
// All values are small integers, exact in every dtype: bf16 keeps 8 significant bits,
// so integers up to 256 are exact, and the largest value here is 7 * 36 = 252 (p = 8).
// The comparison is therefore exact on CPU; NCCL's avg may divide before summing, so on
// CUDA floats get a relative tolerance of 1e-2 (16-bit) or 1e-6.
//
// Then: sub-group collectives on every group of every factorisation of the world size
// into dp x pp x cp x tp (a Mesh per factorisation), the pp / cp ring neighbours used
// as group ranks, async operations in flight together, argument errors, and the
// communication ledger:
//
//   ledger  a known sequence of calls on world, tp, dp (pp and cp: groups of one) gives
//           exactly the calls and elements of comm.h's convention; groups of one record
//           nothing and still give the right results; reset clears; comm_report's rows
//           (compared word by word) hold the same numbers.
//
// A failed check prints "[rank r] FAILED: ..." and aborts the whole job (MPI_Abort),
// so a failure on one rank can never leave the others waiting. Success: rank 0 prints
// "N passed, 0 failed".
//
// Run:  mpirun -np 4 build/tests/comm_tests [--device cuda] [--timeout-s 60]
// Test: ctest -R comm   (1, 2, 3, 4 and 8 ranks)
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"
#include "picotron/mesh.h"

using namespace picotron;

namespace {

struct Checker {
  const Distributed& dist;
  int64_t passed = 0;

  void check(bool ok, const std::string& what) {
    if (ok) return void(++passed);
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", dist.rank(), what.c_str());
    dist.abort_job(1);
  }
  void equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
    const torch::Tensor g = got.cpu().to(torch::kFloat64), w = want.cpu().to(torch::kFloat64);
    const bool inexact = got.is_cuda() && got.is_floating_point();
    const double rtol = got.element_size() == 2 ? 1e-2 : 1e-6;
    const bool ok = g.sizes() == w.sizes() && (inexact ? torch::allclose(g, w, rtol, 0.0) : torch::equal(g, w));
    if (!ok) check(false, what + "\n  got:  " + show(g) + "\n  want: " + show(w));
    ++passed;
  }
  static std::string show(const torch::Tensor& t) {  // the first 16 values on one line
    std::ostringstream line;
    const torch::Tensor flat = t.flatten();
    for (int64_t i = 0; i < std::min<int64_t>(flat.numel(), 16); ++i) line << flat[i].item<double>() << " ";
    return line.str() + (flat.numel() > 16 ? "..." : "");
  }
  template <class F>
  void throws(F f, const std::string& needle, const std::string& what) {
    try {
      f();
    } catch (const CommError& e) {
      return check(std::strstr(e.what(), needle.c_str()) != nullptr, what + ": message was: " + e.what());
    }
    check(false, what + ": no CommError thrown");
  }
};

std::string dtype_name(torch::ScalarType t) { return c10::getDtypeNames(t).first; }

// 0, 1, ..., n-1 as float64 (formulas are evaluated in float64, then cast).
torch::Tensor iota(int64_t n) { return torch::arange(n, torch::kFloat64); }

// ---- every collective, every dtype, on one group --------------------------------
void test_collectives(Checker& c, Comm& comm, torch::ScalarType dtype, torch::Device dev) {
  const int p = comm.size(), r = comm.rank();
  const int64_t n = 37;  // not a multiple of anything in particular
  const auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  const std::string tag = " [" + dtype_name(dtype) + ", group of " + std::to_string(p) + "]";
  const bool floating = torch::isFloatingType(dtype);
  auto fill = [&](const torch::Tensor& values) { return values.to(opts).contiguous(); };
  const torch::Tensor k = iota(p * n).remainder(7) + 1;  // (i%7 + 1) over p*n elements

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    const char* op_name = op == ReduceOp::kSum ? "sum" : op == ReduceOp::kMax ? "max" : "avg";
    const double factor = op == ReduceOp::kSum ? p * (p + 1) / 2.0 : op == ReduceOp::kMax ? p : (p + 1) / 2.0;
    torch::Tensor x = fill(k.slice(0, 0, n) * (r + 1));
    torch::Tensor in = fill(k * (r + 1));
    torch::Tensor out = torch::full({n}, -1, opts);
    if (op == ReduceOp::kAvg && !floating) {  // refused locally, on every rank alike
      c.throws([&] { comm.all_reduce(x, op); }, "would truncate", "all_reduce avg of integers" + tag);
      c.throws([&] { comm.reduce_scatter(out, in, op); }, "would truncate", "reduce_scatter avg of integers" + tag);
      continue;
    }
    comm.all_reduce(x, op);
    c.equal(x, k.slice(0, 0, n) * factor, std::string("all_reduce ") + op_name + tag);
    comm.reduce_scatter(out, in, op);
    c.equal(out, k.slice(0, r * n, (r + 1) * n) * factor, std::string("reduce_scatter ") + op_name + tag);
    torch::Tensor my_chunk = in.slice(0, r * n, (r + 1) * n);  // in place: out is this rank's chunk of in
    comm.reduce_scatter(my_chunk, in, op);
    c.equal(my_chunk, out, std::string("reduce_scatter in place ") + op_name + tag);
  }

  torch::Tensor mine = fill(iota(5) + 10 * r);
  torch::Tensor gathered = torch::full({p * 5}, -1, opts);
  comm.all_gather(gathered, mine);
  c.equal(gathered, iota(p * 5).remainder(5) + 10 * iota(p * 5).div(5, "floor"), "all_gather" + tag);
  torch::Tensor in_place = torch::full({p * 5}, -1, opts);  // `in` is this rank's slot of `out`
  in_place.slice(0, r * 5, (r + 1) * 5).copy_(mine);
  torch::Tensor slot = in_place.slice(0, r * 5, (r + 1) * 5);
  comm.all_gather(in_place, slot);
  c.equal(in_place, gathered, "all_gather in place" + tag);

  for (int root = 0; root < p; ++root) {  // every root, not only 0
    torch::Tensor t = r == root ? fill(iota(n) + 10 * root + 1) : torch::full({n}, -1, opts);
    comm.broadcast(t, root);
    c.equal(t, iota(n) + 10 * root + 1, "broadcast from root " + std::to_string(root) + tag);
  }

  // A ring in both directions, all four operations in one batch.
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  torch::Tensor fwd = fill(iota(n) + 10 * r), bwd = fill(iota(n) + 10 * r + 1);
  torch::Tensor from_prev = torch::full({n}, -1, opts), from_next = torch::full({n}, -1, opts);
  comm.batch_p2p({{P2POp::kSend, fwd, next}, {P2POp::kSend, bwd, prev},
                  {P2POp::kRecv, from_prev, prev}, {P2POp::kRecv, from_next, next}});
  c.equal(from_prev, iota(n) + 10 * prev, "batch_p2p ring forward" + tag);
  c.equal(from_next, iota(n) + 10 * next + 1, "batch_p2p ring backward" + tag);

  if (p >= 2 && !(p % 2 == 1 && r == p - 1)) {  // blocking send/recv in pairs (0,1), (2,3), ...
    const int peer = r % 2 == 0 ? r + 1 : r - 1;
    torch::Tensor got = torch::full({n}, -1, opts);
    if (r % 2 == 0) comm.send(fwd, peer), comm.recv(got, peer);
    else comm.recv(got, peer), comm.send(fwd, peer);
    c.equal(got, iota(n) + 10 * peer, "send/recv pair" + tag);
  }
}

// ---- several async operations in flight at once ------------------------------
void test_async(Checker& c, Comm& comm, torch::Device dev) {
  const int p = comm.size(), r = comm.rank();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  torch::Tensor a = torch::full({1000}, r + 1.0, f32), b = torch::full({64}, 2.0 * (r + 1), f32);
  torch::Tensor mine = torch::full({3}, double(r), f32), gathered = torch::empty({3 * p}, f32);
  torch::Tensor in = torch::ones({4 * p}, f32), out = torch::empty({4}, f32);
  torch::Tensor send = torch::full({8}, double(r), f32), recv = torch::empty({8}, f32);
  std::vector<Work> works;
  works.push_back(comm.all_reduce_async(a));
  works.push_back(comm.all_gather_async(gathered, mine));
  works.push_back(comm.reduce_scatter_async(out, in, ReduceOp::kAvg));
  works.push_back(comm.batch_p2p_async({{P2POp::kSend, send, (r + 1) % p}, {P2POp::kRecv, recv, (r + p - 1) % p}}));
  works.push_back(comm.all_reduce_async(b, ReduceOp::kMax));
  for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();  // in reverse order
  works.front().wait();                                                  // a second wait is a no-op
  c.check(!works.front().valid() && !Work().valid(), "a waited Work is no longer valid");
  c.equal(a, torch::full({1000}, p * (p + 1) / 2.0), "async all_reduce sum");
  c.equal(b, torch::full({64}, 2.0 * p), "async all_reduce max");
  c.equal(gathered, iota(3 * p).div(3, "floor"), "async all_gather");
  c.equal(out, torch::ones({4}), "async reduce_scatter avg");
  c.equal(recv, torch::full({8}, double((r + p - 1) % p)), "async batch_p2p ring");
}

// ---- pp / cp ring neighbours are ranks within mesh.pp() / mesh.cp() ---------------
// Every rank sends its global rank to next_in_group(pp) over mesh.pp() and receives from
// prev_in_group(pp): what arrives must be the global rank of the previous stage,
// prev_rank(). Same for cp. With dp 1 pp 2 cp 2 tp 2 (8 ranks) global and group ranks
// differ, so neighbours given as global ranks would fail here (peer out of range);
// pp 4 (4 ranks) checks a longer ring.
void test_neighbours(Checker& c, Mesh& mesh, torch::Device dev, const std::string& tag) {
  const MeshShape& shape = mesh.shape();
  const int me = mesh.rank();
  struct Ring { const char* name; Comm& comm; int next, prev; Axis axis; };
  const Ring rings[] = {
      {"pp", mesh.pp(), next_in_group(shape, me, Axis::kPp), prev_in_group(shape, me, Axis::kPp), Axis::kPp},
      {"cp", mesh.cp(), next_in_group(shape, me, Axis::kCp), prev_in_group(shape, me, Axis::kCp), Axis::kCp}};
  for (const Ring& ring : rings) {
    const std::string what = std::string(ring.name) + " ring neighbours" + tag;
    c.check(ring.next >= 0 && ring.next < ring.comm.size() && ring.prev >= 0 && ring.prev < ring.comm.size(),
            what + ": next " + std::to_string(ring.next) + " / prev " + std::to_string(ring.prev) +
                " are not ranks of a group of " + std::to_string(ring.comm.size()));
    torch::Tensor mine = torch::full({1}, me, torch::TensorOptions().dtype(torch::kInt64).device(dev));
    torch::Tensor from_prev = torch::full({1}, -1, mine.options());
    ring.comm.batch_p2p({{P2POp::kSend, mine, ring.next}, {P2POp::kRecv, from_prev, ring.prev}});
    c.equal(from_prev, torch::full({1}, prev_rank(shape, me, ring.axis)), what);
  }
  // Exactly one first and one last stage in every pp group, at its ends.
  const std::vector<int> stages = group_members(shape, me, Axis::kPp);
  c.check(mesh.is_first_stage() == (me == stages.front()) && mesh.is_last_stage() == (me == stages.back()),
          "is_first_stage / is_last_stage" + tag);
  torch::Tensor firsts = torch::tensor({int64_t(mesh.is_first_stage()), int64_t(mesh.is_last_stage())}).to(dev);
  mesh.pp().all_reduce(firsts);  // how many first / last stages the group has
  c.equal(firsts, torch::full({2}, 1), "one first and one last stage per pp group" + tag);
}

// ---- every group of every factorisation into dp x pp x cp x tp ----------------
void test_mesh_groups(Checker& c, Comm& world, torch::Device dev) {
  const int w = world.size(), me = world.rank();
  for (int dp = 1; dp <= w; ++dp)
    for (int pp = 1; pp <= w; ++pp)
      for (int cp = 1; cp <= w; ++cp)
        for (int tp = 1; tp <= w; ++tp) {
          if (dp * pp * cp * tp != w) continue;
          const MeshShape shape{dp, pp, cp, tp};
          Mesh mesh(world, shape);
          const std::string tag = " [dp " + std::to_string(dp) + " pp " + std::to_string(pp) + " cp " +
                                  std::to_string(cp) + " tp " + std::to_string(tp) + "]";
          struct Group { const char* name; Comm& comm; std::vector<int> members; };
          const Group groups[] = {{"tp", mesh.tp(), group_members(shape, me, Axis::kTp)},
                                  {"cp", mesh.cp(), group_members(shape, me, Axis::kCp)},
                                  {"pp", mesh.pp(), group_members(shape, me, Axis::kPp)},
                                  {"dp", mesh.dp(), group_members(shape, me, Axis::kDp)},
                                  {"cp_dp", mesh.cp_dp(), cp_dp_group_members(shape, me)}};
          for (const Group& g : groups) {
            const std::string what = std::string(g.name) + tag;
            const int size = int(g.members.size());
            const int index = int(std::find(g.members.begin(), g.members.end(), me) - g.members.begin());
            c.check(g.comm.size() == size && g.comm.rank() == index, what + ": group size / rank");
            const torch::Tensor members = torch::tensor(g.members, torch::kInt64);
            torch::Tensor sum = torch::full({2}, me + 1, torch::TensorOptions().dtype(torch::kInt64).device(dev));
            g.comm.all_reduce(sum);
            c.equal(sum, torch::full({2}, (members + 1).sum().item<int64_t>()), what + ": all_reduce");
            torch::Tensor ranks = torch::empty({size}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
            g.comm.all_gather(ranks, torch::full({1}, me, ranks.options()));
            c.equal(ranks, members, what + ": all_gather of world ranks");
            torch::Tensor last = torch::full({1}, me, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
            g.comm.broadcast(last, /*root=*/size - 1);
            c.equal(last, torch::full({1}, double(g.members.back())), what + ": broadcast from the last rank");
          }
          test_neighbours(c, mesh, dev, tag);
        }
}

// ---- bad arguments: refused on the calling rank, before anything is posted -------
void test_errors(Checker& c, Comm& comm, torch::Device dev) {
  const int p = comm.size();
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  torch::Tensor strided = torch::zeros({4, 4}, f32).t();
  c.throws([&] { comm.all_reduce(strided); }, "must be contiguous", "non-contiguous all_reduce");
  torch::Tensor flags = torch::zeros({4}, f32.dtype(torch::kBool));
  c.throws([&] { comm.all_reduce(flags); }, "dtype bool is not supported", "bool all_reduce");
  torch::Tensor small = torch::zeros({p * 3 - 1}, f32);
  c.throws([&] { comm.all_gather(small, torch::zeros({3}, f32)); }, "expected " + std::to_string(p) + " x 3",
           "all_gather with a wrong output size");
  torch::Tensor t = torch::zeros({2}, f32);
  c.throws([&] { comm.broadcast(t, p); }, "is not a rank of this group", "broadcast from a missing root");
  c.throws([&] { comm.send(t, -1); }, "is not a rank of this group", "send to a missing peer");
}

// ---- the communication ledger -------------------------------------------------------
using Ledger = std::map<std::string, CommCount>;

std::string show(const Ledger& ledger) {
  std::string text;
  for (const auto& [kind, n] : ledger)
    text += kind + " " + std::to_string(n.calls) + " calls " + std::to_string(n.elements) + " elements; ";
  return text.empty() ? "(empty)" : text;
}

void expect_ledger(Checker& c, const Comm& comm, const Ledger& want, const std::string& what) {
  const Ledger& got = comm.ledger();
  bool same = got.size() == want.size();
  for (const auto& [kind, n] : want) {
    auto it = got.find(kind);
    same = same && it != got.end() && it->second.calls == n.calls && it->second.elements == n.elements;
  }
  c.check(same, what + ", group " + comm.name() + "\n  got:  " + show(got) + "\n  want: " + show(want));
}

// The words of the report's row for (group, kind); empty if there is none.
std::vector<std::string> report_row(const std::string& report, const std::string& group, const std::string& kind) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    const std::vector<std::string> w{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (w.size() >= 3 && w[0] == group && w[2] == kind) return w;
  }
  return {};
}

void test_ledger(Checker& c, Comm& world, torch::Device dev) {
  const int w = world.size(), me = world.rank();
  const int tp = w % 2 == 0 ? 2 : 1, dp = w / tp;  // pp and cp: groups of one on every world size
  Mesh mesh(world, MeshShape{dp, 1, 1, tp});
  c.check(world.name() == "world" && mesh.tp().name() == "tp" && mesh.cp().name() == "cp" &&
              mesh.pp().name() == "pp" && mesh.dp().name() == "dp" && mesh.cp_dp().name() == "cp_dp",
          "groups are named world, tp, cp, pp, dp, cp_dp");
  c.check(!world.ledger().empty(), "the world counted the earlier tests (at least their barriers and p2p)");
  mesh.reset_ledgers();
  Comm* const groups[] = {&mesh.world(), &mesh.tp(), &mesh.cp(), &mesh.pp(), &mesh.dp(), &mesh.cp_dp()};
  for (Comm* g : groups) expect_ledger(c, *g, {}, "after reset_ledgers");

  // A known sequence, twice ("2 steps"). Per call, elements of the full buffer (comm.h).
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  for (int step = 0; step < 2; ++step) {
    torch::Tensor x = torch::ones({10}, f32);
    world.all_reduce(x);  // world all_reduce: 10
    c.equal(x, torch::full({10}, double(w)), "ledger sequence: all_reduce");
    torch::Tensor shard = torch::full({3}, double(me), f32), full = torch::empty({3 * tp}, f32);
    mesh.tp().all_gather(full, shard);  // tp all_gather: 3 x tp
    torch::Tensor grads = torch::ones({4 * dp}, f32), mine = torch::empty({4}, f32);
    mesh.dp().reduce_scatter(mine, grads);  // dp reduce_scatter: 4 x dp
    c.equal(mine, torch::full({4}, double(dp)), "ledger sequence: reduce_scatter");
    torch::Tensor y = torch::ones({5}, f32);
    mesh.dp().all_reduce_async(y, ReduceOp::kAvg).wait();  // dp all_reduce: 5
    torch::Tensor t = torch::full({7}, double(me), f32);
    mesh.tp().broadcast(t, /*root=*/0);  // tp broadcast: 7
    const int n = mesh.dp().size(), r = mesh.dp().rank();
    torch::Tensor out = torch::full({6}, double(me), f32), in = torch::empty({6}, f32);
    mesh.dp().batch_p2p({{P2POp::kSend, out, (r + 1) % n}, {P2POp::kRecv, in, (r + n - 1) % n}});  // dp send 6, recv 6
  }
  world.barrier();  // world barrier: 0

  // Groups of one (pp and cp here): every collective still gives the right result, and
  // nothing is recorded.
  for (Comm* alone : {&mesh.pp(), &mesh.cp()}) {
    const std::string what = "group of one (" + alone->name() + ")";
    const torch::Tensor want = torch::arange(6, torch::kFloat64) + 10 * me;
    torch::Tensor a = want.to(f32);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) alone->all_reduce(a, op);
    c.equal(a, want, what + ": all_reduce sum, max, avg");
    c.check(!alone->all_reduce_async(a).valid(), what + ": all_reduce_async returns an empty Work");
    torch::Tensor gathered = torch::full({2, 3}, -1, f32);  // another shape, as many elements
    alone->all_gather(gathered, a);
    c.equal(gathered.flatten(), want, what + ": all_gather copies in to out");
    torch::Tensor reduced = torch::full({6}, -1, f32);
    alone->reduce_scatter_async(reduced, a, ReduceOp::kAvg).wait();
    c.equal(reduced, want, what + ": reduce_scatter copies in to out");
    alone->all_gather(a, a);  // the same memory: nothing to copy
    alone->reduce_scatter(a, a);
    alone->broadcast(a, /*root=*/0);
    c.equal(a, want, what + ": in place and broadcast leave the tensor alone");
    c.throws([&] { alone->broadcast(a, 1); }, "is not a rank of this group", what + ": arguments still checked");
    expect_ledger(c, *alone, {}, what + " records nothing");
  }

  // The expected ledgers. A group of one records nothing but p2p and barrier.
  Ledger want_world{{"barrier", {1, 0}}}, want_tp, want_dp{{"send", {2, 12}}, {"recv", {2, 12}}};
  if (w > 1) want_world["all_reduce"] = {2, 20};
  if (tp > 1) want_tp = {{"all_gather", {2, 2 * 3 * tp}}, {"broadcast", {2, 14}}};
  if (dp > 1) {
    want_dp["reduce_scatter"] = {2, 2 * 4 * dp};
    want_dp["all_reduce"] = {2, 10};
  }
  expect_ledger(c, mesh.world(), want_world, "ledger after the sequence");
  expect_ledger(c, mesh.tp(), want_tp, "ledger after the sequence");
  expect_ledger(c, mesh.dp(), want_dp, "ledger after the sequence");
  expect_ledger(c, mesh.cp_dp(), {}, "ledger after the sequence");  // same members as dp, another Comm

  // The report: one row per (group, kind), words compared one by one (widths may change).
  const std::string report = mesh.comm_report(/*steps=*/2);
  using Row = std::vector<std::string>;
  auto expect_row = [&](const Row& want) {
    c.check(report_row(report, want[0], want[2]) == want, "comm_report row for " + want[0] + " " + want[2] + "\n" + report);
  };
  c.check(report.find("calls/step") != std::string::npos, "comm_report has a header\n" + report);
  const std::string W = std::to_string(w), DP = std::to_string(dp), TP = std::to_string(tp);
  expect_row({"world", W, "barrier", "1", "0", "0.5", "0"});
  expect_row({"dp", DP, "send", "2", "12", "1", "6"});
  expect_row({"dp", DP, "recv", "2", "12", "1", "6"});
  if (w > 1) expect_row({"world", W, "all_reduce", "2", "20", "1", "10"});
  if (tp > 1) expect_row({"tp", TP, "all_gather", "2", std::to_string(6 * tp), "1", std::to_string(3 * tp)});
  if (dp > 1) expect_row({"dp", DP, "reduce_scatter", "2", std::to_string(8 * dp), "1", std::to_string(4 * dp)});
  for (const char* kind : kCommKinds)
    c.check(report_row(report, "pp", kind).empty() && report_row(report, "cp", kind).empty() &&
                report_row(report, "cp_dp", kind).empty(),
            std::string("comm_report: no row for groups that recorded no ") + kind + "\n" + report);

  // reset_ledger clears one Comm; reset_ledgers all of them.
  mesh.dp().reset_ledger();
  expect_ledger(c, mesh.dp(), {}, "after dp.reset_ledger()");
  expect_ledger(c, mesh.world(), want_world, "the world untouched by dp.reset_ledger()");
  mesh.reset_ledgers();
  c.check(mesh.comm_report(1).find("no communication") != std::string::npos, "comm_report of empty ledgers");
  if (me == 0) std::printf("%s", report.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int timeout_s = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) device_name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--timeout-s")) timeout_s = std::atoi(argv[i + 1]);
  }
  Distributed dist(detect_launch(process_environment()));
  Checker c{dist};
  try {
    torch::set_num_threads(1);
    torch::Device dev(torch::kCPU);
    if (device_name == "cuda") dev = torch::Device(torch::kCUDA, dist.select_cuda_device());
    Comm world = Comm::world(dist, dev, std::chrono::seconds(timeout_s));
    auto say = [&](const std::string& what) {
      if (world.rank() != 0) return;
      std::printf("ok  %s\n", what.c_str());
      std::fflush(stdout);
    };
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16,
                                    torch::kInt32, torch::kInt64}) {
      test_collectives(c, world, dtype, dev);
      say("every collective, " + dtype_name(dtype));
    }
    torch::Tensor big = torch::full({1 << 20}, world.rank() + 1.0, torch::TensorOptions().device(dev));
    world.all_reduce(big);
    c.equal(big, torch::full({1 << 20}, world.size() * (world.size() + 1) / 2.0), "all_reduce of 4 MiB");
    say("all_reduce of 4 MiB");
    test_async(c, world, dev);
    say("async operations in flight together");
    test_mesh_groups(c, world, dev);
    say("sub-groups of every factorisation of " + std::to_string(world.size()) + " ranks");
    test_errors(c, world, dev);
    say("argument errors");
    test_ledger(c, world, dev);
    say("communication ledger and comm_report");
    world.barrier();
    torch::Tensor total = torch::full({1}, c.passed, torch::TensorOptions().dtype(torch::kInt64).device(dev));
    world.all_reduce(total);
    if (world.rank() == 0) std::printf("%lld passed, 0 failed\n", static_cast<long long>(total.item<int64_t>()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] FAILED with an exception: %s\n", dist.rank(), e.what());
    dist.abort_job(1);
  }
  return 0;
}
