#include "policy/verification.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace swarm::policy {

double relative_distance(const float* a, const float* b, size_t n) {
  double diff = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    diff += (x - y) * (x - y);
    na += x * x;
    nb += y * y;
  }
  if (!std::isfinite(diff) || !std::isfinite(na) || !std::isfinite(nb))
    return std::numeric_limits<double>::quiet_NaN();
  const double scale = std::sqrt(std::max(na, nb));
  return scale > 0 ? std::sqrt(diff) / scale : 0.0;
}

double verify_tolerance(bool bf16) { return bf16 ? 0.05 : 1e-4; }

double codec_error(const std::string& compression) {
  if (compression == "fp16")
    return 5e-4;
  if (compression == "blockwise8")
    return 0.02;
  return 0.0;
}

double verify_tolerance(bool bf16, const std::string& compression) {
  return verify_tolerance(bf16) + 2 * codec_error(compression);
}

std::vector<size_t> charged(const std::vector<std::vector<double>>& distance, double tolerance) {
  const size_t n = distance.size();
  // A handful of servers answer one request (the first, its verifier, a
  // referee): every subset is tried, up to 16 servers.
  if (n < 2 || n > 16)
    return {};
  for (const auto& row : distance)
    if (row.size() != n)
      return {};
  auto agree = [&](size_t i, size_t j) {
    const double d = std::max(distance[i][j], distance[j][i]);
    return !std::isnan(d) && d <= tolerance;
  };
  unsigned best = 0;
  size_t best_size = 0;
  bool tied = false;
  for (unsigned set = 1; set < (1u << n); ++set) {
    size_t size = 0;
    bool clique = true;
    for (size_t i = 0; i < n && clique; ++i) {
      if (!(set >> i & 1u))
        continue;
      ++size;
      for (size_t j = i + 1; j < n && clique; ++j)
        clique = !(set >> j & 1u) || agree(i, j);
    }
    if (!clique || size < best_size)
      continue;
    tied = size == best_size;
    if (size > best_size)
      best = set, best_size = size;
  }
  if (tied || 2 * best_size <= n || best_size == n)
    return {};
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i)
    if (!(best >> i & 1u))
      out.push_back(i);
  return out;
}

bool strike_book::charge(const std::string& server) { return ++strikes_[server] == limit_; }

int strike_book::strikes(const std::string& server) const {
  auto it = strikes_.find(server);
  return it == strikes_.end() ? 0 : it->second;
}

}  // namespace swarm::policy
