// ZeRO's flat layout without communication: every element of every parameter lands in
// exactly one rank's slice, at the right place, whatever the sizes (pure arithmetic).
#include <catch2/catch.hpp>

#include <algorithm>

#include "picotron/grad_buckets.h"
#include "zero/zero.h"

using namespace picotron;

TEST_CASE("zero layout: slices cover every element once, padding at the end", "[zero]") {
  // Three parameters of 5, 3 and 6 elements (14) over 4 ranks: padded to 16, slices of 4.
  //   flat: a a a a | a b b b | c c c c | c c . .
  const ZeroLayout l = zero_layout({5, 3, 6}, 4);
  CHECK(l.numel == 14);
  CHECK(l.padded == 16);
  CHECK(l.shard == 4);
  CHECK(l.offsets == std::vector<int64_t>{0, 5, 8});
  const auto r1 = l.pieces(1);  // the end of a (straddles 0|1), then all of b
  REQUIRE(r1.size() == 2);
  CHECK((r1[0].param == 0 && r1[0].first == 4 && r1[0].length == 1 && r1[0].slice_offset == 0));
  CHECK((r1[1].param == 1 && r1[1].first == 0 && r1[1].length == 3 && r1[1].slice_offset == 1));
  const auto r3 = l.pieces(3);  // the last two of c, then two padding elements nobody owns
  REQUIRE(r3.size() == 1);
  CHECK((r3[0].param == 2 && r3[0].first == 4 && r3[0].length == 2 && r3[0].slice_offset == 0));

  for (int N : {1, 2, 3, 4, 7, 16})
    for (int64_t capacity : {INT64_MAX, int64_t(1), int64_t(7), int64_t(100)})
      for (auto sizes : {std::vector<int64_t>{1}, {5, 3, 6}, {64, 1, 63, 128, 7}, {1000, 999, 1}}) {
        const ZeroLayout z = zero_layout(sizes, N, capacity);
        CHECK(z.shard * N == z.padded);
        for (const auto& b : z.buckets) {
          CHECK(b.padded % N == 0);
          CHECK(b.padded - b.numel < N);
          CHECK((b.numel <= capacity || b.end_param - b.first_param == 1));  // a big one alone
        }
        std::vector<std::vector<int>> seen(sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i) seen[i].assign(size_t(sizes[i]), 0);
        for (int r = 0; r < N; ++r)
          for (const auto& p : z.pieces(r)) {
            CHECK(p.slice_offset + p.length <= z.shard);
            // the piece sits in rank r's part of its bucket, at the same place in the slice
            const auto& b = *std::find_if(z.buckets.begin(), z.buckets.end(),
                                          [&](const auto& k) { return p.param >= k.first_param && p.param < k.end_param; });
            CHECK(z.offsets[p.param] + p.first == b.offset + r * (b.padded / N) + (p.slice_offset - b.shard_offset));
            for (int64_t e = p.first; e < p.first + p.length; ++e) ++seen[p.param][size_t(e)];
          }
        for (const auto& s : seen)
          for (int count : s) CHECK(count == 1);
      }
}

TEST_CASE("zero layout with buckets: each bucket padded and cut into N parts", "[zero]") {
  // 5, 3 | 6 with capacity 8 over 2 ranks: buckets of 8 and 6 (no padding)
  const ZeroLayout l = zero_layout({5, 3, 6}, 2, 8);
  REQUIRE(l.buckets.size() == 2);
  CHECK(l.buckets[1].offset == 8);
  CHECK(l.offsets == std::vector<int64_t>{0, 5, 8});
  CHECK(l.shard == 7);  // 4 of bucket 0 + 3 of bucket 1
  const auto r1 = l.pieces(1);  // a's last, b, then c's last three
  REQUIRE(r1.size() == 3);
  CHECK((r1[0].param == 0 && r1[0].first == 4 && r1[0].length == 1 && r1[0].slice_offset == 0));
  CHECK((r1[1].param == 1 && r1[1].length == 3 && r1[1].slice_offset == 1));
  CHECK((r1[2].param == 2 && r1[2].first == 3 && r1[2].length == 3 && r1[2].slice_offset == 4));
}

