// train.cpp — the one entry point. It reads like the Playbook's recipe:
//
//   flags -> launch (rank, world) -> mesh -> model (+ init) -> data parallelism ->
//   optimizer -> loop { micro-batches: forward, backward ; sync grads ; clip ; step } ->
//   samples
//
//   build/train --help                              every flag
//   build/train                                     tiny model, arithmetic data, CPU or GPU
//   build/train --model llama3-8b --dry-run         exact parameter count, nothing allocated
//   mpirun -np 4 build/train --device cpu --dp 4    data parallelism on a laptop
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <iostream>
#include <thread>

#include <unistd.h>

#include "data_parallel/data_parallel.h"
#include "picotron/checkpoint.h"
#include "picotron/comm.h"
#include "picotron/config.h"
#include "picotron/data.h"
#include "picotron/distributed.h"
#include "picotron/generate.h"
#include "picotron/init.h"
#include "picotron/mesh.h"
#include "picotron/model.h"
#include "picotron/optim.h"
#include "picotron/utils.h"

using namespace picotron;

namespace {

torch::ScalarType scalar_type(Precision p) {
  switch (p) {
    case Precision::kFP64: return torch::kFloat64;
    case Precision::kBF16: return torch::kBFloat16;
    case Precision::kFP16: return torch::kFloat16;
    default: return torch::kFloat32;
  }
}

// "[rank r] error: msg" as ONE write(2), so the lines of ranks failing at once never interleave.
void report_error(int rank, const std::string& msg) {
  const std::string line = (rank >= 0 ? "[rank " + std::to_string(rank) + "] " : "") + "error: " + msg + "\n";
  std::fflush(stdout);
  if (::write(2, line.data(), line.size()) < 0) std::perror("write");
}

// Full precision, and null for inf/nan (a diverged loss, an fp16 overflow): valid JSON.
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  return buf;
}

// The model summary of --dry-run (and of every run's start): exact counts, no allocation.
std::string model_summary(const TrainConfig& c) {
  const LlamaConfig& m = c.llama;
  const int64_t h = m.hidden_size, kv = m.num_key_value_heads * m.head_dim();
  const int64_t attention = 2 * h * h + 2 * h * kv, mlp = 3 * h * m.intermediate_size, total = count_parameters(m);
  std::ostringstream o;
  o << "model " << c.model << ": H=" << h << " I=" << m.intermediate_size << " L=" << m.num_hidden_layers
    << " nH=" << m.num_attention_heads << " nKV=" << m.num_key_value_heads << " Hd=" << m.head_dim()
    << " V=" << m.vocab_size << " rope_theta=" << m.rope_theta << " tied=" << (m.tie_word_embeddings ? "yes" : "no") << "\n"
    << "  embedding          " << with_commas(m.vocab_size * h) << "\n"
    << "  per layer          " << with_commas(attention + mlp + 2 * h) << " (attention " << with_commas(attention)
    << ", mlp " << with_commas(mlp) << ", norms " << with_commas(2 * h) << ")\n"
    << "  " << m.num_hidden_layers << " layers" << std::string(13 - std::to_string(m.num_hidden_layers).size(), ' ')
    << with_commas(m.num_hidden_layers * (attention + mlp + 2 * h)) << "\n"
    << "  final norm         " << with_commas(h) << "\n"
    << "  lm_head            " << (m.tie_word_embeddings ? "tied to the embedding" : with_commas(m.vocab_size * h)) << "\n"
    << "  total parameters   " << total << " (" << with_commas(total) << ")\n"
    << "  weights " << human_bytes(double(total) * torch::elementSize(scalar_type(c.dtype))) << " in "
    << precision_name(c.dtype) << "; AdamW training state ~" << human_bytes(double(total) * 16)
    << " (fp32 master + 2 moments + main grad)";
  return o.str();
}

