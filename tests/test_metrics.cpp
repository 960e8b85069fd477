// The metrics line format that tests, benchmarks and plots read.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "base/metrics.hpp"
#include "data/corpus.hpp"

using swarm::metrics_sink;

TEST_CASE("metrics lines are one JSON object each", "[metrics]") {
  const auto line = metrics_sink::format(12.5, "trainer", "step",
                                         {{"step", int64_t{3}},
                                          {"loss", 2.5},
                                          {"server", std::string{"s\"1\n"}},
                                          {"ok", true},
                                          {"nan", std::nan("")}});
  CHECK(line ==
        "{\"t\": 12.500, \"role\": \"trainer\", \"event\": \"step\", \"step\": 3, \"loss\": 2.5, "
        "\"server\": \"s\\\"1\\n\", \"ok\": true, \"nan\": null}\n");
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
  auto mb = swarm::sample_microbatch(text, 3, 5, rng);
  REQUIRE(mb.inputs.size() == 15);
  for (size_t i = 0; i < 15; ++i) {
    // targets are the inputs shifted by one byte within each window
    if (i % 5 != 4)
      CHECK(mb.targets[i] == mb.inputs[i + 1]);
    CHECK(mb.inputs[i] >= 0);
    CHECK(mb.inputs[i] < 256);
  }
}
