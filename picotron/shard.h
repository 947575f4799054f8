// picotron/shard.h — how the tensor a rank holds relates to the full parameter.
//
// Every trainable parameter carries a ShardRecord: its Hugging Face name, its FULL
// shape, and which piece of it this rank holds. A technique never edits the model; it
// edits the plan (name -> record) the model is built from:
//
//   tensor parallelism   q_proj.weight [nH*Hd, H]: split_dim 0 over tp, index tp_i of tp
//   pipeline parallelism model.layers.8.*: stage 1 (only the ranks with pp_i = 1 hold it)
//   ZeRO-3               a flat slice over dp (its own records, one level up)
//
//   full tensor, split_dim 0, count 3, full length 10 (uneven: the first 10 % 3 = 1
//   slices get one more row):
//      rows 0..3  -> index 0 (offset 0, length 4)
//      rows 4..6  -> index 1 (offset 4, length 3)
//      rows 7..9  -> index 2 (offset 7, length 3)
//
// Replicas. Whatever is not split is held whole by several ranks: every axis in
// replica_axes holds identical copies (after the gradient sync), and so does the last
// pipeline stage for a tied embedding (it holds the stage-0 parameter). For a global
// gradient norm, a checkpoint or a gather, each element must be counted ONCE: the copy
// that counts is the one at coordinate 0 of every replica axis, on the owning stage
// (counts_once).
//
// Everything here is pure arithmetic on shapes and mesh coordinates: no tensors, no
// communication. Test: build/tests/unit_tests "[shard]"
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "picotron/config.h"
#include "picotron/mesh_grid.h"

namespace picotron {

// The piece [offset, offset + length) of `full` items cut into `count` near-equal pieces.
struct Slice {
  int64_t offset = 0, length = 0;
};
// The first full % count pieces are one longer: index 0..count-1, full >= 0.
Slice even_slice(int64_t full, int index, int count);

struct ShardRecord {
  std::string name;                // Hugging Face name: "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> full_shape; // shape of the whole parameter, e.g. [nH*Hd, H]
  int split_dim = -1;              // the dim this rank holds a slice of; -1: the whole tensor
  Axis split_axis = Axis::kTp;     // mesh axis the slices are spread over
  int index = 0, count = 1;        // this rank's slice (its coordinate on split_axis) and how many
  int stage = 0;                   // pipeline stage that owns the parameter
  std::vector<Axis> replica_axes;  // axes whose ranks hold identical copies (after the grad sync)
  // Expert parallelism (expert_parallel/): an expert is held by the dp ranks d with
  // d % dp_stride equal to its owner, so its dp replicas are every dp_stride-th rank (and
  // the copy that counts is the one with d < dp_stride). 1: every dp rank holds it.
  int dp_stride = 1;

  bool is_split() const { return split_dim >= 0; }
  Slice slice() const;                      // along split_dim ({0, full} when not split)
  std::vector<int64_t> local_shape() const; // full_shape with split_dim cut to slice().length
  int64_t local_numel() const;
  int64_t full_numel() const;
  // Is this rank's copy the one that counts (norms, checkpoints, gathers)?
  bool counts_once(const MeshCoords& here) const;
  // Cut split_dim into `count` slices along `axis`, this rank holding slice `index`;
  // `axis` stops being a replica axis. Throws naming the parameter if the dim is too small.
  void split(int dim, Axis axis, int new_index, int new_count);
};

// Parameter name -> record: everything ONE rank holds, and nothing it does not.
using ShardPlan = std::map<std::string, ShardRecord>;

// Every parameter of the model, in the model's order: (name, full shape). Pure: the 8B
// model's list costs nothing.
std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes(const LlamaConfig& c);

// The plan of one process holding everything: every parameter whole, stage 0, and
// replicated over dp, cp and tp (each dp/cp/tp rank holds the same full copy).
ShardPlan replicated_plan(const LlamaConfig& c);

// Sum of local_numel over the plan: the parameters this rank allocates.
int64_t local_parameter_count(const ShardPlan& plan);

// Does this rank hold the embedding at one end of a pipeline: the first stage (the lookup,
// but not the final norm) or the last stage's copy of a tied embedding (owned by stage 0)?
bool is_pipeline_end(const ShardPlan& plan, const MeshCoords& here);

}  // namespace picotron
