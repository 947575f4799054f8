// context_parallel/ulysses.h — all-to-all context parallelism (DeepSpeed-Ulysses, Jacobs et
// al., arXiv 2309.14509) and its hybrid with the ring (USP, Fang & Zhao, arXiv 2405.07719).
//
// The ring keeps the sequence split and moves keys and values (C-1 hops). Ulysses swaps
// the split instead: an all-to-all turns "my S/C tokens of every head" into "every token
// of my nH/C heads", attention runs on whole sequences, and a second all-to-all turns the
// output back. C = 4, h heads, n = S/C tokens per rank:
//
//            before: tokens split            after: heads split
//   rank 0   [n tokens 0 | h heads]    --->   [S tokens | heads 0 .. h/4-1 ]
//   rank 1   [n tokens 1 | h heads]    a2a    [S tokens | heads h/4 .. h/2-1]   attention:
//   rank 2   [n tokens 2 | h heads]    --->   [S tokens | ...               ]   whole causal
//   rank 3   [n tokens 3 | h heads]           [S tokens | heads 3h/4 .. h-1 ]   sequences
//
// The all-to-all: rank r cuts its [B, h, n, Hd] into U head groups, sends group p to rank p,
// and receives rank p's tokens of group r: out_r[p] = in_p[r]. Applied twice it gives back
// the input, and its adjoint is itself (d in_r[p] = d out_p[r]): the backward of each
// all-to-all is the same all-to-all on the gradient: sequence -> heads forward is heads ->
// sequence backward, and the other way round (ulysses.cpp: SequenceToHeads, HeadsToSequence).
//
// Positions. The gathered tokens come in rank order (rank 0's, then rank 1's, ...), which
// in the zigzag layout is not the sequence's order; ulysses_order (cp_layout.h) permutes
// them into it before attention, and back after, so the causal mask is the true one.
//
// GQA. q has nH/tp heads per tp rank, k and v nKV/tp. When nKV/tp is not divisible by U
// (e.g. nKV/tp = 2, U = 4) each kv head is repeated f = U / gcd(nKV/tp, U) times before
// the all-to-all (query head j still reads a copy of kv head j / (nH/nKV)); the repeat's
// backward sums the copies' gradients back. Cost: f times the k, v elements.
//
// Hybrid (U < C). The cp group factors into all-to-all groups of U consecutive cp ranks
// and rings of R = C/U ranks (one per head group). After the all-to-all a group's members
// each hold U·S/C tokens, exactly what ring rank i of R would hold (cp_layout.h), for nH/U
// heads; ring attention (context_parallel.h) over R ranks does the rest.
//
// Elements per rank, per layer and micro-batch (e = B·(S/C)·Hd, heads per tp rank):
//   forward  q, k, v out, o back:   (U-1)/U · e · (2 nH/tp + 2 f nKV/tp)
//   backward the same again (dO out, dQ, dK, dV back);   plus, hybrid: the ring's
//   (3R - 2) hops of 2·B·(U·S/C)·(f nKV/tp)/U·Hd over R ranks.
//
// Test: ctest -R "context_parallel.ulysses|equivalence.cp.*ulysses|equivalence.cp.*hybrid"
#pragma once

#include <memory>

#include <torch/torch.h>

#include "context_parallel/cp_layout.h"
#include "picotron/comm.h"
#include "picotron/model.h"

namespace picotron {

// [B, h, n, Hd] (my n tokens of h heads) -> [B, h/U, U·n, Hd] (the group's tokens of my
// h/U heads, in rank order), and back. U = group.size(). Each is one all-to-all forward and
// the other one backward.
torch::Tensor sequence_to_heads(const torch::Tensor& x, Comm& group);
torch::Tensor heads_to_sequence(const torch::Tensor& x, Comm& group);

// The attention-core slot: q [B, nH, S/C, Hd], k, v [B, nKV, S/C, Hd] -> [B, nH, S/C, Hd].
// a2a: cp rank `cp_rank`'s all-to-all group (U of the C cp ranks: cp_ring_rank · U + u). `inner` attends over the gathered tokens in the order ulysses_order puts
// them: the layer's causal core (U = C), or ring attention over the ring group (hybrid).
// `keep` holds whatever the core uses alive (the hybrid's groups).
AttentionCore ulysses_attention(Comm& a2a, int C, int cp_rank, CpLayout layout, AttentionCore inner,
                                std::shared_ptr<void> keep = nullptr);

}  // namespace picotron
