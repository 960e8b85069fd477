#include "policy/stage_lag.hpp"

#include <algorithm>

namespace swarm {

stage_watch::stage_watch(int stages)
    : steps_(static_cast<size_t>(stages), -1), at_move_(static_cast<size_t>(stages), steps_) {}

void stage_watch::observe(int stage, int64_t step) {
  if (stage < 0)
    return;
  const auto n = static_cast<size_t>(stage) + 1;
  if (n > steps_.size()) {
    steps_.resize(n, -1);
    for (auto& seen : at_move_)
      seen.resize(n, -1);
    at_move_.resize(n, steps_);
  }
  const auto s = static_cast<size_t>(stage);
  if (steps_[s] == step)
    return;
  if (steps_[s] < 0)  // first heard of: the others are measured against it from here
    for (auto& seen : at_move_)
      if (seen[s] < 0)
        seen[s] = step;
  steps_[s] = step;
  at_move_[s] = steps_;
}

std::pair<int64_t, int> stage_watch::gained_on(int stage) const {
  std::pair<int64_t, int> most{0, stage};
  if (stage < 0 || stage >= static_cast<int>(steps_.size()) || steps_[static_cast<size_t>(stage)] < 0)
    return most;
  const auto& then = at_move_[static_cast<size_t>(stage)];
  const int64_t here = steps_[static_cast<size_t>(stage)];
  for (size_t other = 0; other < steps_.size(); ++other) {
    if (static_cast<int>(other) == stage || then[other] < 0)
      continue;  // a stage first heard of later is no measure
    // A stage behind this one that catches up is draining rounds it owed, not
    // outpacing one that stands still: its steps count from where it draws level.
    const int64_t gained = steps_[other] - std::max(then[other], here);
    if (gained > most.first)
      most = {gained, static_cast<int>(other)};
  }
  return most;
}

std::optional<stage_lag> stage_watch::stalled(int64_t allowed) const {
  std::optional<stage_lag> worst;
  for (int s = 0; s < static_cast<int>(steps_.size()); ++s) {
    const auto [gained, leader] = gained_on(s);
    if (gained > allowed && (!worst || gained > worst->gained))
      worst = stage_lag{s, steps_[static_cast<size_t>(s)], leader, gained};
  }
  return worst;
}

std::string stage_watch::steps_text() const {
  std::string out;
  for (size_t s = 0; s < steps_.size(); ++s)
    out += (s ? "/" : "") + (steps_[s] < 0 ? std::string{"?"} : std::to_string(steps_[s]));
  return out;
}

bool warn_about_lag(int64_t gained, int64_t last_warned, int64_t allowed) {
  return last_warned == 0 ? gained > allowed : gained >= last_warned + allowed;
}

}  // namespace swarm
