// tests/tools/train_batch.cpp — many runs of train.cpp in one launch: the equivalence suite's
// speed (issue 53). A case of tests/scripts/equivalence.sh is one mpirun of build/train, about
// 3 s here, of which starting the processes, loading LibTorch and MPI_Init are about 2.5
// s and the six steps of the tiny model the rest. This program compiles train.cpp itself
// (its main renamed) and runs a list of argument sets one after another in the same
// processes, so the start is paid once per list, not once per case.
//
//   mpirun -np N build/tests/train_batch LIST     (N ranks: every line of LIST is an N-rank run)
//   build/tests/train_batch LIST                  (one process)
//
// LIST: one run a line, tab-separated: LOG, MARKER, KEY, then train's arguments. Every
// rank runs train's main with those arguments, its stdout and stderr appended to LOG
// (as mpirun would have merged them); when every rank has returned 0, rank 0 writes KEY to
// MARKER. A run that fails ends the whole launch as it ends build/train (MPI_Abort, or
// every rank leaving together), so the runs after it have no MARKER: tests/scripts/equivalence.sh
// then runs those cases one launch each, as it always did. The KEY says which command
// and which binaries made the files (tests/scripts/equivalence.sh computes it), so a case never
// reads the output of another command or of an older build.
//
// train's main is the program's own: nothing here decides anything about a run. What one
// run leaves behind in the process (MPI stays initialised: Distributed does not own it and
// does not finalise it; the thread count; the default dtype) each run sets again at its
// start. tests/scripts/equivalence_batch.sh checked that every case's losses, grad norms and final
// parameters are bit-identical batched and alone (docs/testing.md).
//
// Test: ctest -R equivalence.batch
#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#define main picotron_train_main
#include "train.cpp"
#undef main

namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, '\t');) out.push_back(field);
  return out;
}

// Point stdout and stderr at `log` (appended) for one run; restored by the destructor.
struct OutputTo {
  int saved_out, saved_err;
  explicit OutputTo(const std::string& log) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    saved_out = dup(1);
    saved_err = dup(2);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) throw std::runtime_error("train_batch: cannot open " + log);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  ~OutputTo() {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: [mpirun -np N] train_batch LIST (tests/tools/train_batch.cpp)" << std::endl;
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);  // as Distributed would
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::ifstream list(argv[1]);
  if (!list) {
    std::cerr << "train_batch: cannot read " << argv[1] << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int runs = 0;
  for (std::string line; std::getline(list, line);) {
    if (line.empty()) continue;
    std::vector<std::string> fields = split_tabs(line);
    if (fields.size() < 3) {
      std::cerr << "train_batch: a line needs LOG, MARKER, KEY and arguments: " << line << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const std::string log = fields[0], marker = fields[1], key = fields[2];
    if (rank == 0) {  // a fresh log and no marker until this run has finished on every rank
      std::remove(marker.c_str());
      std::remove(log.c_str());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<std::string> words{"train"};
    words.insert(words.end(), fields.begin() + 3, fields.end());
    std::vector<char*> args;
    for (auto& w : words) args.push_back(w.data());
    args.push_back(nullptr);
    int rc = 0;
    {
      OutputTo output(log);
      rc = picotron_train_main(int(words.size()), args.data());
    }
    int worst = 0;
    MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst != 0) {
      if (rank == 0) std::cerr << "train_batch: a run exited with " << worst << " (" << log << "): stopping" << std::endl;
      MPI_Abort(MPI_COMM_WORLD, worst);
    }
    if (rank == 0) std::ofstream(marker) << key << "\n";
    ++runs;
  }
  if (rank == 0) std::cout << "train_batch: " << runs << " runs" << std::endl;
  MPI_Finalize();
  return 0;
}
