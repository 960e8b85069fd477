#pragma once
// What a leading coordinator keeps in etcd for its successor (--control,
// apps/control.hpp), one JSON value per key under the swarm's prefix, so that
// `etcdctl get --prefix swarm/` shows it as it is:
//
//   state/stage/<i>    {"step": 12, "hash": "1234...", "members": ["s-1", ...]}
//                      the stage's position (optimizer step and parameter hash
//                      of its last applied round) and its servers
//   state/rebalancer   {"last_load_move": <unix s>, "movers": {"s-1": <unix s>}}
//                      when the last periodic load move was weighed, and when
//                      each mover arrived (its cooldown runs from then)
//
// A value of the wrong shape (someone else's key, an older format) is refused
// with the reason, and the successor starts that part from nothing.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace swarm {

struct stage_record {
  uint64_t step = 0;
  uint64_t hash = 0;
  std::vector<std::string> members;
  bool operator==(const stage_record& o) const { return step == o.step && hash == o.hash && members == o.members; }
};

struct rebalancer_record {
  double last_load_move = 0;             ///< unix seconds; 0: none yet
  std::map<std::string, double> movers;  ///< server id -> unix seconds it arrived on its stage by a move
};

[[nodiscard]] std::string stage_key(uint32_t stage);
inline const char* rebalancer_key = "state/rebalancer";

[[nodiscard]] std::string encode_record(const stage_record& r);
[[nodiscard]] std::string encode_record(const rebalancer_record& r);
/// The record, or nullopt with `why` set.
[[nodiscard]] std::optional<stage_record> decode_stage_record(const std::string& json, std::string& why);
[[nodiscard]] std::optional<rebalancer_record> decode_rebalancer_record(const std::string& json, std::string& why);

}  // namespace swarm
