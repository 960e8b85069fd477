#pragma once
// A prepared data folder's shards of one split, as one token source: windows
// never cross from one shard into the next, and the training and validation
// splits are different files, so no training window reads validation data.
//
//   DIR/train-00000.bin ...   training shards (data/shard.hpp)
//   DIR/val-00000.bin ...     held-out documents

#include <memory>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "data/corpus.hpp"
#include "data/shard.hpp"

namespace swarm {

class shard_set final : public token_source {
public:
  /// Opens every `<split>-*.bin` of `dir` (name order) and checks each
  /// (data/shard.hpp). Refused, naming the file or folder: no such folder, no
  /// shard of the split, a corrupt or truncated shard, shards of another
  /// tokenizer than `tokenizer_hash`, or no shard that holds one window of
  /// `window` tokens.
  [[nodiscard]] static result<std::shared_ptr<const shard_set>> open(const std::string& dir, const std::string& split,
                                                                     uint64_t tokenizer_hash, int64_t window);

  [[nodiscard]] int64_t windows(int64_t len) const override;
  [[nodiscard]] error copy(int64_t index, int64_t len, int64_t* out) const override;
  [[nodiscard]] int64_t tokens() const override { return tokens_; }
  [[nodiscard]] const std::vector<std::shared_ptr<const shard>>& shards() const { return shards_; }

private:
  std::vector<std::shared_ptr<const shard>> shards_;
  int64_t tokens_ = 0;
};

}  // namespace swarm
