# scripts/gdb/fp8.gdb — fp8 linears (--fp8): stop where a linear's scales are set, at the
# amax all-reduce (kernels/fp8.cpp, amax_over): the max |t| of this rank's pieces of x and
# W (forward) or dY (backward), max-reduced over tp and cp so every rank scales alike.
#   print ts     this rank's pieces: x [N, in] (whole on every tp rank) and W (q_proj's
#                rows of this rank: [out/tp, in])
#   finish       "Value returned" is [2], max |x| and max |W| over the tp (then cp) ranks:
#                the same on every rank, so every rank quantises with the same scales
#                (--rank 1 shows the same two numbers from its other half of W)
# Walkthrough: docs/stepping.md (FP8).
break picotron::fp8::amax_over
# The first call is layer 0's q_proj forward: x (the normed input) and q_proj.weight.
