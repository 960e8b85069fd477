#pragma once
// The training text and the sampler that cuts it into microbatches. No torch:
// the trainer ships token ids as raw int64 bytes without ever holding a tensor.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace swarm {

/// A byte corpus loaded from one file or from every text file of a folder.
class corpus {
public:
  /// Loads `path` (a file, or a folder whose regular files are read in name order,
  /// skipping fortune's binary *.dat indices and *.u8 duplicates). Throws
  /// std::runtime_error with the path and the reason when nothing usable is there.
  [[nodiscard]] static corpus load(const std::string& path, int64_t min_bytes);

  explicit corpus(std::string bytes) : bytes_(std::move(bytes)) {}

  [[nodiscard]] const std::string& bytes() const { return bytes_; }
  [[nodiscard]] int64_t size() const { return static_cast<int64_t>(bytes_.size()); }

private:
  std::string bytes_;
};

/// Token ids of one microbatch, row-major [batch, seq_len].
struct microbatch_tokens {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;   ///< bytes [i, i + seq_len)
  std::vector<int64_t> targets;  ///< bytes [i + 1, i + seq_len + 1)
};

/// Draws `batch` random windows of seq_len + 1 bytes from the corpus.
[[nodiscard]] microbatch_tokens sample_microbatch(const corpus& text, int64_t batch, int64_t seq_len,
                                                  std::mt19937_64& rng);

} // namespace swarm
