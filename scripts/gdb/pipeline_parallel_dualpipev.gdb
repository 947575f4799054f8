# scripts/gdb/pipeline_parallel_dualpipev.gdb — DualPipeV (--pp-schedule dualpipev): stop at
# each forward of a model chunk (pipeline_parallel/pipeline_parallel.cpp), where the V shows:
# chunk 0 of pp rank r is stage r, chunk 1 is stage 2P-1-r, and rank 0 computes the loss.
#   print a            the action: kind, micro-batch, chunk, paired (an F&B pair: its B is next)
#   print vs           (after `next` twice) the virtual stage: r or 2P-1-r
#   print rank_, last_rank_, v_shape_    the V: the loss is on last_rank_ = 0
#   print outbox_      on the V's bottom (rank P-1): stage P-1's output waits here for its own F of chunk 1
#   bt                 the step of the program it belongs to (Pipeline::run_step)
# Walkthrough: docs/stepping.md.
break Pipeline::forward
