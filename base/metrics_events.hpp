#pragma once
// The metrics events every role writes (base/metrics.hpp), documented once:
// docs/metrics.md's table is generated from this list.

#include <string>
#include <vector>

namespace swarm {

struct metrics_event_doc {
  const char* name;
  const char* roles;   ///< who writes it, e.g. "trainer, local"
  const char* fields;  ///< markdown: its fields and when it is written
};

[[nodiscard]] const std::vector<metrics_event_doc>& metrics_events();

/// The table of docs/metrics.md (`swarm --help-metrics-markdown`).
[[nodiscard]] std::string metrics_events_markdown();

}  // namespace swarm
