// swarm_bench_data: the data side's costs, as figures (scripts/bench_data.sh
// runs it beside Debian's python3-sentencepiece and prints the comparison).
//
//   swarm_bench_data TOKENIZER TEXT_FILE SHARD_DIR SEQ_LEN MICROBATCH
//
// encode: the lines of TEXT_FILE through the tokenizer, one thread and two
// (lines dealt out in turn), MB/s of text. sample: microbatches drawn from
// SHARD_DIR's training shards and from TEXT_FILE as a byte corpus, microseconds each.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "data/corpus.hpp"
#include "data/shard_set.hpp"
#include "data/tokenizer.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace swarm;
  if (argc != 6) {
    std::cerr << "usage: swarm_bench_data TOKENIZER TEXT_FILE SHARD_DIR SEQ_LEN MICROBATCH\n";
    return 2;
  }
  auto tok = tokenizer::open(argv[1]);
  if (!tok) {
    std::cerr << tok.error().what() << "\n";
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::ostringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    lines.emplace_back(text.data() + at, end - at);
    at = end + 1;
  }
  for (const int threads : {1, 2}) {
    const auto started = std::chrono::steady_clock::now();
    std::vector<int64_t> counts(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (size_t i = static_cast<size_t>(t); i < lines.size(); i += static_cast<size_t>(threads))
          counts[static_cast<size_t>(t)] += static_cast<int64_t>((*tok)->encode(lines[i])->size());
      });
    for (auto& t : pool)
      t.join();
    const double secs = seconds_since(started);
    int64_t tokens = 0;
    for (auto c : counts)
      tokens += c;
    std::printf("encode threads=%d lines=%zu bytes=%zu tokens=%lld seconds=%.3f mb_per_s=%.2f\n", threads, lines.size(),
                text.size(), static_cast<long long>(tokens), secs, static_cast<double>(text.size()) / 1e6 / secs);
  }
  const int64_t seq = std::atoll(argv[4]), batch = std::atoll(argv[5]);
  auto shards = shard_set::open(argv[3], "train", (*tok)->hash(), seq + 1);
  if (!shards) {
    std::cerr << shards.error().what() << "\n";
    return 2;
  }
  const corpus bytes(text);
  const std::pair<const char*, const token_source*> sources[] = {{"shards", shards->get()}, {"bytes", &bytes}};
  for (const auto& [name, src] : sources) {
    std::mt19937_64 rng(1);
    const int n = 20000;
    int64_t check = 0;
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      auto mb = sample_microbatch(*src, batch, seq, rng);
      if (!mb) {
        std::cerr << mb.error().what() << "\n";
        return 2;
      }
      check += mb->inputs[0];
    }
    const double secs = seconds_since(started);
    std::printf("sample source=%s tokens=%lld microbatch=%lldx%lld us_per_microbatch=%.2f (checksum %lld)\n", name,
                static_cast<long long>(src->tokens()), static_cast<long long>(batch), static_cast<long long>(seq),
                secs / n * 1e6, static_cast<long long>(check));
  }
  return 0;
}
