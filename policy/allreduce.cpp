#include "policy/allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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

bool centered_clip(const std::vector<weighted_part>& parts, int64_t n, double tau, int iterations, float* out,
                   std::vector<double>* clipped, const float* start) {
  const auto len = static_cast<size_t>(n);
  // The start is the weighted mean of the finite parts; a part holding NaN or
  // Inf has no finite distance, so it gets no weight at all.
  std::vector<char> finite(parts.size(), 1);
  double finite_total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].samples <= 0)
      continue;
    for (size_t j = 0; j < len && finite[i]; ++j)
      finite[i] = std::isfinite(parts[i].values[j]);
    if (finite[i])
      finite_total += parts[i].samples;
  }
  if (finite_total <= 0 || !(tau > 0))
    return false;
  std::vector<double> v(len, 0.0), step(len);
  if (start)
    std::copy(start, start + len, v.begin());
  else
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].samples > 0 && finite[i])
        for (size_t j = 0; j < len; ++j)
          v[j] += parts[i].samples / finite_total * parts[i].values[j];
  std::vector<double> clip(parts.size(), 0.0);
  for (int it = 0; it < iterations; ++it) {
    std::fill(step.begin(), step.end(), 0.0);
    for (size_t i = 0; i < parts.size(); ++i) {
      const auto& p = parts[i];
      if (p.samples <= 0)
        continue;
      if (!finite[i]) {
        clip[i] = 1.0;
        continue;
      }
      double norm_sq = 0;
      for (size_t j = 0; j < len; ++j) {
        const double d = p.values[j] - v[j];
        norm_sq += d * d;
      }
      const double norm = std::sqrt(norm_sq);
      const double keep = norm > tau ? tau / norm : 1.0;
      clip[i] = 1.0 - keep;
      const double w = p.samples / finite_total * keep;
      for (size_t j = 0; j < len; ++j)
        step[j] += w * (p.values[j] - v[j]);
    }
    for (size_t j = 0; j < len; ++j)
      v[j] += step[j];
  }
  for (size_t j = 0; j < len; ++j)
    out[j] = static_cast<float>(v[j]);
  if (clipped)
    *clipped = std::move(clip);
  return true;
}

bool clipped_mean(const std::vector<weighted_part>& parts, int64_t n, const aggregation& how, float* out,
                  std::vector<double>* outlying) {
  const auto len = static_cast<size_t>(n);
  const auto finite = [len](const weighted_part& p) {
    return std::all_of(p.values, p.values + len, [](float x) { return std::isfinite(x); });
  };
  std::vector<const float*> used;
  for (const auto& p : parts)
    if (p.samples > 0 && finite(p))
      used.push_back(p.values);
  if (used.empty())
    return centered_clip(parts, n, 1.0, 0, out);  // false unless a part has samples: then NaN parts only
  std::vector<float> start(len), column(used.size());
  for (size_t j = 0; j < len; ++j) {
    for (size_t i = 0; i < used.size(); ++i)
      column[i] = used[i][j];
    auto mid = column.begin() + static_cast<std::ptrdiff_t>(column.size() / 2);
    std::nth_element(column.begin(), mid, column.end());
    float m = *mid;
    if (column.size() % 2 == 0)  // the mean of the two middle values: symmetric in the parts
      m = 0.5f * (m + *std::max_element(column.begin(), mid));
    start[j] = m;
  }
  const auto distance = [&](const float* x) {
    double sq = 0;
    for (size_t j = 0; j < len; ++j)
      sq += (static_cast<double>(x[j]) - start[j]) * (static_cast<double>(x[j]) - start[j]);
    return std::sqrt(sq);
  };
  const auto median = [](std::vector<double> v) {
    auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  };
  std::vector<double> dist(parts.size(), 0.0), scaled, unscaled;
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].samples > 0) {
      dist[i] = finite(parts[i]) ? distance(parts[i].values) : std::numeric_limits<double>::infinity();
      if (std::isfinite(dist[i])) {
        scaled.push_back(dist[i] * std::sqrt(parts[i].samples));
        unscaled.push_back(dist[i]);
      }
    }
  const double typical = median(scaled);
  if (outlying) {
    outlying->assign(parts.size(), 0.0);
    for (size_t i = 0; i < parts.size(); ++i)
      if (parts[i].samples > 0) {
        const double x = dist[i] * std::sqrt(parts[i].samples);
        (*outlying)[i] = x == 0 ? 0.0 : typical > 0 ? x / typical : std::numeric_limits<double>::infinity();
      }
  }
  const double tau = how.radius * median(unscaled);
  if (!(tau > 0)) {
    // The median part is the start itself: at least half the parts agree
    // exactly, and any other is off by itself. The start is their value.
    std::copy(start.begin(), start.end(), out);
    return true;
  }
  return centered_clip(parts, n, tau, how.iterations, out, nullptr, start.data());
}

}  // namespace swarm::policy
