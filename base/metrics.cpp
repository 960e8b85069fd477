#include "base/metrics.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace swarm {

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_value(std::string& out, const metrics_sink::value& v) {
  if (auto i = std::get_if<int64_t>(&v)) {
    out += std::to_string(*i);
  } else if (auto d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d)) {
      out += "null";  // JSON has no NaN; readers see a missing number
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", *d);
      out += buf;
    }
  } else if (auto s = std::get_if<std::string>(&v)) {
    append_json_string(out, *s);
  } else {
    out += std::get<bool>(v) ? "true" : "false";
  }
}

metrics_sink::metrics_sink(const std::string& path, std::string role) : role_(std::move(role)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot open metrics file '" + path + "': " + std::strerror(errno));
}

metrics_sink::~metrics_sink() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::string metrics_sink::format(double t, const std::string& role, const char* event,
                                 std::initializer_list<field> fields) {
  char tbuf[32];
  std::snprintf(tbuf, sizeof tbuf, "%.3f", t);
  std::string line = std::string{"{\"t\": "} + tbuf + ", \"role\": ";
  append_json_string(line, role);
  line += ", \"event\": ";
  append_json_string(line, event);
  for (const auto& [key, val] : fields) {
    line += ", ";
    append_json_string(line, key);
    line += ": ";
    append_value(line, val);
  }
  line += "}\n";
  return line;
}

void metrics_sink::note(const char* event, std::initializer_list<field> fields) {
  if (observer_)
    observer_(unix_seconds(), event, fields);
}

void metrics_sink::emit(const char* event, std::initializer_list<field> fields) {
  const double t = unix_seconds();
  if (observer_)
    observer_(t, event, fields);
  if (fd_ < 0)
    return;
  const auto line = format(t, role_, event, fields);
  // One write per line keeps lines whole; a short write of a metrics line is not worth a retry loop.
  [[maybe_unused]] auto n = ::write(fd_, line.data(), line.size());
}

std::shared_ptr<metrics_sink> open_metrics(const std::string& path, const std::string& role) {
  return path.empty() ? std::make_shared<metrics_sink>() : std::make_shared<metrics_sink>(path, role);
}

} // namespace swarm
