# scripts/gdb/pipeline_parallel.gdb — pipeline parallelism: stop where a stage posts a send
# to its neighbour (pipeline_parallel/pipeline_parallel.cpp).
#   print tensor       the activations (forward) or their gradient (backward) [B, S, H]
#   print t            which micro-batch, which peer, activation or gradient
#   bt                 which action of the schedule sent it (Pipeline::forward / backward)
break Pipeline::send
