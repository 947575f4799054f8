// runtime/cli/run_config.h — what build/train's command line sets: the run's TrainConfig
// (runtime/cli/train_config.h; the step and the techniques get small settings structs
// built from it, runtime/cli/settings.h) and the runtime's own settings, which nothing below the runtime sees. Today
// that is the planner's machine (--plan, runtime/planner/layout_search.h).
//
// The flags (runtime/cli/flags.cpp) fill a RunConfig; train.cpp builds from the TrainConfig
// part what the step and each technique read (its own small settings struct or a few
// fields: no technique takes a TrainConfig), and hands the whole to the planner.
#pragma once

#include <cstdint>

#include "runtime/cli/train_config.h"

namespace picotron {

// --plan's settings: the machine and the batch it plans for (nothing is launched or allocated).
struct LayoutSearchSettings {
  bool search = false;                 // --plan: search the layouts for --gpus GPUs, print the best --plan-top, exit
  bool layout_only = false;            // --plan-layout: predict only this run's own layout (--dp, --tp, ...)
  int gpus = 8;                        // GPUs to plan for (N = dp x tp x pp x cp)
  int gpus_per_node = 8;               // GPUs joined by the fast intra-node links (NVLink)
  double gpu_memory_gb = 80;           // memory per GPU, GB (10^9 bytes); the predicted peak must fit in it
  int64_t global_batch_tokens = 1048576;  // tokens per optimizer step to reach (micro-batch x grad-acc x dp x seq-len)
  double intra_node_gbps = 450;        // GB/s per GPU per direction inside a node (H100 NVLink 4)
  double inter_node_gbps = 50;         // GB/s per GPU per direction between nodes (InfiniBand NDR 400 Gb/s)
  double peak_tflops = 989;            // dense peak of one GPU in the compute dtype (H100 SXM bf16: 989)
  int top = 5;                         // layouts printed, best first
};

struct RunConfig : TrainConfig {
  LayoutSearchSettings planner;
};

}  // namespace picotron
