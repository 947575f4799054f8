// pipeline_parallel/pipeline_parallel.h — pipeline parallelism: the model's layers are cut
// into stages, one per pp rank, and micro-batches flow through them.
//
//   pp rank 0            pp rank 1            ...   pp rank P-1
//   embedding            layers                     layers
//   layers 0..L/P-1  ->  L/P..2L/P-1   ->  ...  ->  ..L-1, final norm, head, loss
//        activations [B, S, H] forward ->      <- their gradients [B, S, H] backward
//
// Every rank holds only its stage's parameters, under their global names
// ("model.layers.5..." on stage 1), and a step's m micro-batches run in the order of a
// schedule (schedules.h: afab, 1f1b, interleaved, zb-h1, dualpipev). The math of one step is the
// single process's: the last stage divides each micro-batch loss by m, gradients
// accumulate over the micro-batches, and data parallelism averages them once, after
// the last backward.
//
// Tied embeddings: the first stage looks tokens up in the embedding, the last stage
// multiplies by it in the head. Both hold "model.embed_tokens.weight" (initialised
// alike), each gets part of its gradient, and the two parts are summed over the
// "embedding group" {first, last} (Megatron's) before the step, so the copies stay equal.
//
// Communication per step (m micro-batches, v chunks per rank, B S H activations,
// S -> S/tp under sequence parallelism):
//   pp group:   2 (P v - 1) m tensors of B S H elements sent (and received) over the
//               whole pipeline: each F except the last virtual stage's sends its output,
//               each backward except the first's sends its input gradient
//               (pipeline_sends_per_step() per rank); plus one broadcast of the step's
//               loss (1 element) from the last stage, so every rank logs it
//   embedding:  tied only: one all-reduce of V H (V/tp H under tensor parallelism)
//               between the first and last stage
//
// Point-to-point follows NCCL's rules on every device (p2p_program.h): no tags, no
// buffering, one communicator's operations in order. The schedule's lists become, per
// rank, a program of [a group of sends and receives] [an action] steps, made in rounds
// so that every group meets its partners; a tensor waits in the sender's outbox until
// the receiver's group asks for it. The CPU path runs the same program over MPI with
// one tag, so the CPU equivalence tests prove the order a GPU run uses.
//
// Test: build/tests/unit_tests "[schedule],[p2p]"; ctest -R "equivalence.pp|cli.mpi_pp|comm_report_pp"
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/data.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/shard.h"
#include "pipeline_parallel/p2p_program.h"
#include "pipeline_parallel/schedules.h"
#include "pipeline_parallel/zero_bubble.h"

