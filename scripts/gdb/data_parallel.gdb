# scripts/gdb/data_parallel.gdb — data parallelism: stop where a full bucket of gradients
# is launched as one asynchronous all-reduce during backward (data_parallel/data_parallel.cpp).
#   print index      which bucket: 0 holds the last layers' gradients (backward's order)
#   print bucket     the bucket's main grads [numel]: this rank's micro-batch only
#   bt               backward is still running below us (GradBuckets::on_grad_ready, the
#                    hook, picotron/grad_buckets.cpp): communication overlaps it
#   (the all-reduce averages the bucket over cp x dp in the background; finish_gradient_sync
#    waits for it after backward: break there to see every rank's bucket equal)
break DataParallel::launch
