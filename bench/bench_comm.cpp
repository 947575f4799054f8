// bench/bench_comm.cpp — all-reduce latency and bandwidth through picotron's Comm.
//
// The figures are the ones nccl-tests prints (the PERFORMANCE document of NVIDIA's nccl-tests):
//
//   time   mean wall time of one all_reduce, over --iters back-to-back calls,
//          taken on the slowest rank
//   algbw  = S / time              S = message size in bytes: what the caller sees
//   busbw  = algbw * 2(n-1)/n      what each link carries. A ring all-reduce is a
//          reduce-scatter then an all-gather; in each, every rank sends and receives
//          (n-1)/n of the message. busbw is comparable across rank counts and with
//          the hardware's peak link bandwidth; algbw is not.
//
// The first line is the small-message latency (--min-bytes, --latency-iters calls),
// where the cost is the per-call overhead (MPI progress, kernel launch), not bytes.
//
// Run:  mpirun -np 4 build/bench/bench_comm                    (CPU: MPI)
//       mpirun -np 8 build/bench/bench_comm --device cuda      (GPU: NCCL)
//       torchrun --no-python --nproc-per-node 8 build/bench/bench_comm --device cuda
#include <chrono>
#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "picotron/comm.h"
#include "picotron/distributed.h"
#include "runtime/launch/launch_env.h"

using namespace picotron;

namespace {

// "8", "4K", "64M", "1G" (powers of 1024) -> bytes.
int64_t parse_bytes(const std::string& flag, const std::string& text) {
  size_t end = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &end);
  } catch (const std::exception&) {
  }
  const std::string suffix = text.substr(end);
  const int64_t scale = suffix.empty() ? 1
                        : suffix == "K" ? 1 << 10
                        : suffix == "M" ? 1 << 20
                        : suffix == "G" ? 1 << 30
                                        : 0;
  TORCH_CHECK(value > 0 && scale > 0, "--", flag, " ", text, ": expected a positive size such as 8, 4K, 64M or 1G");
  return value * scale;
}

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float64") return torch::kFloat64;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  if (name == "int32") return torch::kInt32;
  if (name == "int64") return torch::kInt64;
  TORCH_CHECK(false, "--dtype ", name, ": expected float32, float64, bfloat16, float16, int32 or int64");
}

// Mean seconds per all_reduce of `t` over `iters` calls, on the slowest rank.
double time_all_reduce(Comm& comm, torch::Tensor& t, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) comm.all_reduce(t);
  if (t.is_cuda()) torch::cuda::synchronize();
  comm.barrier();  // everyone starts together
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.all_reduce(t);  // t is zeros: the sums stay zero
  if (t.is_cuda()) torch::cuda::synchronize();  // NCCL calls return before the GPU is done
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  torch::Tensor slowest = torch::tensor({seconds}, torch::kFloat64).to(t.device());
  comm.all_reduce(slowest, ReduceOp::kMax);
  return slowest.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_comm", "all-reduce latency and bandwidth (algbw, busbw as in nccl-tests)");
  auto text = [](const char* fallback) { return cxxopts::value<std::string>()->default_value(fallback); };
  auto number = [](const char* fallback) { return cxxopts::value<int>()->default_value(fallback); };
  options.add_options()
    ("device", "cpu (MPI) or cuda (NCCL)", text("cpu"))
    ("min-bytes", "smallest message, also the latency probe (8, 4K, 64M, 1G)", text("8"))
    ("max-bytes", "largest message", text("64M"))
    ("iters", "timed calls per size", number("20"))
    ("warmup", "untimed calls per size first", number("5"))
    ("latency-iters", "timed calls for the latency line", number("1000"))
    ("dtype", "float32, float64, bfloat16, float16, int32, int64", text("float32"))
    ("timeout-s", "give up on a call after this many seconds", number("120"))
    ("h,help", "print this help");

  std::unique_ptr<Distributed> dist;
  try {
    auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::cout << options.help() << std::endl;
      return 0;
    }
    const std::string device_name = args["device"].as<std::string>();
    TORCH_CHECK(device_name == "cpu" || device_name == "cuda", "--device ", device_name, ": expected cpu or cuda");
    const int64_t min_bytes = parse_bytes("min-bytes", args["min-bytes"].as<std::string>());
    const int64_t max_bytes = parse_bytes("max-bytes", args["max-bytes"].as<std::string>());
    const int iters = args["iters"].as<int>(), warmup = args["warmup"].as<int>();
    const int latency_iters = args["latency-iters"].as<int>();
    TORCH_CHECK(iters > 0 && latency_iters > 0 && warmup >= 0,
                "--iters and --latency-iters must be > 0, --warmup >= 0");
    const std::string dtype_name = args["dtype"].as<std::string>();
    const torch::ScalarType dtype = parse_dtype(dtype_name);

    dist = std::make_unique<Distributed>(detect_launch(process_environment()));
    torch::Device device(torch::kCPU);
    if (device_name == "cuda") device = torch::Device(torch::kCUDA, dist->select_cuda_device());
    torch::set_num_threads(1);  // one core per rank: ranks often outnumber cores on a laptop
    Comm comm = Comm::world(*dist, device, std::chrono::seconds(args["timeout-s"].as<int>()));
    const int n = comm.size();
    const int64_t elem = torch::elementSize(dtype);
    const bool root = comm.rank() == 0;

    auto message = [&](int64_t bytes) {
      return torch::zeros({std::max<int64_t>(1, bytes / elem)}, torch::TensorOptions().dtype(dtype).device(device));
    };
    if (root)
      std::printf("# bench_comm: all_reduce (sum), %s, %d ranks, %s\n", dtype_name.c_str(), n,
                  device.is_cuda() ? "cuda (NCCL)" : "cpu (MPI)");

    torch::Tensor small = message(min_bytes);
    const double latency = time_all_reduce(comm, small, /*warmup=*/std::min(100, latency_iters), latency_iters);
    if (root)
      std::printf("# latency: %lld-byte all_reduce = %.1f us (mean of %d calls)\n",
                  static_cast<long long>(small.nbytes()), latency * 1e6, latency_iters);

    if (root) std::printf("#%13s %12s %12s %12s %12s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
      torch::Tensor t = message(bytes);
      const double seconds = time_all_reduce(comm, t, warmup, iters);
      const double algbw = double(t.nbytes()) / seconds / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      if (root)
        std::printf("%14lld %12lld %12.1f %12.3f %12.3f\n", static_cast<long long>(t.nbytes()),
                    static_cast<long long>(t.numel()), seconds * 1e6, algbw, busbw);
    }
    return 0;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  if (dist) dist->abort_job(1);
  return 1;
}
