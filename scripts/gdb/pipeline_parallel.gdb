# scripts/gdb/pipeline_parallel.gdb — pipeline parallelism: stop where a stage exchanges a
# group of sends and receives with its neighbours (pipeline_parallel/pipeline_parallel.cpp).
#   print group        the group: send or receive, and each Transfer (micro-batch, peer, kind)
#   print outbox_      the tensors this rank made and has not sent yet
#   bt                 the step of the program it belongs to (Pipeline::run_step)
break Pipeline::exchange
