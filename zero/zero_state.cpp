// zero/zero_state.cpp — a ZeRO stage's checkpoint pieces, export and accounting. See
// zero_state.h; the buffers are zero_shard.h's.
#include "zero/zero_state.h"

#include "picotron/format.h"

namespace picotron {

std::vector<StatePiece> ZeroState::owned_state(const MeshCoords& here) {
  // My flat slice of the cp x dp group; tp and pp replicas (norms over tp) skip, and so
  // (HSDP) do the replicas of my slice in the other shard groups.
  if (shard_.groups.replica() != 0) return {};
  MeshCoords group_blind = here;
  group_blind.dp = group_blind.cp = 0;
  std::vector<StatePiece> out;
  for (const auto& piece : shard_.layout.pieces(shard_.group.rank())) {
    const auto& p = shard_.params[piece.param];
    if (!p.record.counts_once(group_blind)) continue;
    const torch::Tensor state[] = {shard_.master_piece(piece),
                                   shard_.exp_avg().narrow(0, piece.slice_offset, piece.length),
                                   shard_.exp_avg_sq().narrow(0, piece.slice_offset, piece.length)};
    for (int k = 0; k < 3; ++k)
      out.push_back({p.name + "/" + kStateKinds[k], p.record, piece.first, piece.length, state[k]});
  }
  return out;
}

void ZeroState::load_state(const StateReader& read) {
  // My pieces of master and moments; stages 1 and 2 also keep whole (local) weights, the
  // rounding of the whole master. One parameter and one kind at a time (the reader holds
  // one assembled tensor).
  torch::NoGradGuard no_grad;
  const bool whole = shard_.options().whole_parameters;
  std::vector<std::vector<ZeroLayout::Piece>> pieces_of(shard_.params.size());
  for (const auto& piece : shard_.layout.pieces(shard_.group.rank())) pieces_of[piece.param].push_back(piece);
  for (size_t i = 0; i < shard_.params.size(); ++i) {
    const auto& p = shard_.params[i];
    if (whole) p.param.copy_(read(p.name + "/master", p.record, 0, -1).view(p.param.sizes()));
    for (const auto& piece : pieces_of[i]) {
      const auto master = read(p.name + "/master", p.record, piece.first, piece.length);
      shard_.master_piece(piece).copy_(master);
      if (!whole) shard_.weights_piece(piece).copy_(master);  // my shard of the weights
    }
    for (const auto& piece : pieces_of[i])
      shard_.exp_avg().narrow(0, piece.slice_offset, piece.length)
          .copy_(read(p.name + "/exp_avg", p.record, piece.first, piece.length));
    for (const auto& piece : pieces_of[i])
      shard_.exp_avg_sq().narrow(0, piece.slice_offset, piece.length)
          .copy_(read(p.name + "/exp_avg_sq", p.record, piece.first, piece.length));
  }
}

std::map<std::string, torch::Tensor> ZeroState::masters_by_name() {
  const auto& layout = shard_.layout;
  auto full = torch::empty({layout.padded}, shard_.grad.options());  // [P_pad] fp32 (fp64)
  for (size_t i = 0; i < layout.buckets.size(); ++i) {
    const auto& b = layout.buckets[i];
    auto out = full.narrow(0, b.offset, b.padded);
    const ZeroLayout::Piece whole_part{0, 0, b.padded / layout.ranks, b.shard_offset};
    const auto mine = shard_.master_in_place() ? shard_.my_params(i) : shard_.master_piece(whole_part);
    const auto copy = mine.to(full.device(), full.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    shard_.group.all_gather(out, copy, carries("ZeRO: every rank's slice of the master weights, for a whole copy"));
  }
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < shard_.params.size(); ++i) {
    const auto& p = shard_.params[i];
    out[p.name] = full.narrow(0, layout.offsets[i], p.param.numel()).view(p.param.sizes());
  }
  return out;
}

std::map<std::string, torch::Tensor> ZeroState::weights_by_name() {
  if (gather_weights_) return gather_weights_();
  std::map<std::string, torch::Tensor> out;
  for (auto& p : shard_.params) out[p.name] = p.param;  // whole on every rank of the group
  return out;
}

ZeroState::Bytes ZeroState::bytes() const {
  const auto& layout = shard_.layout;
  const int64_t state = int64_t(shard_.grad.element_size());
  const int64_t param_elements = shard_.options().whole_parameters ? layout.padded : layout.shard;
  // Stage 1 keeps the full gradient AND my slice of its average (the reduce-scatter cannot
  // write into its own input); stages 2 and 3 only the slice.
  const int64_t grad_elements = stage_ == 1 ? layout.padded + layout.shard : layout.shard;
  return {param_elements * int64_t(shard_.bucket.front().element_size()), grad_elements * state,
          shard_.master_elements() * state, 2 * layout.shard * state, shard_.options().offload};
}

std::string ZeroState::summary() const {
  const Bytes b = bytes();
  const std::string n = std::to_string(shard_.layout.ranks);
  // over the group's name: cp_dp (expert parallelism's experts: ep_replicas)
  const std::string hybrid = shard_.groups.describe();
  return "zero-" + std::to_string(stage_) + " over " +
         (hybrid.empty() ? shard_.group.name() + " = " + n + " ranks" : shard_.groups.whole_name() + ", " + hybrid) +
         "; rank " + std::to_string(shard_.group.rank()) + " holds parameters " + human_bytes(double(b.params)) +
         ", gradients " + human_bytes(double(b.grads)) + ", master weights " +
         (b.master ? human_bytes(double(b.master)) : std::string("(the parameters themselves)")) + ", AdamW moments " +
         human_bytes(double(b.optimizer)) + " (a 1/" + n + " slice" +
         (b.offloaded ? "; master and moments in pinned CPU memory" : "") + ")";
}

}  // namespace picotron
