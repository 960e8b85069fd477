#include "models/partition.hpp"

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

} // namespace swarm
