#pragma once
// The averager's two halves and what one asks of the other: the messages it
// takes (actors/averager.cpp) and a stage's rounds (actors/averager_rounds.cpp:
// start, exclusion, end, reload orders).

#include <cstdint>
#include <optional>

#include "actors/averager.hpp"

namespace swarm::averaging {

using self_ptr = averager_actor::stateful_pointer<averager_state>;
using round_t = averager_state::round;

/// The rank of member `a` in round `r`; nullopt when it is no member.
[[nodiscard]] std::optional<size_t> rank_of(const round_t& r, const caf::actor_addr& a);
/// Records the stage's position and servers in etcd when they changed (elected only).
void record_stage(self_ptr self, uint32_t stage);
/// Orders `whom` to copy the state of an up-to-date server of its stage.
void order_reload(self_ptr self, averager_state::server& whom, const char* reason);
/// Tells every member of the running round that rank `rank` is out.
void exclude(self_ptr self, uint32_t stage, round_t& r, size_t rank, const char* why);
/// Ends the running round once every member finished or was excluded (or `force`).
void maybe_finish(self_ptr self, uint32_t stage, bool force);
/// Evicts server `who` of `stage` (actors/averager.cpp): its results
/// disagreed with its rounds' majority evict_after_dissents times in a row,
/// or a majority named it an outlier evict_after_outliers times (`outlier`).
void evict(self_ptr self, const caf::actor_addr& who, uint32_t stage, bool outlier = false);
/// Starts a round of `stage` when its servers hold a batch and none runs.
void maybe_start(self_ptr self, uint32_t stage);

}  // namespace swarm::averaging
