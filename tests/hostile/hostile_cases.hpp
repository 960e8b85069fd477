#pragma once
// What a hostile peer sends (issue #46): for every message of every public
// interface a peer can reach, messages no honest peer sends: garbage payloads,
// out-of-range and malformed fields, huge terms and steps, orders only the
// coordinator's process may give, reports in other servers' names, replays.
// Pure over the handles it is given and a seed, so the hostile peer program
// (tests/hostile/hostile_peer.cpp) and a fuzz target can share it.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/message.hpp>

namespace swarm::hostile {

/// The handles a stranger learns by asking the coordinator, and its own bait.
struct targets {
  caf::actor coordinator;
  caf::actor averager;
  std::vector<caf::actor> servers;      ///< stage servers, with their stage and id below
  std::vector<uint32_t> server_stages;  ///< parallel to servers
  std::vector<std::string> server_ids;  ///< parallel to servers
  std::vector<caf::actor> doors;        ///< one per server (may be null)
  caf::actor bait;                      ///< the stranger's own actor: named as reload source, round member, coordinator
  std::string bait_endpoint;            ///< "host:port" where bait is published
  uint64_t config_hash = 0;             ///< the swarm's (so some messages pass the first check)
};

struct message_case {
  std::string interface;  ///< coordinator, averager, server, door
  std::string what;       ///< e.g. "move order with term 2^63-1"
  caf::actor target;
  caf::message msg;
};

/// Every case once, in a random order and with random fields drawn from `rng`.
[[nodiscard]] std::vector<message_case> cases(const targets& t, std::mt19937_64& rng);

}  // namespace swarm::hostile
