# scripts/gdb/tensor_parallel.gdb — tensor parallelism: stop at g, the all-reduce that sums
# the row-parallel partial outputs (o_proj, down_proj) over the tp ranks
# (tensor_parallel/tensor_parallel.cpp, ReduceFromTp).
#   print x      this rank's partial output [B, S, H]: its heads' (or MLP columns') share only
#   print *tp    the tp group (its name, ranks and ledger)
#   finish       runs the all-reduce; "Value returned" is the full sum, the same on every tp rank
break ReduceFromTp::forward
# The first call is the vocabulary-parallel embedding's sum (each rank looks up only its
# half of the vocabulary); skip it: the stop is layer 0's attention output, after o_proj.
ignore 1 1
