#include "policy/allreduce.hpp"

namespace swarm::policy {

std::vector<shard> partition_shards(int64_t total, int peers) {
  if (peers < 1 || total < 0)
    return {};
  std::vector<shard> shards;
  const int64_t base = total / peers;
  const int64_t extra = total % peers;
  int64_t next = 0;
  for (int r = 0; r < peers; ++r) {
    const int64_t size = base + (r < extra ? 1 : 0);
    shards.push_back({next, next + size});
    next += size;
  }
  return shards;
}

bool weighted_mean(const std::vector<weighted_part>& parts, int64_t n, float* out) {
  double total = 0;
  for (const auto& p : parts)
    if (p.samples > 0)
      total += p.samples;
  if (total <= 0)
    return false;
  // Accumulate in double: with many peers float sums of similar magnitudes drift,
  // and every owner must produce the same bits for the same inputs anyway.
  std::vector<double> acc(static_cast<size_t>(n), 0.0);
  for (const auto& p : parts) {
    if (p.samples <= 0)
      continue;
    const double w = p.samples / total;
    for (int64_t j = 0; j < n; ++j)
      acc[static_cast<size_t>(j)] += w * p.values[j];
  }
  for (int64_t j = 0; j < n; ++j)
    out[j] = static_cast<float>(acc[static_cast<size_t>(j)]);
  return true;
}

}  // namespace swarm::policy
