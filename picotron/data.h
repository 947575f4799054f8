// picotron/data.h — token sources and the micro-batch loader.
//
// The equivalence contract starts here: the GLOBAL batch of a step depends only on
// (seed, step). How it is later cut across data-parallel ranks and micro-batches is a
// pure index computation, so every mesh trains on exactly the same tokens:
//
//   global batch of step t: G = B x grad_acc x dp rows, each S + 1 tokens
//   row r starts at offset_r ~ Uniform[0, N - S - 1] drawn from Generator(seed, t)
//
//   rows:  | dp 0: micro 0 | dp 0: micro 1 | ... | dp 1: micro 0 | ...
//            B rows each; rank d, micro m reads rows [(d * grad_acc + m) * B, +B)
//
// Sources (--data):
//   arithmetic   generated "a+b=c" problems, one per line, byte tokens (the default: it
//                needs no download, and samples can be checked for correctness)
//   synthetic    uniform random tokens in [0, V): for throughput runs
//   FILE.txt     any other file: its bytes are the tokens (vocab 256)
//   FILE.bin     pre-tokenised tokens: picotron's format (below) or nanoGPT's raw uint16
//   DIR          every *.bin in DIR, in name order, concatenated
//
// picotron token file (.bin), little-endian:
//   bytes 0-7   magic "PICOTOK1"
//   bytes 8-11  uint32 bytes per token (2 or 4)
//   bytes 12-15 uint32 reserved, 0
//   bytes 16-23 uint64 number of tokens N
//   bytes 24-   N tokens
// A file that does not start with the magic is read as nanoGPT's headerless uint16.
//
// Test: build/tests/unit_tests "[data]"   (or ctest -L unit)
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace picotron {

// picotron token files (.bin): the magic and the header's size (the layout above).
inline constexpr char kTokenFileMagic[8] = {'P', 'I', 'C', 'O', 'T', 'O', 'K', '1'};
inline constexpr int64_t kTokenFileHeaderBytes = 24;

// The window starts [G] of every row of a step's global batch, from one generator seeded
// by (seed, step): a row's window does not depend on which rank asks for it. Pure.
torch::Tensor window_starts(uint64_t seed, int64_t step, int64_t tokens, int64_t row_len, int64_t global_rows);

// A finite stream of tokens read by random windows.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual std::string describe() const = 0;
  // Rows of S + 1 tokens for the given global rows of step `step`: [rows, S + 1] int64.
  virtual torch::Tensor rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row, int64_t num_rows,
                             int64_t row_len) const = 0;
};

// A source backed by a token array in memory (text, token files, arithmetic).
class MemorySource : public TokenSource {
 public:
  MemorySource(std::vector<int32_t> tokens, std::string description);
  std::string describe() const override { return description_; }
  torch::Tensor rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row, int64_t num_rows,
                     int64_t row_len) const override;
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  std::string description_;
};

// Files mapped into memory (mmap): text files (a byte per token), token files (2 or 4
// bytes per token) and directories of them, concatenated in name order. Only the windows
// a batch reads are paged in, so memory stays flat whatever the size of the corpus; the
// windows are those MemorySource would read from the same tokens.
class MappedSource : public TokenSource {
 public:
  struct File {
    std::string path;
    int64_t header_bytes = 0;  // 24 for PICOTOK1, 0 for raw uint16 and text
    int width = 1;             // bytes per token
    int64_t count = 0;         // tokens
  };
  // What a file of --data holds, from its size and first bytes (nothing else is read):
  // PICOTOK1 token files, nanoGPT's raw uint16 .bin, or text (a byte per token). Throws
  // one line naming the file.
  static File describe_file(const std::string& path, bool token_file);
  MappedSource(const std::vector<File>& files, int64_t vocab_size, std::string description);
  ~MappedSource() override;
  MappedSource(const MappedSource&) = delete;
  MappedSource& operator=(const MappedSource&) = delete;
  std::string describe() const override { return description_; }
  torch::Tensor rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row, int64_t num_rows,
                     int64_t row_len) const override;
  int64_t size() const { return total_; }
  // Token i of the concatenation; one line naming the file when it is >= the vocabulary.
  int64_t token(int64_t i) const;

 private:
  struct Mapped {
    File file;
    void* base = nullptr;
    size_t bytes = 0;
  };
  size_t file_of(int64_t i) const;  // which mapped file holds token i of the concatenation
  std::vector<Mapped> maps_;
  std::vector<int64_t> first_token_;  // where each file starts in the concatenation
  int64_t total_ = 0, vocab_size_ = 0;
  std::string description_;
};

