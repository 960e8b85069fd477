#pragma once
// Peer choice for the walking skeleton: the server with the fewest requests in
// flight. Pure: no CAF, no clock; the caller passes a rotating counter so ties
// spread over the servers instead of always hitting the first one.
// (The SWARM policy, weighted by measured throughput, replaces it next.)

#include <cstdint>
#include <optional>
#include <vector>

namespace swarm::policy {

/// Index into `in_flight` of a least-loaded server; nullopt when there is none.
/// Among equally loaded servers picks the (rotation mod count)-th.
[[nodiscard]] inline std::optional<size_t> least_in_flight(const std::vector<int>& in_flight, uint64_t rotation) {
  if (in_flight.empty())
    return std::nullopt;
  int best = in_flight[0];
  for (int n : in_flight)
    best = n < best ? n : best;
  std::vector<size_t> ties;
  for (size_t i = 0; i < in_flight.size(); ++i)
    if (in_flight[i] == best)
      ties.push_back(i);
  return ties[rotation % ties.size()];
}

} // namespace swarm::policy
