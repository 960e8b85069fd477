#include "models/corpus.hpp"

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

} // namespace

corpus corpus::load(const std::string& path, int64_t min_bytes) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::runtime_error("corpus '" + path + "' does not exist (install the 'fortunes' package or pass --corpus FILE)");
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

microbatch_tokens sample_microbatch(const corpus& text, int64_t batch, int64_t seq_len, std::mt19937_64& rng) {
  microbatch_tokens mb;
  mb.batch = batch;
  mb.seq_len = seq_len;
  mb.inputs.resize(static_cast<size_t>(batch * seq_len));
  mb.targets.resize(mb.inputs.size());
  std::uniform_int_distribution<int64_t> start(0, text.size() - seq_len - 1);
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.bytes().data());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = start(rng);
    for (int64_t t = 0; t < seq_len; ++t) {
      mb.inputs[b * seq_len + t] = bytes[i + t];
      mb.targets[b * seq_len + t] = bytes[i + t + 1];
    }
  }
  return mb;
}

} // namespace swarm
