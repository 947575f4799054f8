# scripts/gdb/expert_parallel.gdb — expert parallelism: stop where a MoE layer's tokens
# leave for their experts (expert_parallel/expert_parallel.cpp, ExpertParallel::run).
#   print r.experts     this rank's routing: the k experts of each token [T, k]
#   next 11             past the dispatch and the counts' all-to-all, then:
#   print d.send_rows   the (token, slot) pairs this rank sends to each ep rank
#   print recv_rows     the pairs each ep rank sends to this one (the counts' all-to-all)
#   print moe.layer_index; print moe.experts   which layer, and the experts this rank holds
break ExpertParallel::run
