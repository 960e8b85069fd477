#pragma once
// What trainers sample from: a token_source is any sequence of token ids a
// window of `len` tokens can be cut out of. Two kinds: the raw bytes of text
// files (`--corpus`, a byte vocabulary) and prepared token shards (`--data`,
// data/shard_set.hpp). No torch: the trainer ships token ids as raw int64
// bytes without ever holding a tensor.

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace swarm {

class token_source {
public:
  virtual ~token_source() = default;
  /// How many windows of `len` tokens there are (0 when none fits).
  [[nodiscard]] virtual int64_t windows(int64_t len) const = 0;
  /// Copies window `index` (0 <= index < windows(len)) of `len` tokens to
  /// `out`; an error when the source changed under the process (data/shard.hpp).
  [[nodiscard]] virtual error copy(int64_t index, int64_t len, int64_t* out) const = 0;
  /// Tokens in all, for logs.
  [[nodiscard]] virtual int64_t tokens() const = 0;
};

/// A byte corpus loaded from one file or from every text file of a folder.
class corpus final : public token_source {
public:
  /// Loads `path` (a file, or a folder whose regular files are read in name order,
  /// skipping fortune's binary *.dat indices and *.u8 duplicates). Throws
  /// std::runtime_error with the path and the reason when nothing usable is there.
  [[nodiscard]] static corpus load(const std::string& path, int64_t min_bytes);

  explicit corpus(std::string bytes) : bytes_(std::move(bytes)) {}

  [[nodiscard]] const std::string& bytes() const { return bytes_; }
  [[nodiscard]] int64_t size() const { return static_cast<int64_t>(bytes_.size()); }

  [[nodiscard]] int64_t windows(int64_t len) const override { return std::max<int64_t>(0, size() - len + 1); }
  [[nodiscard]] error copy(int64_t index, int64_t len, int64_t* out) const override;
  [[nodiscard]] int64_t tokens() const override { return size(); }

private:
  std::string bytes_;
};

/// Token ids of one microbatch, row-major [batch, seq_len].
struct microbatch_tokens {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;   ///< tokens [i, i + seq_len) of each window
  std::vector<int64_t> targets;  ///< tokens [i + 1, i + seq_len + 1)
};

/// Draws `batch` windows of seq_len + 1 tokens, uniformly over every window
/// of the source (for a byte corpus: the same draws as before sources
/// existed, so checkpointed generators continue the same sequence).
[[nodiscard]] result<microbatch_tokens> sample_microbatch(const token_source& text, int64_t batch, int64_t seq_len,
                                                          std::mt19937_64& rng);

/// The seed of trainer `who`'s sampler (its --trainer-slot, or its process id
/// when it has none): the same pair draws the same windows in every run, and
/// trainers of one swarm draw apart (mixed: slots 0, 1, 2 must not give
/// neighbouring mt19937_64 seeds).
[[nodiscard]] uint64_t sampler_seed(uint64_t model_seed, uint64_t who);

/// Windows `indices` (of seq_len + 1 tokens each) as one microbatch.
[[nodiscard]] result<microbatch_tokens> gather_windows(const token_source& text, const std::vector<int64_t>& indices,
                                                       int64_t seq_len);

/// The fixed evaluation set: the first `count` windows of seq_len + 1 tokens
/// laid end to end (overlapping only where the source is too short for that).
/// No randomness: every trainer and `--role local` measure the same windows.
[[nodiscard]] std::vector<int64_t> eval_windows(const token_source& text, int64_t seq_len, int64_t count);

/// The evaluation set of `tokens` tokens (rounded up to whole windows) as
/// microbatches of `microbatch` windows (the last may be smaller).
[[nodiscard]] result<std::vector<microbatch_tokens>> eval_batches(const token_source& text, int64_t seq_len,
                                                                  int64_t tokens, int64_t microbatch);

}  // namespace swarm
