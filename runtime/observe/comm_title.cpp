// runtime/observe/comm_title.cpp — see comm_title.h.
#include "runtime/observe/comm_title.h"

namespace picotron {

std::string comm_title(const StepPlace& place, bool backward, const char* carries, bool with_micro_batch) {
  std::string where;
  const auto add = [&where](const std::string& s) { where += (where.empty() ? "" : ", ") + s; };
  if (place.from_stage >= 0) {  // a pipeline message: its micro-batch and its stages
    add("micro-batch " + std::to_string(place.micro_batch));
    add("stage " + std::to_string(place.from_stage) + " -> " + std::to_string(place.to_stage));
  } else {
    if (with_micro_batch && place.micro_batch >= 0) add("micro-batch " + std::to_string(place.micro_batch));
    if (place.layer >= 0) add("layer " + std::to_string(place.layer));
    if (place.part != Part::kNone) add(part_name(place.part));
    if (backward || place.layer >= 0 || place.part != Part::kNone) add(backward ? "backward" : "forward");
  }
  const std::string what = carries ? carries : "";
  if (where.empty()) return what;
  return "[" + where + "]" + (what.empty() ? "" : " " + what);
}

}  // namespace picotron
