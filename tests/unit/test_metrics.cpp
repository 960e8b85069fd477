// The metrics line format that tests, benchmarks and plots read.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "base/metrics.hpp"
#include "base/metrics_reader.hpp"
#include "data/corpus.hpp"

using swarm::metrics_event;
using swarm::metrics_sink;

TEST_CASE("metrics lines are one JSON object each", "[metrics]") {
  const auto line = metrics_sink::format(
      12.5, "trainer", "step",
      {{"step", int64_t{3}}, {"loss", 2.5}, {"server", std::string{"s\"1\n"}}, {"ok", true}, {"nan", std::nan("")}});
  // ", " and ": " between items: scripts and tests grep for `"event": "step"`.
  CHECK(line ==
        "{\"t\": 12.5, \"role\": \"trainer\", \"event\": \"step\", \"step\": 3, \"loss\": 2.5, "
        "\"server\": \"s\\\"1\\n\", \"ok\": true, \"nan\": null}\n");
}

TEST_CASE("metrics numbers keep the value and kind their printf format gave them", "[metrics]") {
  // Doubles to 6 significant digits ("%.6g"): an integral one is an integer
  // (Python reads 3, not 3.0), t to the millisecond and always a float.
  CHECK(metrics_sink::format(7, "r", "e", {{"a", 3.0}, {"b", 0.1234567}, {"c", 1.5e-7}, {"d", 123456789.0}}) ==
        "{\"t\": 7.0, \"role\": \"r\", \"event\": \"e\", \"a\": 3, \"b\": 0.123457, \"c\": 1.5e-07, "
        "\"d\": 123457000.0}\n");
  CHECK(metrics_sink::format(1700000000.1234, "r", "e", {}) ==
        "{\"t\": 1700000000.123, \"role\": \"r\", \"event\": \"e\"}\n");
  // The simulator's summaries gather their fields in a vector: the same line.
  const std::vector<metrics_sink::field> fields{{"a", int64_t{1}}, {"b", std::string{"x"}}};
  CHECK(metrics_sink::format(1, "sim", "e", fields) ==
        metrics_sink::format(1, "sim", "e", {{"a", int64_t{1}}, {"b", std::string{"x"}}}));
}

TEST_CASE("a metrics event reads the same from a file line and from an observer", "[metrics]") {
  const auto line = metrics_sink::format(5.25, "coordinator", "round_end",
                                         {{"stage", int64_t{2}},
                                          {"seconds", 1.5},
                                          {"server", std::string{"s-1"}},
                                          {"applied", true},
                                          {"nan", std::nan("")}});
  const auto parsed = metrics_event::parse(line);
  REQUIRE(parsed);
  const metrics_event heard(5.25, "round_end",
                            {{"stage", int64_t{2}},
                             {"seconds", 1.5},
                             {"server", std::string{"s-1"}},
                             {"applied", true},
                             {"nan", std::nan("")}});
  for (const auto* e : {&*parsed, &heard}) {
    CHECK(e->t() == 5.25);
    CHECK(e->name() == "round_end");
    CHECK(e->get_int("stage") == 2);
    CHECK(e->get_double("stage") == 2.0);
    CHECK(e->get_double("seconds") == 1.5);
    CHECK(e->get_int("seconds") == 1);
    CHECK(e->get_int("applied") == 1);
    CHECK(e->get_string("server") == "s-1");
    CHECK(e->get_string("stage") == "2");
    CHECK(e->get_double("nan", -1) == -1);  // null in the file, NaN heard: neither is a number
    CHECK(e->get_int("missing", -7) == -7);
    CHECK(e->get_string("missing").empty());
  }
  CHECK_FALSE(metrics_event::parse("not json"));
  CHECK_FALSE(metrics_event::parse("{\"t\": 1, \"role\": \"x\", \"event\": \"st"));  // torn
  CHECK_FALSE(metrics_event::parse("{\"role\": \"x\", \"event\": \"step\"}"));       // no time
  CHECK_FALSE(metrics_event::parse("[1, 2]"));
}

TEST_CASE("metrics sinks append whole lines", "[metrics]") {
  const std::string path = "/tmp/swarm-test-metrics.jsonl";
  std::remove(path.c_str());
  {
    metrics_sink a(path, "server"), b(path, "trainer");
    for (int i = 0; i < 100; ++i) {
      a.emit("x", {{"i", int64_t{i}}});
      b.emit("y", {{"i", int64_t{i}}});
    }
  }
  std::ifstream in(path);
  std::string l;
  int n = 0;
  while (std::getline(in, l)) {
    CHECK(l.front() == '{');
    CHECK(l.back() == '}');
    ++n;
  }
  CHECK(n == 200);
  CHECK_THROWS_WITH(metrics_sink("/nonexistent/dir/m.jsonl", "x"), Catch::Contains("/nonexistent/dir/m.jsonl"));
}

TEST_CASE("a missing or too small corpus is a clear error", "[corpus]") {
  CHECK_THROWS_WITH(swarm::corpus::load("/nonexistent/corpus", 10), Catch::Contains("does not exist"));
  const std::string path = "/tmp/swarm-test-corpus.txt";
  std::ofstream(path) << "abc";
  CHECK_THROWS_WITH(swarm::corpus::load(path, 10), Catch::Contains("fewer than"));
  std::ofstream(path) << "hello world, hello swarm";
  auto text = swarm::corpus::load(path, 10);
  std::mt19937_64 rng(1);
  auto mb = *swarm::sample_microbatch(text, 3, 5, rng);
  REQUIRE(mb.inputs.size() == 15);
  for (size_t i = 0; i < 15; ++i) {
    // targets are the inputs shifted by one byte within each window
    if (i % 5 != 4)
      CHECK(mb.targets[i] == mb.inputs[i + 1]);
    CHECK(mb.inputs[i] >= 0);
    CHECK(mb.inputs[i] < 256);
  }
}