// Uniform random tokens in [0, V), a pure function of (seed, step, row).
class SyntheticSource : public TokenSource {
 public:
  explicit SyntheticSource(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::string describe() const override;
  torch::Tensor rows(uint64_t seed, int64_t step, int64_t global_rows, int64_t first_row, int64_t num_rows,
                     int64_t row_len) const override;

 private:
  int64_t vocab_size_;
};

// "--data " + what: the one line every problem with --data throws (data.cpp, data_mapped.cpp).
std::runtime_error data_error(const std::string& what);

// Open --data. Throws std::runtime_error with one line naming the file and the problem
// (missing, empty, truncated, token >= vocab, fewer than seq_len + 1 tokens).
std::shared_ptr<TokenSource> open_data(const std::string& spec, int64_t vocab_size, int64_t seq_len);

// ---- the arithmetic task ------------------------------------------------------------
// "17+45=62\n": operands in [0, 99]. Problem k of the training stream is a pure function of k.
struct ArithmeticProblem {
  int a, b;
  std::string prompt() const;  // "17+45="
  std::string answer() const;  // "62"
};
ArithmeticProblem arithmetic_problem(uint64_t seed, int64_t index);
std::vector<int32_t> arithmetic_tokens(int64_t num_problems);  // the training stream (bytes)

// Write tokens in picotron's .bin format (bytes_per_token 2 or 4).
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens, int bytes_per_token);

// ---- the loader ---------------------------------------------------------------------
struct Batch {
  torch::Tensor inputs;     // [B, S] int64
  torch::Tensor targets;    // [B, S] int64: inputs shifted left by one token
  torch::Tensor positions;  // [S] int64, the tokens' places in the sequence (undefined: 0..S-1)
};

class BatchLoader {
 public:
  // dp_size / dp_rank: this rank's place on the data-parallel axis of the mesh (train.cpp
  // passes mesh.shape().dp and mesh.coords().dp: one source of truth).
  BatchLoader(std::shared_ptr<TokenSource> source, uint64_t seed, int64_t seq_len, int64_t micro_batch_size,
              int64_t grad_acc_steps, int64_t dp_size, int64_t dp_rank = 0);
  int64_t global_batch_rows() const { return micro_batch_size_ * grad_acc_steps_ * dp_size_; }
  int64_t tokens_per_step() const { return global_batch_rows() * seq_len_; }
  // The whole global batch of `step`: [G, S]. Only for tests and the 1-rank reference.
  Batch global_batch(int64_t step) const;
  // Micro-batch `micro` of data-parallel rank `dp_rank` for `step`: [B, S].
  Batch micro_batch(int64_t step, int64_t micro, int64_t dp_rank) const;
  // ... of this loader's own dp rank.
  Batch micro_batch(int64_t step, int64_t micro) const { return micro_batch(step, micro, dp_rank_); }
  // Context parallelism: micro_batch() keeps only these positions of every sequence (a cp
  // rank's tokens, context_parallel/cp_layout.h): inputs and targets [B, n], positions [n].
  void keep_positions(const std::vector<int64_t>& positions);

 private:
  Batch slice(int64_t step, int64_t first_row, int64_t num_rows) const;
  std::shared_ptr<TokenSource> source_;
  uint64_t seed_;
  int64_t seq_len_, micro_batch_size_, grad_acc_steps_, dp_size_, dp_rank_;
  torch::Tensor positions_;  // [n] int64 when only part of each sequence is kept
};

}  // namespace picotron
