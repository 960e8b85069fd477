#pragma once
// The stage server's checkpoints (models/checkpoint.hpp for the files).
//
// Writing: after an applied round, the member of lowest rank still in it writes
// the stage's state when one is due (--checkpoint-every). Members agree on the
// round's ranks, so one server per stage writes; when it dies, the next round's
// lowest rank takes over, and the folder's newest file tells it whether one is
// due. Two writers (members that disagree on who is gone) write the same bytes
// under the same name: harmless.
// Loading: a server that finds no live peer to copy its stage from loads the
// newest valid checkpoint of the stage instead of starting from scratch.

#include <memory>
#include <string>

#include "base/metrics.hpp"
#include "actors/stage_server.hpp"
#include "models/checkpoint.hpp"
#include "models/stage_worker.hpp"

namespace swarm::checkpointing {

/// Writes the stage's state when this server is the round's writer and one is due.
void after_round(stage_actor::stateful_pointer<stage_server_state> self);

/// A server stopped on purpose writes its stage's state when it is newer than
/// the newest checkpoint (every server of a stopping swarm may: the replicas
/// are identical, and the file name is the step), so a swarm started again
/// resumes where it stopped, not one interval earlier.
void on_stop(stage_actor::stateful_pointer<stage_server_state> self);

/// Loads the stage's newest checkpoint when it is ahead of this server's step
/// (after its stage's state was lost with a peer this server lagged behind);
/// true when loaded.
[[nodiscard]] caf::expected<bool> load_if_ahead(stage_actor::stateful_pointer<stage_server_state> self);

/// Imports the newest valid checkpoint of `worker`'s stage if its step is
/// above `after_step`; true when one was loaded (`checkpoint_load` written).
/// BAD_CONFIG: the newest fits another model.
[[nodiscard]] caf::expected<bool> load_newest(const checkpoint_settings& settings, int num_stages, uint64_t config_hash,
                                              const std::string& server_id, stage_worker& worker, metrics_sink& metrics,
                                              int64_t after_step = -1);

}  // namespace swarm::checkpointing
