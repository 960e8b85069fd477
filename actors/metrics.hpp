#pragma once
// The metrics file: one JSON object per line, {"t": unix seconds, "role": ...,
// "event": ..., fields...}, appended by every process of a swarm to the same
// file. Each line is one write(2) on an O_APPEND descriptor, so lines from
// concurrent processes and threads never interleave. Events are listed in README.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <variant>

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

  /// The JSON line emit() would write at time `t` (exposed for tests).
  [[nodiscard]] static std::string format(double t, const std::string& role, const char* event,
                                          std::initializer_list<field> fields);

private:
  int fd_ = -1;
  std::string role_;
};

/// A sink appending to `path` as `role`, or one that drops everything when `path` is empty.
[[nodiscard]] std::shared_ptr<metrics_sink> open_metrics(const std::string& path, const std::string& role);

} // namespace swarm
