#pragma once
// A folder the program may empty and start afresh because it made it: it
// holds a marker file the program wrote. Anything else at that path (a
// user's folder that happens to share the name, a link, a file) is refused,
// never deleted: --control-replicas used to delete `<metrics folder>/etcd`
// whatever it held.
#include <string>

#include "base/error.hpp"

namespace swarm {

/// Makes `dir` an empty folder holding only the marker `marker` (a file
/// name): when `dir` is missing, an empty folder, or a folder holding
/// `marker`, its contents are deleted first; otherwise BAD_CONFIG saying why,
/// with `dir` untouched.
[[nodiscard]] error reset_owned_folder(const std::string& dir, const std::string& marker);

}  // namespace swarm
