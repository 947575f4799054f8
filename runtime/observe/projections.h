// runtime/observe/projections.h — what each projection of the model BECAME, read from the modules
// in its slots and the shard plan, not from the flags: the check that a technique which
// replaces slots after another (zb-h1's deferred dW after --fp8, say) has not silently
// undone it, and the lines --explain prints.
//
//   layer 0 (of this rank's first layer; every layer is built alike):
//     q_proj fp8 linear, column-parallel over tp (2 slices) | k_proj ... | o_proj fp8 linear, row-parallel over tp ...
//
// Test: build/tests/unit_tests "[projections]"; every run checks itself (train.cpp).
#pragma once

#include <string>
#include <vector>

#include "picotron/model.h"
#include "picotron/shard.h"

namespace picotron {

struct ProjectionKind {
  int64_t layer = 0;
  std::string slot;    // "q_proj", ..., "down_proj"
  std::string module;  // "linear", "fp8 linear", "linear, dW deferred to W (zero bubble)", or the module's type
  std::string split;   // "column-parallel over tp (2 slices)", "row-parallel over tp (2 slices)", "whole"
};

// Every projection of every dense layer this rank holds (a mixture-of-experts layer's
// experts are not projections: they stay in the run's dtype).
std::vector<ProjectionKind> projection_kinds(LlamaForCausalLMImpl& model, const ShardPlan& plan);

// "" when every projection is what `fp8` asks (an fp8 linear each, or none); else the line
// naming the first that is not.
std::string projections_problem(const std::vector<ProjectionKind>& kinds, bool fp8);

// The --explain lines: this rank's first layer, one projection per entry.
std::string projections_text(const std::vector<ProjectionKind>& kinds);

// Every run, once its model is built: what each projection became, read from the final
// model. A technique that replaced another's slot is an error (thrown: the run stops with
// the line), never a silent change; --explain prints the kinds (rank 0).
void check_projections(LlamaForCausalLMImpl& model, const ShardPlan& plan, bool fp8, bool explain, int rank);

}  // namespace picotron
