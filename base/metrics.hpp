#pragma once
// The metrics file: one JSON object per line, {"t": unix seconds, "role": ...,
// "event": ..., fields...}, appended by every process of a swarm to the same
// file. Each line is one write(2) on an O_APPEND descriptor, so lines from
// concurrent processes and threads never interleave. Events are listed in docs/metrics.md.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/clock.hpp"

namespace swarm {

class metrics_sink {
public:
  using value = std::variant<int64_t, double, std::string, bool>;
  using field = std::pair<const char*, value>;

  /// A sink that drops everything (no --metrics given).
  metrics_sink() = default;
  /// Appends to `path`; throws std::runtime_error naming the path when it cannot be opened.
  metrics_sink(const std::string& path, std::string role);
  ~metrics_sink();
  metrics_sink(const metrics_sink&) = delete;
  metrics_sink& operator=(const metrics_sink&) = delete;

  void emit(const char* event, std::initializer_list<field> fields);
  /// Told only to the observer, never written: what the status page needs
  /// too often for the file (progress reports, trainer reports).
  void note(const char* event, std::initializer_list<field> fields);

  /// Sees every event emitted or noted, on the emitting thread (so it must be
  /// quick). Set once, before the sink is shared.
  using observer = std::function<void(double t, const char* event, std::initializer_list<field> fields)>;
  void observe(observer o) { observer_ = std::move(o); }

  /// A field every line written from now on carries (a server lying on
  /// purpose names its --fault so). Set once, before the sink is shared.
  void tag(const char* key, std::string v) { tags_.emplace_back(key, std::move(v)); }

  /// The JSON line emit() would write at time `t` (exposed for tests): `t`
  /// to the millisecond, doubles to 6 significant digits, not finite as null.
  [[nodiscard]] static std::string format(double t, const std::string& role, const char* event,
                                          std::initializer_list<field> fields);
  /// The same for fields gathered in a vector (the simulator's summaries).
  [[nodiscard]] static std::string format(double t, const std::string& role, const char* event,
                                          const std::vector<field>& fields);

private:
  int fd_ = -1;
  std::string role_;
  observer observer_;
  std::vector<field> tags_;
};

/// A sink appending to `path` as `role`, or one that drops everything when `path` is empty.
[[nodiscard]] std::shared_ptr<metrics_sink> open_metrics(const std::string& path, const std::string& role);

}  // namespace swarm
