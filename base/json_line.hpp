#pragma once
// JSON as swarm writes it (metrics lines, /api/status, the simulator's
// events), all through nlohmann-json. Two things it keeps from the writer it
// replaced, because readers depend on them:
// - one line with ", " and ": " between items: scripts and tests grep the
//   metrics file for `"event": "step"`;
// - numbers with the value and kind (integer or not) their printf format gave
//   them: Python reads `3` as an int and `3.0` as a float.
// Keys stay in the order written (nlohmann::ordered_json).

#include <string>

#include <nlohmann/json.hpp>

namespace swarm {

using ordered_json = nlohmann::ordered_json;

/// `j` on one line, without a newline at the end. Bytes that are not UTF-8
/// become U+FFFD: a metrics line is written, never an exception thrown.
[[nodiscard]] std::string one_line(const ordered_json& j);

/// `x` as printf's `format` (one double conversion: "%.3f", "%.6g") prints
/// it: an integer when that text is one ("%.6g" of 3.0 is "3"), else a double
/// of that text's value; null when `x` is not finite (JSON has no NaN).
[[nodiscard]] ordered_json printed_number(const char* format, double x);

}  // namespace swarm
