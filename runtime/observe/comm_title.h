// runtime/observe/comm_title.h — the title of a communication, composed from what the step
// already knows: where it was (picotron/step_place.h: micro-batch, layer, part, pipeline
// stages), forward or backward, and what its call site says it carries (CallSite::carries).
//
//   [layer 0, attention, backward] f: the gradient of the block's input, summed over tp
//   [micro-batch 1, stage 0 -> 1] pipeline: an activation, to the next stage
//   ZeRO: my slice of every gradient bucket, averaged over the shard group
//
// --explain prints it above the communication; the flight recorder keeps it as the entry's
// note. No technique builds it: they only declare the words beside the collective.
//
// Test: build/tests/unit_tests "[place]"; ctest -R explain.narration
#pragma once

#include <string>

#include "picotron/step_place.h"

namespace picotron {

// with_micro_batch: name the micro-batch (the flight recorder; --explain's headings already do).
std::string comm_title(const StepPlace& place, bool backward, const char* carries, bool with_micro_batch = false);

}  // namespace picotron
