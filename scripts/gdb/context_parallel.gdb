# scripts/gdb/context_parallel.gdb — context parallelism: stop at each ring step, where this
# rank passes a key/value block on to the next cp rank (context_parallel/context_parallel.cpp).
#   print mine          the block passed on: keys and values [2, B, nKV, S/cp, Hd]
#   print cp.rank_      this rank's place on the ring; the next block comes from the previous rank
#   up; print out       the attention output merged so far, and `print lse` its log-sum-exp
#                       (zeros and -inf before the first block)
#   break merge         then continue; finish; tensor lse 4 62: each block absorbed, the rows
#                       it reaches filled (with --cp 2 the next pass_on stop is the next
#                       layer's, lse -inf again)
break pass_on
