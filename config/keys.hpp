#pragma once
// swarm's config keys: one table (keys.cpp), one row per key, from which come
// every flag of `swarm`, its config-file key, its per-key check, the flags the
// cluster launcher passes on (to_flags) and the docs' flag table
// (`swarm --help-markdown`, in docs/flags.md). Cross-field rules stay in
// config.cpp's validate().
//
// Adding a key: a member with its default and unit in config.hpp, a row in
// keys.cpp; then paste `swarm --help-markdown` into docs/flags.md (a test says
// when it is stale) and give the key a value in the test that sets every key.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/key_table.hpp"

namespace swarm {

/// Every key of `swarm`, in --help order.
[[nodiscard]] const std::vector<keys::row>& swarm_keys();

/// Every row of swarm_keys() bound into `c`.
[[nodiscard]] std::vector<keys::binding> bind_keys(app_config& c);

/// cpu, cuda or cuda:N. Whether this build and machine have it is the stage
/// worker's question, asked when a process starts.
[[nodiscard]] bool valid_device(const std::string& device);

/// --checkpoint-every as {steps, seconds}: "120" (steps) or "90s" / "1.5s"
/// (seconds); exactly one is > 0 when valid, both 0 when not.
[[nodiscard]] std::pair<int64_t, double> checkpoint_interval(const std::string& every);

/// "3,1" as numbers; nullopt when an item is not a whole number.
[[nodiscard]] std::optional<std::vector<int>> int_list(const std::string& text);

}  // namespace swarm
