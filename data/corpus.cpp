#include "data/corpus.hpp"

#include "base/hash.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace swarm {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

corpus corpus::load(const std::string& path, int64_t min_bytes) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::runtime_error("corpus '" + path +
                             "' does not exist (install the 'fortunes' package or pass --corpus FILE)");
  std::string text;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const auto name = entry.path().filename().string();
      // fortune keeps a binary index (*.dat) and a symlinked copy (*.u8) per file.
      if (entry.is_symlink() || !entry.is_regular_file() || ends_with(name, ".dat") || ends_with(name, ".u8"))
        continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files)
      text += read_file(f);
  } else {
    text = read_file(path);
  }
  if (static_cast<int64_t>(text.size()) < min_bytes)
    throw std::runtime_error("corpus '" + path + "' holds " + std::to_string(text.size()) + " bytes, fewer than the " +
                             std::to_string(min_bytes) + " one sample needs (seq_len + 1)");
  return corpus{std::move(text)};
}

error corpus::copy(int64_t index, int64_t len, int64_t* out) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(bytes_.data()) + index;
  for (int64_t t = 0; t < len; ++t)
    out[t] = bytes[t];
  return {};
}

result<microbatch_tokens> gather_windows(const token_source& text, const std::vector<int64_t>& indices,
                                         int64_t seq_len) {
  microbatch_tokens mb;
  mb.batch = static_cast<int64_t>(indices.size());
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(mb.batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  std::vector<int64_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t b = 0; b < mb.batch; ++b) {
    if (auto err = text.copy(indices[static_cast<size_t>(b)], seq_len + 1, window.data()))
      return err;
    std::copy(window.begin(), window.end() - 1, mb.inputs.begin() + b * seq_len);
    std::copy(window.begin() + 1, window.end(), mb.targets.begin() + b * seq_len);
  }
  return mb;
}

uint64_t sampler_seed(uint64_t model_seed, uint64_t who) {
  return splitmix64_finish(model_seed * 0x9e3779b97f4a7c15ULL + who + 0x632be59bd9b4e019ULL);
}

result<microbatch_tokens> sample_microbatch(const token_source& text, int64_t batch, int64_t seq_len,
                                            std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> start(0, text.windows(seq_len + 1) - 1);
  std::vector<int64_t> indices(static_cast<size_t>(batch));
  for (auto& i : indices)
    i = start(rng);
  return gather_windows(text, indices, seq_len);
}

std::vector<int64_t> eval_windows(const token_source& text, int64_t seq_len, int64_t count) {
  const int64_t n = text.windows(seq_len + 1);
  std::vector<int64_t> out;
  if (n <= 0 || count <= 0)
    return out;
  // Stride seq_len + 1 where the source holds `count` such windows; closer
  // (overlapping) where it does not.
  const int64_t stride = std::max<int64_t>(1, std::min<int64_t>(seq_len + 1, n / count));
  for (int64_t k = 0; k < count && k * stride < n; ++k)
    out.push_back(k * stride);
  return out;
}

result<std::vector<microbatch_tokens>> eval_batches(const token_source& text, int64_t seq_len, int64_t tokens,
                                                    int64_t microbatch) {
  const auto windows = eval_windows(text, seq_len, (tokens + seq_len - 1) / seq_len);
  std::vector<microbatch_tokens> out;
  for (size_t at = 0; at < windows.size(); at += static_cast<size_t>(microbatch)) {
    const auto end = std::min(windows.size(), at + static_cast<size_t>(microbatch));
    auto batch = gather_windows(
        text, {windows.begin() + static_cast<std::ptrdiff_t>(at), windows.begin() + static_cast<std::ptrdiff_t>(end)},
        seq_len);
    if (!batch)
      return batch.error();
    out.push_back(std::move(*batch));
  }
  return out;
}

}  // namespace swarm
