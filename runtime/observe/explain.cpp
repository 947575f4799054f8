// runtime/observe/explain.cpp — --explain: what each rank holds, and every communication
// of one step, rank by rank (see explain.h).
#include "runtime/observe/explain.h"
#include "runtime/observe/holdings.h"
#include "runtime/observe/comm_title.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <iostream>
#include <set>
#include <sstream>

#include <numeric>

#include "context_parallel/cp_layout.h"
#include "picotron/distributed.h"
#include "runtime/launch/job_exit.h"
#include "runtime/output/output_file.h"
#include "picotron/format.h"
#include "pipeline_parallel/schedules.h"
#include "zero/zero_groups.h"
#include "runtime/cli/train_config.h"

namespace picotron {

namespace {

std::string join(torch::IntArrayRef v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// (the runs and spans of holdings.h: "0-3, 12-13", "a-b")
std::string range(int64_t first, int64_t count) { return span_text(first, count); }
std::string runs(const std::vector<int64_t>& sorted) { return ranges_text(sorted); }

const char* dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat64: return "fp64";
    case torch::kFloat32: return "fp32";
    case torch::kBFloat16: return "bf16";
    case torch::kFloat16: return "fp16";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    default: return "?";
  }
}

// The source path relative to the repository: the compiler names it so (-fmacro-prefix-map,
// CMakeLists.txt), or relative to the build folder one level down (ccache's base_dir rewrites
// the command line: "../tensor_parallel/..."). An absolute path under this checkout is cut too.
std::string repository_path(const char* file) {
  const std::string root = std::string(PICOTRON_SOURCE_DIR) + "/";
  std::string f = file;
  if (f.rfind(root, 0) == 0) return f.substr(root.size());
  while (f.rfind("../", 0) == 0 || f.rfind("./", 0) == 0) f = f.substr(f.find('/') + 1);
  return f;
}

// Line `line` of a source file, trimmed; "" when the source is not where it was built.
std::string source_line(const std::string& path, int line) {
  static std::map<std::string, std::vector<std::string>> files;  // read once per file
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = files.find(path);
  if (it == files.end()) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    it = files.emplace(path, std::move(lines)).first;
  }
  if (line < 1 || size_t(line) > it->second.size()) return "";
  const std::string& l = it->second[size_t(line - 1)];
  const size_t first = l.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  std::string code;  // runs of spaces (comment alignment) squeezed to two
  for (size_t i = first; i < l.size(); ++i)
    if (!(l[i] == ' ' && i >= 2 && l[i - 1] == ' ' && l[i - 2] == ' ')) code += l[i];
  return code;
}

// The virtual stages pp rank `pp_rank` runs, "0 and 3" (DualPipeV's V: r and 2P-1-r;
// interleaved: r, P + r, ...); "" with one chunk per rank.
std::string stage_list(const TrainConfig& cfg, int P, int pp_rank) {
  const PipelineSchedule s = parse_schedule(cfg.pp_schedule);
  const int v = schedule_chunks(s, cfg.pp_virtual_stages);
  std::string list;
  for (int chunk = 0; v > 1 && chunk < v; ++chunk)
    list += (chunk == 0 ? "" : chunk + 1 == v ? " and " : ", ") + std::to_string(virtual_stage(P, pp_rank, chunk, is_v_shape(s)));
  return list;
}

}  // namespace