int run(TrainConfig cfg, std::shared_ptr<TokenSource> data, Distributed& dist) {
  const int rank = dist.rank();
  // ---- device, precision, threads ---------------------------------------------------
  if (cfg.device == "auto") cfg.device = torch::cuda::is_available() ? "cuda" : "cpu";
  if (!cfg.dtype_given) cfg.dtype = cfg.device == "cuda" ? Precision::kBF16 : Precision::kFP32;
  const torch::Device device = cfg.device == "cuda" ? torch::Device(torch::kCUDA, dist.select_cuda_device())
                                                    : torch::Device(torch::kCPU);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(cfg.threads > 0 ? cfg.threads : std::max(1, cores / dist.local_world_size()));
  const auto dtype = scalar_type(cfg.dtype);

  BatchLoader loader(data, cfg.seed, cfg.seq_len, cfg.micro_batch_size, cfg.grad_acc_steps, cfg.dp);

  // ---- mesh -----------------------------------------------------------------------
  Comm world = Comm::world(dist, device, std::chrono::seconds(cfg.timeout_s));
  const MeshShape shape{cfg.dp, cfg.pp, cfg.cp, cfg.tp};
  Mesh mesh(world, shape);
  print0(rank, model_summary(cfg));
  print0(rank, "launch: " + std::string(launcher_name(dist.info().launcher)) + ", " + std::to_string(dist.world_size()) +
                   " process(es), device " + device.str() + ", " + precision_name(cfg.dtype));
  print0(rank, describe_mesh(shape));

  // ---- model: every mesh starts from the same full-size weights ---------------------
  LlamaForCausalLM model(cfg.llama);
  model->to(device, dtype);
  init_parameters(*model, cfg.seed, cfg.init_std);

  // ---- optimizer and data parallelism ---------------------------------------------
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
  AdamW optimizer(named, {cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay});
  DataParallel data_parallel(mesh.dp(), optimizer.params(), cfg.dp_mode, cfg.dp_bucket_mb);
  LossScaler scaler(cfg.dtype == Precision::kFP16);

  print0(rank, "data: " + std::string(cfg.data == "synthetic" ? "synthetic" : cfg.data) + "; global batch " +
                   std::to_string(loader.global_batch_rows()) + " x " + std::to_string(cfg.seq_len) + " = " +
                   with_commas(loader.tokens_per_step()) + " tokens/step (micro-batch " +
                   std::to_string(cfg.micro_batch_size) + " x grad-acc " + std::to_string(cfg.grad_acc_steps) +
                   " x dp " + std::to_string(cfg.dp) + "); data parallelism: " + dp_mode_name(cfg.dp_mode));
  std::ofstream metrics;
  if (rank == 0 && !cfg.metrics_file.empty()) {
    metrics.open(cfg.metrics_file);
    if (!metrics) throw std::runtime_error("--metrics-file " + cfg.metrics_file + ": cannot open for writing");
  }
  const double peak_flops = device_peak_flops(device) * dist.world_size();
  const double flops_tok = flops_per_token(cfg.llama, cfg.seq_len);

  // ---- the loop ---------------------------------------------------------------------
  for (int64_t step = 0; step < cfg.steps; ++step) {
    Timer timer;
    optimizer.zero_main_grads();
    auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    for (int64_t micro = 0; micro < cfg.grad_acc_steps; ++micro) {
      const Batch batch = loader.micro_batch(step, micro, mesh.coords().dp);
      // Only the last micro-batch's backward communicates (no-sync for the others).
      data_parallel.prepare_backward(/*sync=*/micro == cfg.grad_acc_steps - 1);
      auto loss = model->loss(batch.inputs.to(device), batch.targets.to(device)) / double(cfg.grad_acc_steps);
      (loss * scaler.scale()).backward();  // [B, S] -> grads
      optimizer.accumulate_grads();        // main_grad += grad (for grads no hook took)
      loss_sum += loss.detach().to(torch::kFloat64);
    }
    data_parallel.finish_gradient_sync();  // main grads now hold the dp-average
    const bool finite = scaler.unscale_and_check(optimizer.params());
    const double norm = clip_grad_norm(optimizer.params(), cfg.grad_clip);
    const double lr = lr_at(step, cfg);
    if (finite) optimizer.step(lr);
    scaler.update(finite);
    mesh.dp().all_reduce_async(loss_sum, ReduceOp::kAvg).wait();  // loss of the whole global batch
    const double loss = loss_sum.item<double>();     // syncs the device: the timer is honest
    const double seconds = timer.seconds();
    const double tokens_per_s = double(loader.tokens_per_step()) / seconds;
    const double mfu = peak_flops > 0 ? flops_tok * tokens_per_s / peak_flops : 0.0;
    const int64_t mem = peak_memory_bytes(device);

    if (rank == 0 && ((step + 1) % cfg.log_every == 0 || step == 0 || step + 1 == cfg.steps)) {
      char mfu_text[16] = "n/a", line[256];
      if (peak_flops > 0) std::snprintf(mfu_text, sizeof(mfu_text), "%.1f%%", mfu * 100);
      std::snprintf(line, sizeof(line), "step %5lld/%lld | loss %#.6g | lr %.3e | grad norm %.4f | %s tok/s | mfu %s | mem %s%s",
                    (long long)(step + 1), (long long)cfg.steps, loss, lr, norm,
                    with_commas(int64_t(tokens_per_s)).c_str(), mfu_text, human_bytes(double(mem)).c_str(),
                    finite ? "" : " | overflow: step skipped");
      std::cout << line << std::endl;
    }
    if (metrics.is_open()) {
      metrics << "{\"step\": " << step + 1 << ", \"loss\": " << json_number(loss) << ", \"lr\": " << json_number(lr)
              << ", \"grad_norm\": " << json_number(norm) << ", \"tokens_per_s\": " << json_number(tokens_per_s)
              << ", \"mfu\": " << (peak_flops > 0 ? json_number(mfu) : "null") << ", \"peak_mem_bytes\": " << mem
              << ", \"skipped\": " << (finite ? "false" : "true") << "}" << std::endl;
    }
  }

  // ---- results: rank 0 alone, after everybody is done (no one waits on it) ----------
  world.barrier();
  if (!cfg.save_params.empty() && rank == 0) {
    NamedTensors masters;  // fp32 master weights (fp64 in fp64 runs); every dp rank holds them all
    for (const auto& p : optimizer.params()) masters.emplace_back(p.name, p.master);
    save_tensors(cfg.save_params, masters);
    print0(rank, "saved parameters to " + cfg.save_params);
  }
  if (cfg.generate > 0 && rank == 0) {
    model->eval();
    if (cfg.data == "arithmetic") {
      const auto report = evaluate_arithmetic(model, /*total=*/100, cfg.generate, cfg.seed + 1);
      std::cout << "samples (greedy):\n";
      for (const auto& e : report.examples) std::cout << "  " << e << "\n";
      std::cout << "arithmetic accuracy: " << report.correct << "/" << report.total << " problems answered exactly"
                << std::endl;
    } else if (cfg.llama.vocab_size <= 256) {
      std::cout << "samples (temperature 0.8):\n";
      for (int i = 0; i < cfg.generate; ++i) {
        const int64_t n = std::min<int64_t>(8, cfg.seq_len);
        const auto prompt = loader.micro_batch(cfg.steps + i, 0, 0).inputs[0].narrow(0, 0, n).contiguous();
        std::vector<int64_t> p(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + n);
        const auto out = continue_tokens(model, p, 64, -1, 0.8, cfg.seed + i);
        std::cout << "  [" << bytes_to_text(p) << "] " << bytes_to_text(out) << "\n";
      }
      std::cout << std::flush;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const ParsedArgs args = parse_args(argc, argv);
  if (!args.config && args.exit_code == 0) {  // --help
    std::cout << args.message << std::endl;
    return 0;
  }
  LaunchInfo launch;
  try {
    launch = detect_launch(process_environment());
  } catch (const std::exception& e) {
    report_error(-1, e.what());  // the launch environment itself is broken: no rank to tell
    return 2;
  }
  // Setup problems (flags, mesh, device, data files): every rank sees the same ones.
  std::vector<std::string> problems;
  std::shared_ptr<TokenSource> data;
  if (!args.config) {
    problems.push_back(args.message.substr(args.message.rfind("error: ", 0) == 0 ? 7 : 0));
  } else {
    const TrainConfig& cfg = *args.config;
    problems = validate(cfg, cfg.dry_run ? cfg.dp * cfg.pp * cfg.cp * cfg.tp : launch.world_size);
    if (problems.empty() && cfg.dry_run) {  // no launch, no allocation: the summary is pure arithmetic
      if (launch.rank == 0) std::cout << model_summary(cfg) << std::endl;
      return 0;
    }
    if (problems.empty() && cfg.device == "cuda" && !torch::cuda::is_available())
      problems.push_back("--device cuda: no CUDA device is visible to this process");
    if (problems.empty()) {
      try {
        data = open_data(cfg.data, cfg.llama.vocab_size, cfg.seq_len);
      } catch (const std::exception& e) {
        problems.push_back(e.what());
      }
    }
  }
  for (const auto& p : problems) report_error(launch.rank, p);
  if (problems.empty() || launch.world_size > 1) {
    std::unique_ptr<Distributed> dist;
    try {
      dist = std::make_unique<Distributed>(launch);
    } catch (const std::exception& e) {
      report_error(launch.rank, e.what());
      return 2;
    }
    // Each rank has printed its problems; leave together so that none is killed first.
    if (!problems.empty()) dist->exit_together(2, std::chrono::seconds(30));
    try {
      return run(*args.config, data, *dist);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      msg = msg.substr(0, msg.find('\n'));
      if (msg.rfind("[rank ", 0) == 0) msg = msg.substr(msg.find("] ") + 2);  // Comm errors carry the rank already
      report_error(dist->rank(), msg);
      dist->abort_job(1);  // a rank that fails takes the job down: nobody waits forever
    }
  }
  return 2;
}
