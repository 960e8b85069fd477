#include "base/json_line.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace swarm {

std::string one_line(const ordered_json& j) {
  // nlohmann's indented layout with an indent of 0 is the one-line layout
  // with a newline after each '{', '[' and ',' and before each '}' and ']'
  // (and ": " after keys). A newline inside a string is escaped ("\n"), so
  // every newline in it is layout: after a comma it becomes a space, else
  // it goes.
  const auto text = j.dump(0, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c != '\n')
      out += c;
    else if (!out.empty() && out.back() == ',')
      out += ' ';
  }
  return out;
}

ordered_json printed_number(const char* format, double x) {
  if (!std::isfinite(x))
    return nullptr;
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  // Digits and a sign only: JSON readers take it for an integer.
  if (std::strspn(buf, "-0123456789") == std::strlen(buf))
    return static_cast<int64_t>(std::strtoll(buf, nullptr, 10));
  return std::strtod(buf, nullptr);
}

}  // namespace swarm
