#pragma once
// The one reader of metrics events: a line of a metrics file (the run
// summary reads them back) and an event as a sink's observer is told it (the
// status board hears them live) become the same value, with the same typed
// look-ups, so the two cannot read a field differently.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "base/json_line.hpp"
#include "base/metrics.hpp"

namespace swarm {

class metrics_event {
public:
  /// An event as metrics_sink's observer hears it (exact values: no rounding).
  metrics_event(double t, std::string name, std::initializer_list<metrics_sink::field> fields);
  /// One line of a metrics file; nullopt unless it is a JSON object with a
  /// number "t" and a string "event" (a torn or foreign line is skipped).
  [[nodiscard]] static std::optional<metrics_event> parse(std::string_view line);

  [[nodiscard]] double t() const { return t_; }
  [[nodiscard]] const std::string& name() const { return name_; }

  /// An integer field: an integer, a finite double truncated, a bool as 0 or
  /// 1; `fallback` when missing or anything else.
  [[nodiscard]] int64_t get_int(const char* key, int64_t fallback = 0) const;
  /// A number field; `fallback` when missing, not finite (null in a file) or
  /// not a number.
  [[nodiscard]] double get_double(const char* key, double fallback = 0) const;
  /// A string field, an integer as its decimal digits; empty when missing or anything else.
  [[nodiscard]] std::string get_string(const char* key) const;

  /// The fields (of a parsed line: all its keys, "t", "role" and "event" too).
  [[nodiscard]] const ordered_json& fields() const { return fields_; }

private:
  metrics_event(double t, std::string name, ordered_json fields);
  [[nodiscard]] const ordered_json* find(const char* key) const;

  double t_;
  std::string name_;
  ordered_json fields_;
};

}  // namespace swarm