std::vector<std::string> holdings(const TrainConfig& cfg, const MeshShape& shape, const MeshCoords& here,
                                  const ShardPlan& plan) {
  const LlamaConfig& m = cfg.llama;
  std::vector<std::string> out;
  const RankHoldings h = holdings_of(cfg, here, plan);  // the one model of it (holdings.h); printed here at length
  // Pipeline: which decoder layers (and the ends) this stage keeps.
  std::string l = h.layers.empty() ? "no decoder layers"
                                   : "decoder layers " + runs(h.layers) + " of " + std::to_string(m.num_hidden_layers);
  if (h.embedding) l = "embedding, " + l;
  if (h.final_norm) l += ", final norm and head";
  else if (h.tied_copy) l += ", the tied head's copy of the embedding";
  if (shape.pp > 1) {  // its stage, or with several chunks (interleaved, DualPipeV's V) its virtual stages
    const PipelineSchedule s = parse_schedule(cfg.pp_schedule);
    const int v = schedule_chunks(s, cfg.pp_virtual_stages);
    if (v == 1) l += " (pipeline stage " + std::to_string(here.pp) + " of " + std::to_string(shape.pp) + ")";
    else
      l += " (pp rank " + std::to_string(here.pp) + " of " + std::to_string(shape.pp) + ": virtual stages " +
           stage_list(cfg, shape.pp, here.pp) + " of " + std::to_string(shape.pp * v) + ", " + schedule_name(s) + ")";
  }
  out.push_back(l);
  // Tensor parallelism: heads, MLP columns (or the experts), from the first layer kept.
  if (shape.tp > 1 && !h.layers.empty()) {
    const auto text = [](const RankHoldings::Span& x) { return range(x.first, x.count); };
    out.push_back("attention: query heads " + text(h.q_heads) + " of " + std::to_string(m.num_attention_heads) +
                  ", key/value heads " + text(h.kv_heads) + " of " + std::to_string(m.num_key_value_heads) + "; " +
                  (h.moe ? "experts " + runs(h.experts) + " of " + std::to_string(m.num_local_experts)
                         : "MLP columns " + text(h.mlp_columns) + " of " + std::to_string(m.intermediate_size)) +
                  " (tp " + std::to_string(here.tp) + " of " + std::to_string(shape.tp) + ")");
  }
  if (h.embedding_split)
    out.push_back("vocabulary rows " + range(h.embedding_rows.first, h.embedding_rows.count) + " of " +
                  std::to_string(m.vocab_size) + " (embedding" + (h.lm_head || !h.final_norm ? "" : " and tied head") + ")");
  // Sequence: context parallelism's positions; sequence parallelism's chunk between blocks.
  std::string s = "sequence positions " + runs(h.positions) + " of " + std::to_string(cfg.seq_len);
  if (shape.cp > 1) s += " (cp " + std::to_string(here.cp) + " of " + std::to_string(shape.cp) + ", " + cfg.cp_layout + ")";
  if (cfg.sp && shape.tp > 1) {
    const int64_t chunk = int64_t(h.positions.size()) / shape.tp;
    s += "; between blocks (sequence parallel) its local positions " + range(here.tp * chunk, chunk);
  }
  out.push_back(s);
  // Ulysses and the hybrid (context_parallel/ulysses.h): attention on a head slice of more tokens.
  if (shape.cp > 1 && cfg.cp_mode != "ring") {
    const CpMode mode = parse_cp_mode(cfg.cp_mode);
    const int U = cp_ulysses_size(mode, shape.cp, cfg.cp_ulysses), u = cp_a2a_rank(here.cp, U);
    const int64_t heads = m.num_attention_heads / shape.tp / U, kv = m.num_key_value_heads / shape.tp;
    const int64_t f = U / std::gcd(kv, int64_t(U));
    const std::vector<int64_t> seen =
        cp_positions(cfg.seq_len, shape.cp / U, cp_ring_rank(here.cp, U), parse_cp_layout(cfg.cp_layout));
    out.push_back("attention (--cp-mode " + cfg.cp_mode + "): an all-to-all over " + std::to_string(U) +
                  " cp ranks gives it query heads " + range(u * heads, heads) + " of this tp rank's " +
                  std::to_string(heads * U) + " (key/value heads " + range(u * f * kv / U, f * kv / U) + " of " +
                  std::to_string(f * kv) + (f > 1 ? ", each of the " + std::to_string(kv) + " repeated " + std::to_string(f) + "x" : "") +
                  ") at positions " + runs(seen) +
                  (U < shape.cp ? ", then a ring over " + std::to_string(shape.cp / U) + " ranks" : " (the whole sequence)") +
                  "; a second all-to-all returns the output to its tokens");
  }
  // Data: the rows of every global batch this dp rank reads.
  out.push_back("data: " + std::to_string(cfg.micro_batch_size) + " sequence(s) per micro-batch x " +
                std::to_string(cfg.grad_acc_steps) + " micro-batch(es), dp shard " + std::to_string(here.dp) + " of " +
                std::to_string(shape.dp) + " of each global batch");
  if (cfg.zero > 0) {
    // Its rank in the cp x dp group; HSDP (zero/zero_groups.h): in its shard group of n.
    const int n = zero_block_ranks(cfg.zero_shard, shape.cp, 1, shape.dp * shape.cp);
    const int index = (here.dp * shape.cp + here.cp) % n, replicas = shape.cp * shape.dp / n;
    static const char* what[] = {"", "AdamW moments and master weights", "AdamW state and main gradients",
                                 "AdamW state, main gradients and weights"};
    std::string line = "ZeRO-" + std::to_string(cfg.zero) + ": " + what[cfg.zero] + " of slice " + std::to_string(index) +
                       " of " + std::to_string(n) + " (the " + std::to_string(index) + "-th 1/" + std::to_string(n) +
                       " of every bucket, zero/zero_layout.h)";
    if (replicas > 1)
      line += "; HSDP: shard group " + std::to_string((here.dp * shape.cp + here.cp) / n) + " of " +
              std::to_string(replicas) + ", the same slice in the other " + std::to_string(replicas - 1) +
              " (averaged over them once per step)";
    if (cfg.zero_hpz > 0)
      line += cfg.zero_hpz * shape.cp == 1
                  ? std::string("; hpZ: after a layer's forward, the whole layer kept until its backward")
                  : "; hpZ: after a layer's forward, its part 1/" + std::to_string(cfg.zero_hpz * shape.cp) +
                        " of the layer kept for the backward's gather";
    out.push_back(line);
  }
  return out;
}

