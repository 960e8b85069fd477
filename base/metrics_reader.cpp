#include "base/metrics_reader.hpp"

#include <cmath>
#include <utility>
#include <variant>

namespace swarm {

namespace {

ordered_json exact(const metrics_sink::value& v) {
  return std::visit([](const auto& x) { return ordered_json(x); }, v);
}

}  // namespace

metrics_event::metrics_event(double t, std::string name, ordered_json fields)
    : t_(t), name_(std::move(name)), fields_(std::move(fields)) {}

metrics_event::metrics_event(double t, std::string name, std::initializer_list<metrics_sink::field> fields)
    : t_(t), name_(std::move(name)), fields_(ordered_json::object()) {
  for (const auto& [key, value] : fields)
    fields_[key] = exact(value);
}

std::optional<metrics_event> metrics_event::parse(std::string_view line) {
  auto j = ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return std::nullopt;
  const auto t = j.find("t");
  const auto event = j.find("event");
  if (t == j.end() || !t->is_number() || event == j.end() || !event->is_string())
    return std::nullopt;
  const double at = t->get<double>();
  std::string name = event->get<std::string>();
  return metrics_event(at, std::move(name), std::move(j));
}

const ordered_json* metrics_event::find(const char* key) const {
  const auto it = fields_.find(key);
  return it == fields_.end() ? nullptr : &*it;
}

int64_t metrics_event::get_int(const char* key, int64_t fallback) const {
  const auto* v = find(key);
  if (!v)
    return fallback;
  if (v->is_number_integer())
    return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    return std::isfinite(d) ? static_cast<int64_t>(d) : fallback;
  }
  if (v->is_boolean())
    return v->get<bool>() ? 1 : 0;
  return fallback;
}

double metrics_event::get_double(const char* key, double fallback) const {
  const auto* v = find(key);
  if (!v || !v->is_number())
    return fallback;
  const double d = v->get<double>();
  return std::isfinite(d) ? d : fallback;
}

std::string metrics_event::get_string(const char* key) const {
  const auto* v = find(key);
  if (!v)
    return {};
  if (v->is_string())
    return v->get<std::string>();
  if (v->is_number_unsigned())
    return std::to_string(v->get<uint64_t>());
  if (v->is_number_integer())
    return std::to_string(v->get<int64_t>());
  return {};
}

}  // namespace swarm
