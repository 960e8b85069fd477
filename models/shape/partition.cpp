#include "models/shape/partition.hpp"

#include <algorithm>

#include "config/family.hpp"

namespace swarm {

std::vector<stage_span> partition_blocks(int n_blocks, int num_stages) {
  if (num_stages < 1 || n_blocks < num_stages)
    return {};
  const int base = n_blocks / num_stages;
  int extra = n_blocks % num_stages;
  // Order in which stages receive an extra block: middle ones first, the ends last.
  std::vector<int> bonus(num_stages, 0);
  for (int offset = 0; extra > 0; ++offset) {
    const int lo = (num_stages - 1) / 2 - offset;
    const int hi = num_stages / 2 + offset;
    for (int s : {lo, hi}) {
      if (extra > 0 && s >= 0 && s < num_stages && bonus[s] == 0) {
        bonus[s] = 1;
        --extra;
      }
    }
  }
  std::vector<stage_span> spans;
  int next = 0;
  for (int s = 0; s < num_stages; ++s) {
    stage_span span;
    span.stage = s;
    span.num_stages = num_stages;
    span.first_block = next;
    next += base + bonus[s];
    span.end_block = next;
    spans.push_back(span);
  }
  return spans;
}

std::vector<stage_span> partition_layers(const model_config& m, int num_stages) {
  const int share = static_cast<int>(std::max<int64_t>(1, m.share_layers));
  if (m.n_layers % share != 0)
    return {};
  auto spans = partition_blocks(static_cast<int>(m.n_layers) / share, num_stages);
  for (auto& s : spans) {
    s.first_block *= share;
    s.end_block *= share;
  }
  return spans;
}

double block_matrix_madds(const model_config& m) { return family_of(m).block_madds(m); }

int64_t block_parameters(const model_config& m) { return family_of(m).block_parameters(m); }

std::vector<double> stage_costs(const model_config& m, int num_stages) {
  const auto d = static_cast<double>(m.d_model);
  const auto t = static_cast<double>(m.seq_len);
  const double block = block_matrix_madds(m) + 2 * t * d;  // per token
  const double head = d * static_cast<double>(m.vocab);
  std::vector<double> cost;
  for (const auto& span : partition_layers(m, num_stages)) {  // compute: every application
    const double forward = t * (span.blocks() * block + (span.has_head() ? head : 0));
    cost.push_back(forward * (span.has_head() ? 1 + 2 : 2 + 2));  // forward(s) + backward (2x forward)
  }
  return cost;
}

}  // namespace swarm
