#pragma once
// Which coordinator a node follows under --control: the one etcd names. Its
// term is etcd's creation revision of the leader's key, so every new leader's
// is higher, except after etcd was restored from an older snapshot: then
// etcd names leaders of lower terms than the nodes saw, and a node that
// followed only higher terms refused every leader for as long as it ran.
//
// Pure: the caller reads etcd's watch and asks etcd when told to confirm.

#include <cstdint>

namespace swarm::policy {

enum class follow {
  stay,     ///< the joined leader is the one etcd names (or etcd named none yet)
  rejoin,   ///< etcd names a newer leader: join it
  confirm,  ///< etcd's watch names a lower term: a restore, or a watch not caught up yet; ask etcd itself
};

/// What a node joined to the leader of term `joined` does when etcd's watch
/// names a leader of term `named` (0: none named yet).
[[nodiscard]] follow follow_leader(int64_t named, int64_t joined);

}  // namespace swarm::policy