std::string describe_event(const CommGroup& group, const CommEvent& e) {
  std::ostringstream o;
  const std::vector<int>& members = group.world_ranks;  // [group rank] -> world rank (comm_listener.h)
  auto world_of = [&](int r) { return r >= 0 && size_t(r) < members.size() ? members[size_t(r)] : -1; };
  o << e.kind;
  if (*e.reduce) o << " " << e.reduce;
  const std::string kind = e.kind;
  if (kind == "send" || kind == "recv") {
    o << (kind == "send" ? " to " : " from ") << group.name << " rank " << e.peer;
    if (world_of(e.peer) >= 0) o << " (world " << world_of(e.peer) << ")";
  } else {
    o << " over " << group.name;
    if (!members.empty()) o << " {" << join(std::vector<int64_t>(members.begin(), members.end()), ",") << "}";
    else o << " (" << group.size << " ranks)";
    if (kind == "broadcast") o << " from its rank " << e.peer;
  }
  if (kind != "barrier") {
    o << ": [" << join(e.in_shape) << "]";
    if (!e.out_shape.empty()) o << " -> [" << join(e.out_shape) << "]";
    o << " " << dtype_name(e.dtype) << ", " << with_commas(e.elements) << " elements";
  }
  if (e.async) o << ", posted now and waited for later";
  o << "\n      at " << repository_path(e.at.file) << ":" << e.at.line << " (" << e.at.function << ")";
  const std::string code = source_line(std::string(PICOTRON_SOURCE_DIR) + "/" + repository_path(e.at.file), e.at.line);
  if (!code.empty()) o << ":  " << code;
  return o.str();
}

// The listener: while a step is narrated, each communication's title (comm_title.h) and
// description, in the order this rank issued them. Called under the seam's mutex, from the
// main thread or autograd's (data parallelism's bucket all-reduces come from gradient hooks).
struct Explainer::Narrator : CommListener {
  std::mutex mutex;
  bool recording = false;
  std::vector<std::string> lines;
  void issued(const CommGroup& group, const CommEvent& e) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!recording) return;
    const std::string title = comm_title(e.place, e.backward, e.at.carries);
    if (!title.empty()) lines.push_back("  " + title);
    lines.push_back("  " + describe_event(group, e));
  }
  void heading(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    if (recording) lines.push_back(what);
  }
};

