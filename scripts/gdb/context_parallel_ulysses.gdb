# scripts/gdb/context_parallel_ulysses.gdb — Ulysses (--cp-mode ulysses | hybrid): stop where
# a rank's tokens of every head become every token of its heads, before the all-to-all
# (context_parallel/ulysses.cpp). Three stops per layer forward: q, k, v (o's way back is
# heads_to_sequence); the backward's all-to-alls run inside autograd (SequenceToHeads::backward,
# HeadsToSequence::backward), not through this function.
#   print x             this rank's tokens: [B, h, S/cp, Hd] (h = nH/tp, or f·nKV/tp for k, v)
#   print group.size_   U, the all-to-all group; finish: the result [B, h/U, U·S/cp, Hd]
#   finish; tensor to all   back in the attention core: where each position is taken from in
#                       the gathered tokens, which come in rank order (zigzag cp 2:
#                       0-31, 64-127, 32-63); `tensor` prints all of a small tensor
#                       (scripts/picotron_gdb.py; print shows the first six values)
# Walkthrough: docs/stepping.md (Ulysses).
break picotron::sequence_to_heads
