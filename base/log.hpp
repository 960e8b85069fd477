#pragma once
// One named spdlog logger per actor kind, all writing to stderr with the
// process's tag (e.g. "server s1.0") so lines from a whole cluster stay readable.

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace swarm {

/// Sets level and line format of every logger of this process.
void setup_logging(const std::string& process_tag, const std::string& level);

/// The logger called `name`, created on first use.
[[nodiscard]] std::shared_ptr<spdlog::logger> get_logger(const std::string& name);

}  // namespace swarm
