#include "data/shard_set.hpp"

#include <algorithm>
#include <filesystem>

namespace swarm {

namespace fs = std::filesystem;

result<std::shared_ptr<const shard_set>> shard_set::open(const std::string& dir, const std::string& split,
                                                         uint64_t tokenizer_hash, int64_t window) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return error{errc::BAD_CONFIG, "data folder '" + dir + "' " +
                                       (fs::exists(dir, ec) ? "is not a folder" : "does not exist") +
                                       " (make one with --role prepare)"};
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(split + "-", 0) == 0 && entry.path().extension() == ".bin")
      files.push_back(entry.path());
  }
  if (ec)
    return error{errc::BAD_CONFIG, "data folder '" + dir + "': " + ec.message()};
  if (files.empty())
    return error{errc::BAD_CONFIG,
                 "data folder '" + dir + "' holds no " + split + "-*.bin shards (make them with --role prepare)"};
  std::sort(files.begin(), files.end());
  auto set = std::make_shared<shard_set>();
  int64_t longest = 0;
  for (const auto& f : files) {
    auto s = shard::open(f.string(), tokenizer_hash);
    if (!s)
      return s.error();
    longest = std::max(longest, (*s)->size());
    set->tokens_ += (*s)->size();
    set->shards_.push_back(std::move(*s));
  }
  if (longest < window)
    return error{errc::BAD_CONFIG, "data folder '" + dir + "': its longest " + split + " shard holds " +
                                       std::to_string(longest) + " tokens, fewer than one window of " +
                                       std::to_string(window) + " (seq-len + 1): prepare more text or shorten seq-len"};
  return std::shared_ptr<const shard_set>(std::move(set));
}

int64_t shard_set::windows(int64_t len) const {
  int64_t n = 0;
  for (const auto& s : shards_)
    n += std::max<int64_t>(0, s->size() - len + 1);
  return n;
}

error shard_set::copy(int64_t index, int64_t len, int64_t* out) const {
  for (const auto& s : shards_) {
    const int64_t here = std::max<int64_t>(0, s->size() - len + 1);
    if (index < here)
      return s->read(index, len, out);
    index -= here;
  }
  return {errc::INTERNAL, "window " + std::to_string(index) + " is past the last shard"};
}

}  // namespace swarm