TEST_CASE("zero-3 layout: one bucket per unit, each padded to N", "[zero]") {
  // embedding 5 | layer 0: 3 + 2 | head 1, over 3 ranks: buckets of 5, 5, 1 padded to 6, 6, 3
  const std::vector<std::string> names = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight", "model.norm.weight"};
  CHECK(zero3_unit(names[0]) == "embedding");
  CHECK(zero3_unit(names[1]) == "layer 0");
  CHECK(zero3_unit("model.layers.12.input_layernorm.weight") == "layer 12");
  CHECK(zero3_unit(names[3]) == "head");
  CHECK(zero3_unit("lm_head.weight") == "head");
  const ZeroLayout l = zero_layout({5, 3, 2, 1}, 3, INT64_MAX, {0, 1, 1, 2});
  REQUIRE(l.buckets.size() == 3);
  CHECK((l.buckets[1].first_param == 1 && l.buckets[1].end_param == 3));
  CHECK((l.buckets[0].padded == 6 && l.buckets[1].padded == 6 && l.buckets[2].padded == 3));
  CHECK(l.shard == 5);  // 2 + 2 + 1
  const auto r2 = l.pieces(2);  // embedding's 5th; layer 0's [10, 12): up_proj's 2nd + a pad; head: a pad
  REQUIRE(r2.size() == 2);
  CHECK((r2[0].param == 0 && r2[0].first == 4 && r2[0].length == 1 && r2[0].slice_offset == 0));
  CHECK((r2[1].param == 2 && r2[1].first == 1 && r2[1].length == 1 && r2[1].slice_offset == 2));
}

TEST_CASE("HSDP groups: shard blocks inside, replicas across, every rank once in each", "[zero]") {
  // cp x dp group of 8, shard groups of 4: {0 1 2 3} {4 5 6 7}; replicas {0 4} {1 5} {2 6} {3 7}.
  CHECK(block_members(8, 4, 5) == std::vector<int>{4, 5, 6, 7});
  CHECK(across_blocks_members(8, 4, 5) == std::vector<int>{1, 5});
  CHECK(across_blocks_members(8, 4, 0) == std::vector<int>{0, 4});
  // Every (shard, replica) pair names exactly one rank: the two groupings are a grid.
  for (int G : {2, 4, 6, 8, 12})
    for (int S = 1; S <= G; ++S) {
      if (G % S) continue;
      std::vector<int> seen(size_t(G), 0);
      for (int r = 0; r < G; ++r) {
        const auto shard = block_members(G, S, r), replicas = across_blocks_members(G, S, r);
        CHECK(int(shard.size()) == S);
        CHECK(int(replicas.size()) == G / S);
        int common = 0;
        for (int m : shard) common += int(std::count(replicas.begin(), replicas.end(), m));
        CHECK(common == 1);  // only r itself
        ++seen[size_t(shard.front() + r % S)];
      }
      CHECK(std::count(seen.begin(), seen.end(), 1) == G);
    }
  // The flags in ranks of the group: --zero-shard 2 with cp 2 is a block of 4 of cp x dp;
  // the experts' group (one rank in ep of each shard), ep 2: a block of 2; 0: the whole group.
  CHECK(zero_block_ranks(2, 2, 1, 8) == 4);
  CHECK(zero_block_ranks(2, 2, 2, 4) == 2);
  CHECK(zero_block_ranks(0, 2, 1, 8) == 8);
}

TEST_CASE("grad buckets: a bucket launches only after every bucket before it, whatever order they complete in",
          "[optim]") {
  // picotron/grad_buckets.h, the mechanism data parallelism and ZeRO-2/3 share. Parameter a
  // is in bucket 1, b in bucket 0 (bucket 0 launches first). a's gradient arrives first:
  // nothing may go until b's completes bucket 0, then 0 and 1, in that order, on every rank.
  auto a = torch::ones({2}, torch::requires_grad()), b = torch::ones({3}, torch::requires_grad());
  std::vector<TrainableParam> params(2);
  params[0].name = "a", params[0].param = a;
  params[1].name = "b", params[1].param = b;
  std::vector<size_t> taken, launched, done;
  GradBuckets buckets(params, {1, 0},
                      {[&](size_t i) { taken.push_back(i); }, [&](size_t k) { launched.push_back(k); return Work(); },
                       [&](size_t k) { done.push_back(k); }, {}});
  (a * 2).sum().backward();
  CHECK(taken == std::vector<size_t>{0});
  CHECK(launched.empty());  // bucket 1 is complete, bucket 0 is not: nothing goes yet
  (b * 2).sum().backward();
  CHECK(launched == std::vector<size_t>{0, 1});
  buckets.flush();
  CHECK(done == std::vector<size_t>{0, 1});
  // No-sync (gradient accumulation): gradients are taken, nothing is sent.
  buckets.arm(/*launch=*/false);
  launched.clear();
  (b * 2).sum().backward();
  (a * 2).sum().backward();
  CHECK(launched.empty());
}
