# scripts/gdb/fp8.gdb — fp8 linears (--fp8): stop where a linear's scales are set, at the
# amax all-reduce (kernels/fp8.cpp, amax_over): the max |t| of this rank's pieces of x and
# W (forward) or dY (backward), max-reduced over tp and cp so every rank scales alike.
#   scripts/debug.sh -np 2 --stop fp8 -- --fp8 --dtype fp64 --tp 2 --steps 1
#   next 3       past the local amaxes; then:  print amax   this rank's [2]: x, W (tp-local)
#   print *group the group it is reduced over (tp first, then cp), with its ledger
#   finish       "Value returned" is the max over the group: the same on every rank;
#                rank 1 shows the same numbers (run with --all to see both)
break picotron::fp8::amax_over
# The first call is layer 0's q_proj forward: x (the normed input) and q_proj.weight.
