#include "policy/attempt.hpp"

#include <algorithm>

namespace swarm::policy {

namespace {

bool listed(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

bool asks(const attempt_config& cfg, const attempt_history& h) {
  return !cfg.pinned && static_cast<int64_t>(h.busy.size()) < cfg.busy_retries;
}

bool attempts_left(const attempt_config& cfg, const attempt_history& h) { return h.attempts < cfg.max_attempts; }

std::optional<std::string> next_server(const attempt_config& cfg, const attempt_history& h, stage_router& router,
                                       static_pin& pin, double now, std::mt19937_64& rng,
                                       const std::function<std::vector<std::string>()>& candidates) {
  if (cfg.pinned) {
    if (!pin.pinned().empty())
      return pin.pinned();
    return pin.pin(candidates(), rng);
  }
  // Servers that failed it, and while it still asks, those that were busy;
  // only those the router knows (the others cannot be chosen anyway).
  std::vector<std::string> exclude;
  const auto avoid = [&](const std::vector<std::string>& ids) {
    for (const auto& id : ids)
      if (router.contains(id) && !listed(exclude, id))
        exclude.push_back(id);
  };
  avoid(h.tried);
  if (asks(cfg, h))
    avoid(h.busy);
  const bool keep_preferred = !h.preferred.empty() && router.contains(h.preferred) &&
                              !router.banned(h.preferred, now) && !listed(exclude, h.preferred);
  auto pick = keep_preferred ? router.choose_backward(h.preferred, h.samples, now, rng, exclude)
                             : router.choose(h.samples, h.backward, now, rng, exclude);
  if (!pick && !exclude.empty())  // every eligible server already failed it: try one again rather than drop it
    pick = router.choose(h.samples, h.backward, now, rng);
  return pick;
}

void on_busy(attempt_history& h, stage_router& router, const std::string& server) {
  router.release(server);
  h.busy.push_back(server);
}

void on_ended(attempt_history& h, stage_router& router, const std::string& server) {
  router.release(server);
  h.tried.push_back(server);
}

}  // namespace swarm::policy
