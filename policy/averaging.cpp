#include "policy/averaging.hpp"

#include <algorithm>
#include <numeric>

namespace swarm::policy {

round_plan plan_round(const std::vector<member_view>& servers, const stage_position& stage, int64_t target_batch_size) {
  round_plan plan;
  bool leaving_with_gradient = false, catching_up = false;
  for (size_t i = 0; i < servers.size(); ++i) {
    const auto& s = servers[i];
    if (!s.reported || (s.leaving && s.samples == 0))
      continue;  // a server stopping with nothing to hand in is about to exit
    catching_up = catching_up || s.catching_up;
    if (s.step == stage.step && s.hash == stage.hash) {
      plan.members.push_back(i);
      plan.samples += s.samples;
      leaving_with_gradient = leaving_with_gradient || (s.leaving && s.samples > 0);
    } else if (s.step < stage.step || s.hash != stage.hash) {
      plan.stale.push_back(i);
    }
  }
  std::sort(plan.members.begin(), plan.members.end(),
            [&](size_t a, size_t b) { return servers[a].id < servers[b].id; });
  // A member stopped on purpose would otherwise wait for a full batch that may
  // never come (a whole cluster stopping): its gradient goes in now, a short step.
  plan.start = !plan.members.empty() &&
               ((plan.samples >= static_cast<uint64_t>(std::max<int64_t>(1, target_batch_size)) && !catching_up) ||
                leaving_with_gradient);
  return plan;
}

namespace {

size_t count_of(const std::vector<stage_position>& results, const stage_position& p) {
  return static_cast<size_t>(std::count_if(
      results.begin(), results.end(), [&](const stage_position& o) { return o.step == p.step && o.hash == p.hash; }));
}

}  // namespace

std::optional<stage_position> majority(const std::vector<stage_position>& results, uint64_t round_step) {
  std::optional<stage_position> best;
  size_t best_count = 0;
  for (const auto& r : results) {
    const size_t count = count_of(results, r);
    if (r.step == round_step + 1 && count > best_count) {
      best = r;
      best_count = count;
    }
  }
  return best;
}

std::vector<size_t> dissenters(const std::vector<stage_position>& results, const stage_position& agreed) {
  std::vector<size_t> out;
  if (2 * count_of(results, agreed) <= results.size())
    return out;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].step != agreed.step || results[i].hash != agreed.hash)
      out.push_back(i);
  return out;
}

stage_position reported_position(const std::vector<member_view>& servers, const stage_position& known) {
  std::vector<stage_position> reports;
  for (const auto& s : servers)
    if (s.reported && s.step >= known.step)  // behind a recorded position: a server to reload, not a vote
      reports.push_back({s.step, s.hash});
  stage_position best = known;
  size_t best_count = 0;
  for (const auto& r : reports) {
    const size_t count = count_of(reports, r);
    if (count > best_count || (count == best_count && r.step > best.step)) {
      best = r;
      best_count = count;
    }
  }
  return best;
}

bool state_held(const std::vector<member_view>& live, const std::vector<bool>& awaited,
                const stage_position& position) {
  for (size_t i = 0; i < live.size(); ++i) {
    const auto& v = live[i];
    if (!v.reported || awaited.at(i) || (v.step == position.step && v.hash == position.hash))
      return true;
  }
  return false;
}

}  // namespace swarm::policy