Explainer::Explainer(const TrainConfig& cfg, Mesh& mesh, std::function<ShardPlan(const MeshCoords&)> shard_plan_of)
    : enabled_(cfg.explain), cfg_(cfg), mesh_(mesh), shard_plan_of_(std::move(shard_plan_of)) {
  if (!enabled_) return;
  narrator_ = std::make_shared<Narrator>();
  mesh_.world().listen(narrator_);  // every group of the run, those split later too
}

Explainer::~Explainer() {
  if (narrator_) mesh_.world().stop_listening(narrator_.get());
}

void Explainer::begin(int64_t step) {
  if (!enabled_) return;
  step_ = step;
  std::lock_guard<std::mutex> lock(narrator_->mutex);
  narrator_->recording = true;
}

void Explainer::phase(const std::string& what) {
  if (enabled_) narrator_->heading(what);
}

void Explainer::end(const Distributed& dist) {
  if (!enabled_) return;
  std::vector<std::string> lines;
  {
    std::lock_guard<std::mutex> lock(narrator_->mutex);
    if (!narrator_->recording) return;
    narrator_->recording = false;
    lines.swap(narrator_->lines);
  }
  const MeshShape& shape = mesh_.shape();
  auto title = [&](int r) {
    const MeshCoords c = coords_of(shape, r);
    const std::string stages = shape.pp > 1 ? stage_list(cfg_, shape.pp, c.pp) : "";  // both ends of the V, say
    return "---- rank " + std::to_string(r) + " (dp " + std::to_string(c.dp) + ", pp " + std::to_string(c.pp) +
           (stages.empty() ? "" : ": stages " + stages) + ", cp " + std::to_string(c.cp) + ", tp " + std::to_string(c.tp) +
           ") ----";
  };
  std::string mine;
  for (const auto& l : lines) mine += l + "\n";
  if (lines.empty()) mine = "  (no communication)\n";
  // Every rank's text to rank 0: lengths first, then the texts padded to the longest.
  const int world = shape.world_size();
  std::vector<std::string> texts(static_cast<size_t>(world));
  const auto lengths = all_gather_bounded(dist, {uint64_t(mine.size())}, std::chrono::seconds(cfg_.timeout_s));
  if (lengths.size() == size_t(world)) {
    const size_t words = (*std::max_element(lengths.begin(), lengths.end()) + 7) / 8;
    std::vector<uint64_t> packed(words, 0);
    std::memcpy(packed.data(), mine.data(), mine.size());
    const auto all = all_gather_bounded(dist, packed, std::chrono::seconds(cfg_.timeout_s));
    for (int r = 0; r < world && all.size() == words * size_t(world); ++r)
      texts[size_t(r)].assign(reinterpret_cast<const char*>(all.data() + size_t(r) * words), lengths[size_t(r)]);
  }
  if (texts[0].empty() && world > 1) {  // no MPI (torchrun): each rank prints its own, unordered
    std::cout << title(mesh_.rank()) << "\n" << mine << std::flush;
    return;
  }
  if (mesh_.rank() != 0) return;
  if (world == 1) texts[0] = mine;
  std::ostringstream o;
  o << "==== --explain: step " << step_ << " on dp " << shape.dp << " x pp " << shape.pp << " x cp " << shape.cp
    << " x tp " << shape.tp << " ====\n";
  o << "what each rank holds:\n";
  for (int r = 0; r < world; ++r) {
    const MeshCoords c = coords_of(shape, r);
    o << "  rank " << r << ":\n";
    for (const auto& h : holdings(cfg_, shape, c, shard_plan_of_(c))) o << "    " << h << "\n";
  }
  o << "every communication of step " << step_ << ", rank by rank, in the order each rank issued it\n"
    << "(a group {a,b} lists world ranks; a send/recv peer is its rank within the group):\n";
  for (int r = 0; r < world; ++r) o << title(r) << "\n" << texts[size_t(r)];
  o << "==== end of --explain ====";
  std::cout << o.str() << std::endl;
  if (!cfg_.run_dir.empty()) write_file("--run-dir", cfg_.run_dir + "/narration.txt", o.str() + "\n");  // (run_dir.h)
}

}  // namespace picotron
