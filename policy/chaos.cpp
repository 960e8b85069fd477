#include "policy/chaos.hpp"

namespace swarm::policy {

std::optional<chaos_mode> chaos_mode_of(const std::string& word) {
  if (word == "none")
    return chaos_mode::none;
  if (word == "kill")
    return chaos_mode::kill;
  if (word == "stop")
    return chaos_mode::stop;
  if (word == "mixed")
    return chaos_mode::mixed;
  return std::nullopt;
}

std::optional<chaos_hit> choose_victim(const std::vector<chaos_target>& targets, int stage, chaos_mode mode,
                                       std::mt19937_64& rng) {
  if (mode == chaos_mode::none)
    return std::nullopt;
  std::vector<int64_t> fitting;
  for (const auto& t : targets)
    if (stage < 0 || t.stage == stage)
      fitting.push_back(t.id);
  if (fitting.empty())
    return std::nullopt;
  // The victim first, then (mixed) the coin: the order a seed's replay depends on.
  const auto id = fitting[std::uniform_int_distribution<size_t>(0, fitting.size() - 1)(rng)];
  const bool kill = mode == chaos_mode::kill || (mode == chaos_mode::mixed && std::bernoulli_distribution(0.5)(rng));
  return chaos_hit{id, kill};
}

int choose_wipe_stage(int stage, int stages, std::mt19937_64& rng) {
  return stage >= 0 ? stage : std::uniform_int_distribution<int>(0, stages - 1)(rng);
}

coordinator_verdict after_coordinator_death(const coordinator_supervision& s, int quick_deaths, double alive_s,
                                            bool by_chaos) {
  coordinator_verdict v;
  const bool quick = !by_chaos && alive_s < s.quick_s;
  v.quick_deaths = quick ? quick_deaths + 1 : 0;
  v.give_up = v.quick_deaths >= s.give_up_after;
  v.restart_in_s = quick ? s.quick_restart_delay_s : 0;
  return v;
}

}  // namespace swarm::policy
