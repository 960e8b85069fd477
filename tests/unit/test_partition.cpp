// The stage cut: exact expectations, including the degenerate ones.
#include <catch2/catch.hpp>

#include "models/shape/partition.hpp"

using swarm::block_matrix_madds;
using swarm::model_config;
using swarm::partition_blocks;
using swarm::partition_layers;
using swarm::stage_costs;

namespace {

std::vector<int> sizes(const std::vector<swarm::stage_span>& spans) {
  std::vector<int> out;
  for (const auto& s : spans)
    out.push_back(s.blocks());
  return out;
}

}  // namespace

TEST_CASE("partition splits blocks contiguously, extras to the middle", "[partition]") {
  CHECK(sizes(partition_blocks(4, 1)) == std::vector<int>{4});
  CHECK(sizes(partition_blocks(4, 2)) == std::vector<int>{2, 2});
  CHECK(sizes(partition_blocks(5, 2)) == std::vector<int>{3, 2});
  CHECK(sizes(partition_blocks(7, 3)) == std::vector<int>{2, 3, 2});
  CHECK(sizes(partition_blocks(8, 3)) == std::vector<int>{3, 3, 2});
  CHECK(sizes(partition_blocks(6, 4)) == std::vector<int>{1, 2, 2, 1});
  CHECK(sizes(partition_blocks(3, 3)) == std::vector<int>{1, 1, 1});
}

TEST_CASE("partition covers every block once, in order", "[partition]") {
  for (int n = 1; n <= 24; ++n)
    for (int s = 1; s <= n; ++s) {
      const auto spans = partition_blocks(n, s);
      REQUIRE(static_cast<int>(spans.size()) == s);
      int next = 0;
      for (int k = 0; k < s; ++k) {
        CHECK(spans[k].stage == k);
        CHECK(spans[k].num_stages == s);
        CHECK(spans[k].first_block == next);
        CHECK(spans[k].blocks() >= 1);
        CHECK(spans[k].blocks() <= n / s + 1);
        next = spans[k].end_block;
      }
      CHECK(next == n);
      CHECK(spans.front().has_embedding());
      CHECK(spans.back().has_head());
    }
}

TEST_CASE("partition refuses impossible cuts", "[partition]") {
  CHECK(partition_blocks(4, 0).empty());
  CHECK(partition_blocks(4, 5).empty());
  CHECK(partition_blocks(0, 1).empty());
  CHECK(partition_blocks(4, -1).empty());
}

TEST_CASE("stage costs: multiply-adds per sample, forward twice before the last stage", "[partition]") {
  // d 64, T 64, vocab 256, 2 blocks on 2 stages (config/tiny). Per token a block is
  // 12 x 64^2 + 2 x 64 x 64 = 57344, the head 64 x 256 = 16384.
  model_config m;
  m.d_model = 64;
  m.seq_len = 64;
  m.vocab = 256;
  m.n_layers = 2;
  const auto cost = stage_costs(m, 2);
  REQUIRE(cost.size() == 2);
  CHECK(cost[0] == Approx(64 * 57344.0 * 4));            // forward, forward again, backward (2x)
  CHECK(cost[1] == Approx(64 * (57344.0 + 16384) * 3));  // forward with the loss, backward
  // One stage: the last, so one forward. Invalid cuts: nothing.
  CHECK(stage_costs(m, 1).at(0) == Approx(64 * (2 * 57344.0 + 16384) * 3));
  CHECK(stage_costs(m, 3).empty());
  // llama, 4 heads of 16 with 2 key/value heads, ffn 8/3 x 64 -> 256: 2 x 64^2 (q, o) + 2 x 64 x 32 (k, v)
  // + 3 x 64 x 256 (SwiGLU) = 61440, plus the same 2 T d.
  m.arch = "llama";
  m.n_heads = 4;
  m.n_kv_heads = 2;
  CHECK(m.ffn_width() == 256);
  CHECK(block_matrix_madds(m) == Approx(61440));
  CHECK(stage_costs(m, 2).at(0) == Approx(64 * (61440.0 + 8192) * 4));
  // qwen2: llama's multiply-adds (its q, k and v biases are adds), and those biases' d + 2 x 32 parameters.
  const auto llama_parameters = block_parameters(m);
  m.arch = "qwen2";
  CHECK(block_matrix_madds(m) == Approx(61440));
  CHECK(block_parameters(m) == llama_parameters + 64 + 2 * 32);
}

TEST_CASE("shared layers: stages hold whole runs, compute counts every application", "[partition]") {
  model_config m;
  m.n_layers = 12;
  m.share_layers = 4;  // 3 runs of 4
  const auto spans = partition_layers(m, 2);
  REQUIRE(spans.size() == 2);
  CHECK(spans[0].first_block == 0);
  CHECK(spans[0].end_block == 8);  // 3 runs on 2 stages: the extra run to the first
  CHECK(spans[1].end_block == 12);
  for (const auto& s : spans)
    CHECK(s.blocks() % 4 == 0);
  CHECK(partition_layers(m, 3).size() == 3);
  CHECK(partition_layers(m, 4).empty());  // more stages than runs
  m.share_layers = 5;
  CHECK(partition_layers(m, 1).empty());  // 5 does not divide 12
  // The same cut without sharing costs the same per application.
  m.share_layers = 4;
  auto plain = m;
  plain.share_layers = 1;
  const auto shared_cost = stage_costs(m, 3), plain_cost = stage_costs(plain, 3);
  CHECK(shared_cost == plain_cost);  // 12 layers on 3 stages: 4 each either way
}
