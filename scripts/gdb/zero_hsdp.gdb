# scripts/gdb/zero_hsdp.gdb — hybrid sharding (--zero-shard N, HSDP) and ZeRO++'s secondary
# shard (--zero-hpz H), zero/zero_groups.h. Two stops:
#   ZeroShard::average_over_replicas (zero/zero_shard.cpp), once per step after the
#     reduce-scatter over my shard group: my slice's all-reduce (avg) over the replicas;
#   Zero3Optimizer::gather_secondary (zero/zero3.cpp), a unit's backward under hpZ: the
#     gather over my H-rank secondary group from the parts kept since its forward.
# At average_over_replicas:
#   print groups.replicas_.name_   "cp_dp_replicas": the ranks at my place in every shard group
#   print groups.replicas_.size_   R = cp x dp / S, how many copies of my slice there are
#   print groups.replicas_.rank_   my shard group among them (0: its copy counts in the norm)
#   print groups.shard_.size_      S, the shard group's ranks: my slice is 1/S of every bucket
#   print grad              my slice [P_pad / S], still the average over my shard group only
#   finish; print shard_.grad  back in the stage: the average over all R shard groups, the
#                       whole cp x dp average (with --rank R', the replica's slice before
#                       it: the two before-values average to the one after)
#   (at gather_secondary: `next 2`, then `print unit.name`, the unit; `print unit.secondary`,
#   my part [P_pad_unit / H], kept since its forward; `print secondary.size_`, H, and
#   `print secondary.rank_`, which part is mine; `finish` posts the all-gather into the unit)
# Walkthrough: docs/stepping.md (Hybrid sharding).
break picotron::ZeroShard::average_over_replicas
break picotron::Zero3Optimizer::gather_secondary
