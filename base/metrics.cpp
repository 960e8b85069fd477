#include "base/metrics.hpp"

#include "base/json_line.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

namespace swarm {

namespace {

/// A field's value as the file has always carried it: a double to 6
/// significant digits ("%.6g", so 3.0 is the integer 3), not finite as null.
ordered_json written(const metrics_sink::value& v) {
  if (const auto* i = std::get_if<int64_t>(&v))
    return *i;
  if (const auto* d = std::get_if<double>(&v))
    return printed_number("%.6g", *d);
  if (const auto* s = std::get_if<std::string>(&v))
    return *s;
  return std::get<bool>(v);
}

std::string line_of(double t, const std::string& role, const char* event, const metrics_sink::field* first,
                    const metrics_sink::field* last) {
  ordered_json line;
  line["t"] = printed_number("%.3f", t);
  line["role"] = role;
  line["event"] = event;
  for (; first != last; ++first)
    line[first->first] = written(first->second);
  return one_line(line) + "\n";
}

}  // namespace

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
  return line_of(t, role, event, fields.begin(), fields.end());
}

std::string metrics_sink::format(double t, const std::string& role, const char* event,
                                 const std::vector<field>& fields) {
  return line_of(t, role, event, fields.data(), fields.data() + fields.size());
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
  std::string line;
  if (tags_.empty()) {
    line = format(t, role_, event, fields);
  } else {
    std::vector<field> all(fields);
    all.insert(all.end(), tags_.begin(), tags_.end());
    line = format(t, role_, event, all);
  }
  // One write per line keeps lines whole; a short write of a metrics line is not worth a retry loop.
  [[maybe_unused]] auto n = ::write(fd_, line.data(), line.size());
}

std::shared_ptr<metrics_sink> open_metrics(const std::string& path, const std::string& role) {
  return path.empty() ? std::make_shared<metrics_sink>() : std::make_shared<metrics_sink>(path, role);
}

}  // namespace swarm
