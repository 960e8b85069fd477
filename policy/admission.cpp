#include "policy/admission.hpp"

namespace swarm::policy {

void admission::lapse(double now) {
  // Tickets are handed out in time order, so the oldest grants come first.
  while (!granted_.empty() && granted_.begin()->second + cfg_.hold_s <= now)
    granted_.erase(granted_.begin());
}

std::optional<uint64_t> admission::grant(double now) {
  lapse(now);
  if (cfg_.max_outstanding > 0 && static_cast<int64_t>(granted_.size()) >= cfg_.max_outstanding)
    return std::nullopt;
  const uint64_t ticket = ++next_ticket_;
  if (cfg_.max_outstanding > 0)
    granted_.emplace(ticket, now);
  return ticket;
}

void admission::done(uint64_t ticket) { granted_.erase(ticket); }

int64_t admission::held(double now) const {
  int64_t n = 0;
  for (const auto& [ticket, at] : granted_)
    n += at + cfg_.hold_s > now ? 1 : 0;
  return n;
}

}  // namespace swarm::policy
