#include "policy/backoff.hpp"

#include <algorithm>
#include <cmath>

namespace swarm::policy {

std::chrono::milliseconds backoff_delay(const backoff_settings& s, int failures, double draw) {
  if (failures <= 0)
    return std::chrono::milliseconds{0};
  const double cap = static_cast<double>(s.cap.count());
  // pow of a large exponent is inf, which the cap takes: no overflow for a long outage.
  const double grown = static_cast<double>(s.first.count()) * std::pow(std::max(1.0, s.factor), failures - 1);
  const double base = std::min(cap, grown);
  const double d = draw > 1.0 ? 1.0 : (draw >= 0.0 ? draw : 0.0);  // NaN too: no jitter
  const double jitter = std::clamp(s.jitter, 0.0, 1.0) * d;
  return std::chrono::milliseconds{static_cast<int64_t>(std::llround(base * (1.0 - jitter)))};
}

}  // namespace swarm::policy