namespace picotron {

// The plan of pp rank `stage` out of P (v chunks each): its layers, the embedding on
// the first stage (and on the last when tied), the final norm and lm_head on the last.
// Each record's `stage` is the pp rank that owns it. Pure.
// v_shape: dualpipev's V (rank r: stages r and 2P-1-r; schedules.h).
void keep_pipeline_stage(ShardPlan& plan, const LlamaConfig& c, int stage, int P, int v, bool v_shape = false);
// "pipeline: 2 stages, 1f1b; rank 0: embedding, layers 0-1; rank 1: layers 2-3, norm, head"
std::string pipeline_summary(const LlamaConfig& c, PipelineSchedule s, int P, int v);

// --dry-run --pp-trace: the schedule simulated on all P ranks in unit time (schedules.h
// `simulate`: F = 1, B = 2, or B = W = 1), written as the Chrome trace --pp-trace writes
// for a run (one unit drawn as 1 ms), so scripts/plot_pipeline.py draws the schedule's own
// picture beside a measured one. Throws if the schedule cannot run (its problem).
// How a trace reaches its file: write_file(flag, path, contents), the runtime's (runtime/output/output_file.h).
using WriteFile = std::function<void(const std::string& flag, const std::string& path, const std::string& contents)>;
void write_simulated_trace(const std::string& path, PipelineSchedule s, int P, int m, int v, const WriteFile& write_file);


// One trace event (--pp-trace): what ran on this rank, when, in microseconds since a
// barrier all ranks passed together.
struct TraceEvent {
  enum Kind { kForward, kBackward, kWeight, kSend, kRecv } kind;
  int micro, chunk;  // chunk; for a transfer: its tag (0 activation, 1 gradient)
  int64_t step;
  double start_us, dur_us;
  int peer;  // transfers: the other pp rank
};

// Tensors that travel beside an activation from stage to stage, for whoever records
// statistics over the layers that the loss needs whole (a mixture of experts' routers:
// expert_parallel/moe.h's RouterLog; train.cpp joins the two). Opaque here: moved, their
// gradients sent back beside the activation's. Empty functions: none travel.
struct SideTensors {
  std::function<std::vector<torch::Tensor>()> buffers;  // empty ones of their shapes (a receiver's)
  std::function<void(const std::vector<torch::Tensor>& earlier)> carry;  // what the earlier stages sent
  std::function<std::vector<torch::Tensor>()> take;  // what goes on: the carried plus this stage's
};

class Pipeline {
 public:
  struct Options {
    PipelineSchedule schedule = PipelineSchedule::k1F1B;
    int virtual_stages = 1;
    int64_t grad_acc_steps = 1;          // m micro-batches per step
    int64_t micro_batch_size = 1, seq_len = 1;  // seq_len: the tokens of a sequence this rank holds (S/cp)
    bool sequence_parallel = false;      // activations are [B, S/tp, H]
    bool trace = false;                  // record TraceEvents
    torch::Tensor positions;             // [seq_len] RoPE positions (context parallelism); undefined: 0..seq_len-1
    SideTensors side;                    // what travels beside the activation (none by default)
  };
  // Collective over the pp group (the embedding group is split from it).
  Pipeline(LlamaForCausalLM& model, Mesh& mesh, const Options& opts, torch::TensorOptions activations);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Called around every backward pass (B or W): before (data parallelism's no-sync
  // bookkeeping) and after (the optimizer's grad accumulation). before_action (--explain;
  // none: no title is built): each action's title (action_title) before it runs.
  struct Hooks {
    std::function<void()> before_backward, after_backward;
    std::function<void(const std::string&)> before_action;
  };
  // One step: every micro-batch forward and backward in the schedule's order. Returns
  // the step's loss (mean over the m micro-batches, fp64 [1]) on EVERY pp rank.
  torch::Tensor run_step(int64_t step, const BatchLoader& loader, double loss_scale, const Hooks& hooks);
  // The validation loss of global batch `index` of `loader` (held-out tokens): the
  // schedule's forwards alone (forward_only_programs), no gradients. Returns the mean over
  // this rank's m micro-batches (fp64 [1]) on every pp rank. Collective over pp.
  torch::Tensor evaluate(int64_t index, const BatchLoader& loader);
  // Tied embeddings: sum the embedding's two gradient parts over {first, last stage}.
  void sync_tied_embedding(std::vector<TrainableParam>& params);

  // --pp-trace: gathers every rank's events on rank 0 of `world` and writes one Chrome
  // trace (pipeline_parallel/pipeline_trace.cpp), with the schedule, its bubble formula and
  // `steps` in its "otherData"; rank 0 says where. Collective.
  void write_trace(const std::string& path, Comm& world, int64_t steps, const WriteFile& write_file) const;
  int loss_rank() const { return last_rank_; }  // the pp rank that holds the head and the loss: P-1, or 0 in the V

 private:
  struct InFlight {
    torch::Tensor input;   // [B, S, H] received activation (a leaf that requires grad); undefined on vs 0
    torch::Tensor output;  // [B, S, H] activation to send, or the scaled loss on the last stage
    // Side tensors (Options::side: SideTensors) travel with the activation,
    // so that the last stage's loss sees every stage's records. Opaque here: moved, summed
    // by their owner, their gradients sent back.
    std::vector<torch::Tensor> side_in, side_out;  // received (leaves that require grad), sent on
  };
  // What one transfer carries: an activation [B, S, H] or its gradient, and the side tensors.
  struct Message {
    torch::Tensor x;
    std::vector<torch::Tensor> side;
  };
  void forward(const PipelineAction& a, const BatchLoader& loader, double loss_scale);
  void backward(const PipelineAction& a);
  using TensorKey = std::tuple<int, int, int>;  // (Transfer kind, micro-batch, sender's virtual stage)
  static TensorKey key(const Transfer& t) { return {t.kind, t.micro, t.from_stage}; }
  void exchange(const std::vector<PipelineStep::Op>& group);  // one group: posted together, waited
  static Message take(std::map<TensorKey, Message>& box, const Transfer& t);
  double now_us() const;
  void record(TraceEvent::Kind k, int micro, int chunk, double start, int peer = -1);

  LlamaForCausalLM& model_;
  Mesh& mesh_;
  Options opts_;
  torch::TensorOptions act_opts_;
  int P_, rank_;
  bool v_shape_ = false;  // dualpipev: chunk 1 is stage 2P-1-r (schedules.h)
  int last_rank_ = 0;     // the pp rank of the last stage (the loss): P-1, or 0 in the V
  Comm embedding_group_;  // {first, last stage} (tied embeddings only)
  bool holds_tied_embedding_ = false;  // first or last stage of a tied model, pp > 1
  std::map<std::pair<int, int>, InFlight> alive_;  // (micro, chunk)
  std::vector<PipelineStep> program_, eval_program_;  // this rank's steps (p2p_program.h): a step; forwards only
  std::map<TensorKey, Message> inbox_, outbox_;  // received, not yet used; made, not yet sent
  int64_t step_ = 0;
  torch::Tensor loss_sum_, positions_;
  std::shared_ptr<WeightGradQueue> weight_queue_;
  std::vector<TraceEvent> trace_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace picotron
