#include "observe/exposition.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <prometheus/text_serializer.h>

namespace swarm {

namespace {

prometheus::Labels labels_of(const prometheus::ClientMetric& m) {
  prometheus::Labels out;
  for (const auto& l : m.label)
    out.emplace(l.name, l.value);
  return out;
}

}  // namespace

exposition::family& exposition::declare(const char* name, const char* help, prometheus::MetricType type) {
  family f;
  f.declared.name = name;
  f.declared.help = help;
  f.declared.type = type;
  if (type == prometheus::MetricType::Counter)
    f.counters = &prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
  else if (type == prometheus::MetricType::Gauge)
    f.gauges = &prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  return families_.emplace_back(std::move(f));
}

void exposition::counter(const char* name, const char* help) { declare(name, help, prometheus::MetricType::Counter); }
void exposition::gauge(const char* name, const char* help) { declare(name, help, prometheus::MetricType::Gauge); }
void exposition::summary(const char* name, const char* help) { declare(name, help, prometheus::MetricType::Summary); }

void exposition::add(const prometheus::Labels& labels, double value) {
  if (families_.empty())
    throw std::logic_error("exposition: a sample before its family");
  auto& f = families_.back();
  const double v = std::isfinite(value) ? value : 0.0;
  if (f.counters)
    f.counters->Add(labels).Increment(v);  // a fresh counter: its value is what it is incremented by
  else if (f.gauges)
    f.gauges->Add(labels).Set(v);
  else
    throw std::logic_error("exposition: " + f.declared.name + " takes add_summary");
  f.place.emplace(labels, f.place.size());
}

void exposition::add_summary(const prometheus::Labels& labels, uint64_t count, double sum) {
  if (families_.empty() || families_.back().declared.type != prometheus::MetricType::Summary)
    throw std::logic_error("exposition: a summary sample before its summary");
  auto& f = families_.back();
  prometheus::ClientMetric m;
  for (const auto& [name, value] : labels)
    m.label.push_back({name, value});
  m.summary.sample_count = count;
  m.summary.sample_sum = std::isfinite(sum) ? sum : 0.0;
  f.declared.metric.push_back(std::move(m));
  f.place.emplace(labels, f.place.size());
}

std::string exposition::text() const {
  auto collected = registry_.Collect();
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families_.size());
  for (const auto& f : families_) {
    auto family = f.declared;
    const auto it = std::find_if(collected.begin(), collected.end(),
                                 [&](const prometheus::MetricFamily& c) { return c.name == family.name; });
    if (it != collected.end())
      family.metric = std::move(it->metric);
    const auto place = [&](const prometheus::ClientMetric& m) { return f.place.at(labels_of(m)); };
    std::sort(family.metric.begin(), family.metric.end(),
              [&](const auto& a, const auto& b) { return place(a) < place(b); });
    out.push_back(std::move(family));
  }
  return prometheus::TextSerializer().Serialize(out);
}

}  // namespace swarm
