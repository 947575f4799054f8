# scripts/gdb/zero.gdb — ZeRO-1: stop at the sync, where each bucket's full gradient is
# reduce-scattered into this rank's slice (zero/zero1.cpp).
#   print flat_grad_          the full accumulated gradient [P_pad]: this rank's micro-batches
#   print shard_.layout.shard my slice's size, P_pad / N
#   next 4; print mine        past the reduce-scatter: my slice [P_pad / N], the cp x dp average
#                             of that part of every rank's flat_grad_ (rank r holds part r)
break Zero1Optimizer::sync_grads
