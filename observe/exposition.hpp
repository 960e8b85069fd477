#pragma once
// One scrape of /metrics, written by prometheus-cpp: counters and gauges go
// through a fresh registry (names and labels checked, numbers and label
// values written and escaped by its text serializer). Two things are put
// back the way /metrics had them before prometheus-cpp, for people and diffs:
// - order: Registry::Collect() lists every counter family before every
//   gauge and a family's samples in hash order; they come out in the order
//   declared and added (by subject, stages ascending);
// - a family without samples keeps its HELP and TYPE (Collect() drops it).
// A summary is given to the serializer as collected data: prometheus::Summary
// only accumulates observations one by one, and the caller has the sum and
// count already.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

namespace swarm {

class exposition {
public:
  void counter(const char* name, const char* help);
  void gauge(const char* name, const char* help);
  void summary(const char* name, const char* help);

  /// A sample of the family declared last (a counter or gauge); a value not
  /// finite as 0, as /metrics always wrote it.
  void add(const prometheus::Labels& labels, double value);
  /// A sample of the summary declared last.
  void add_summary(const prometheus::Labels& labels, uint64_t count, double sum);

  /// The text exposition 0.0.4 of everything declared.
  [[nodiscard]] std::string text() const;

private:
  struct family {
    prometheus::MetricFamily declared;  ///< name, help, type; a summary's samples too
    prometheus::Family<prometheus::Counter>* counters = nullptr;
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    std::map<prometheus::Labels, size_t> place;  ///< each sample's place in the output
  };
  family& declare(const char* name, const char* help, prometheus::MetricType type);

  prometheus::Registry registry_;
  std::vector<family> families_;
};

}  // namespace swarm
