// swarm-sim's SimGrid-free parts: preemption traces, the best assignment (the
// "share of optimal" yardstick) and the cost model read from a calibration.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <tuple>

#include "models/shape/cost_model.hpp"
#include "sim/optimal.hpp"
#include "sim/trace.hpp"

using namespace swarm;
using namespace swarm::sim;

TEST_CASE("trace: per-node events become lifetimes", "[sim]") {
  std::string err;
  auto t = parse_trace("0,add,node1\r\n60000,add,node2\r\n120000,remove,node1\r\n", "x.csv", &err);
  REQUIRE(t);
  REQUIRE(t->size() == 2);
  CHECK((*t)[0].start == 0);
  CHECK((*t)[0].end == 120);
  CHECK((*t)[1].start == 60);
  CHECK(std::isinf((*t)[1].end));
  CHECK(peak_alive(*t) == 2);
}

TEST_CASE("trace: counts become lifetimes, a fall ends the newest", "[sim]") {
  std::string err;
  auto t = parse_trace("0,0\n100,0\n100,2\n300,2\n300,1\n500,1\n500,0\n", "c.csv", &err);
  REQUIRE(t);
  REQUIRE(t->size() == 2);
  CHECK((*t)[0].start == 100);
  CHECK((*t)[0].end == 500);
  CHECK((*t)[1].end == 300);
  CHECK(peak_alive(*t) == 2);
}

TEST_CASE("trace: bad files name the line", "[sim]") {
  std::string err;
  CHECK_FALSE(parse_trace("0,add,a\n10,remove,b\n", "f", &err));
  CHECK(err == "f:2: node b removed but never added");
  CHECK_FALSE(parse_trace("0,add,a\n5,explode,a\n", "f", &err));
  CHECK(err.find("f:2: event must be add or remove") == 0);
  CHECK_FALSE(parse_trace("10,1\n5,2\n", "f", &err));
  CHECK(err == "f:2: time goes back");
  CHECK_FALSE(parse_trace("root:x:0:0\n", "f", &err));
  CHECK(err.find("f:1:") == 0);
  CHECK_FALSE(parse_trace("", "f", &err));
  CHECK_FALSE(read_trace("/nonexistent/trace.csv", &err));
  CHECK(err == "/nonexistent/trace.csv: cannot read the trace");
}

TEST_CASE("trace: the shipped g4dn trace matches its README", "[sim]") {
  std::string err;
  auto t = read_trace(SWARM_SOURCE_DIR "/../shared/data/traces/g4dn-trace.csv", &err);
  if (!t) {
    WARN("shared/data/traces not present next to the checkout: " << err);
    return;
  }
  CHECK(t->size() == 79);  // 79 adds
  CHECK(peak_alive(*t) == 24);
  int open = 0;
  for (const auto& l : *t)
    open += std::isinf(l.end);
  CHECK(open == 5);  // still alive at the end
}

TEST_CASE("trace: replay lays copies over slots, speedup and jitter", "[sim]") {
  const std::vector<lifetime> trace{{0, 100}, {50, 150}, {120, 200}};
  std::mt19937_64 rng(1);
  auto slots = replay(trace, 4, 2.0, 0.0, rng);  // 2 copies (peak 2), halved times
  REQUIRE(slots.size() == 4);
  int lifetimes = 0;
  for (const auto& s : slots) {
    for (size_t i = 1; i < s.up.size(); ++i)
      CHECK(s.up[i].start >= s.up[i - 1].end);  // a slot is one machine
    lifetimes += static_cast<int>(s.up.size());
  }
  CHECK(lifetimes == 6);
  CHECK(slots[0].up[0].end == 50);  // 100 / 2
  std::mt19937_64 r1(3), r2(3);
  auto j1 = replay(trace, 4, 1.0, 30.0, r1), j2 = replay(trace, 4, 1.0, 30.0, r2);
  CHECK(j1[1].up[0].start == j2[1].up[0].start);  // seeded
}

TEST_CASE("optimal: the best assignment by hand", "[sim]") {
  // Two stages of cost 1 and 2 (work per sample); peers of speed 4, 2, 2, 1.
  // Greedy: 4 -> s0 (cap 4), 2 -> s1 (1), 2 -> s1 (2), 1 -> s1 (2.5): min 2.5.
  // Fluid: 9 / 3 = 3.
  auto o = best_assignment({1, 2}, {4, 2, 2, 1});
  CHECK(o.greedy == Approx(2.5));
  CHECK(o.fluid == Approx(3.0));
  CHECK(best_assignment({1, 1, 1}, {1, 1}).greedy == 0);  // a stage stays empty
  CHECK(best_assignment({1}, {}).fluid == 0);
}

namespace {

/// A two-stage model of `layers` blocks, vocabulary 256.
swarm::model_shape shape_of(int64_t d_model, int64_t seq_len, int64_t layers, int64_t microbatch,
                            const std::string& compression) {
  swarm::model_config m;
  m.d_model = d_model;
  m.seq_len = seq_len;
  m.n_layers = layers;
  m.microbatch = microbatch;
  return {m, 2, compression};
}

}  // namespace

TEST_CASE("cost model: measured config as measured, others extrapolated", "[sim]") {
  calibration cal;
  cal.shape = shape_of(128, 128, 4, 8, "blockwise8");
  cal.forward_s = {0.03, 0.05};
  cal.backward_s = {0.08, 0};
  cal.bytes_per_value = 1.01;
  cal.codec_s_per_value = 0;
  std::vector<cost_point> pts;
  for (int k = 0; k < 2; ++k) {
    pts.push_back({request_madds(cal.shape, k, false), 0.002 + 3e-11 * request_madds(cal.shape, k, false)});
    if (k == 0)
      pts.push_back({request_madds(cal.shape, k, true), 0.002 + 3e-11 * request_madds(cal.shape, k, true)});
  }
  fit_calibration(cal, pts);
  CHECK(cal.seconds_per_madd == Approx(3e-11).epsilon(1e-6));
  CHECK(cal.request_overhead_s == Approx(0.002).epsilon(1e-6));
  auto same = request_costs(cal.shape, cal);
  REQUIRE(same.size() == 2);
  CHECK(same[0].forward_s == 0.03);
  CHECK(same[1].backward_s == 0);
  CHECK(same[0].forward_in_bytes == 8 * 8 * 128);  // token ids
  CHECK(same[0].forward_out_bytes == Approx(8 * 128 * 128 * 1.01));
  CHECK(same[1].forward_in_bytes == Approx(8 * 128 * 128 * 1.01 + 8 * 8 * 128));  // activations + targets
  CHECK(same[0].parameters == 256 * 128 + 128 * 128 + 2 * (12 * 128 * 128 + 13 * 128));
  CHECK(same[1].parameters == 2 * (12 * 128 * 128 + 13 * 128) + 2 * 128 + 128 * 256);
  auto wide = cal.shape;
  wide.model.d_model = 256;
  auto other = request_costs(wide, cal);
  CHECK(other[0].forward_s == Approx(0.002 + 3e-11 * request_madds(wide, 0, false)));
  CHECK(other[0].backward_s == Approx(0.002 + 3e-11 * 3 * forward_madds(wide, 0) * 8));
  wide.compression = "fp16";
  CHECK(request_costs(wide, cal)[0].forward_out_bytes == 8 * 128 * 256 * 2);
  wide.stages = 9;  // 4 layers cannot be cut into 9 stages
  CHECK(request_costs(wide, cal).empty());
}

TEST_CASE("trace: a recorded cluster's kills, restarts and first joins, named by launch order", "[sim]") {
  const std::string path = "/tmp/swarm-test-chaos-log.jsonl";
  std::ofstream(path)
      << "{\"t\": 100.0, \"event\": \"cluster_start\", \"stages\": 2}\n"
      << "{\"t\": 101.5, \"event\": \"server_join\", \"stage\": 1, \"server\": \"s-51\"}\n"
      << "{\"t\": 101.6, \"event\": \"server_join\", \"stage\": 0, \"server\": \"s-48\"}\n"
      << "{\"t\": 102.0, \"event\": \"server_join\", \"stage\": 1, \"server\": \"s-50\"}\n"
      << "{\"t\": 102.25, \"event\": \"server_join\", \"stage\": 0, \"server\": \"s-49\"}\n"
      << "{\"t\": 120.0, \"event\": \"chaos\", \"action\": \"kill\", \"process\": \"server 1.1\", \"pid\": 51}\n"
      << "{\"t\": 130.0, \"event\": \"chaos\", \"action\": \"restart\", \"process\": \"server 1.1\", \"pid\": 60}\n"
      << "{\"t\": 130.5, \"event\": \"server_join\", \"stage\": 1, \"server\": \"s-60\"}\n"
      << "{\"t\": 140.0, \"event\": \"server_join\", \"stage\": 0, \"server\": \"s-50\"}\n"  // a move
      << "{\"t\": 150.0, \"event\": \"chaos\", \"action\": \"stop\", \"process\": \"coordinator\"}\n";
  int skipped = 0;
  std::string err;
  const auto log = read_chaos_log(path, &skipped, &err);
  REQUIRE(log);
  CHECK(skipped == 1);
  // (t, kill, stage, index, join): the restarted PID 60 and the mover's second join are no first joins.
  const std::vector<std::tuple<double, bool, int, int, bool>> want = {
      {1.5, false, 1, 1, true},  {1.6, false, 0, 0, true},  {2.0, false, 1, 0, true},
      {2.25, false, 0, 1, true}, {20.0, true, 1, 1, false}, {30.0, false, 1, 1, false}};
  REQUIRE(log->size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& a = (*log)[i];
    CHECK(a.t == Approx(std::get<0>(want[i])));
    CHECK(a.kill == std::get<1>(want[i]));
    CHECK(a.stage == std::get<2>(want[i]));
    CHECK(a.index == std::get<3>(want[i]));
    CHECK(a.join == std::get<4>(want[i]));
  }
  std::ofstream(path) << "not json\n";
  CHECK_FALSE(read_chaos_log(path, nullptr, &err));
  CHECK(err == path + ": no metrics event in it");
}

TEST_CASE("cost model: calibration files round-trip and bad ones are refused", "[sim]") {
  calibration cal;
  cal.shape = shape_of(64, 32, 2, 4, "fp16");
  cal.forward_s = {0.01, 0.02};
  cal.backward_s = {0.03, 0};
  cal.seconds_per_madd = 2e-11;
  cal.machine = "test";
  const std::string path = "/tmp/swarm-test-calibration.txt";
  std::ofstream(path) << format_calibration(cal);
  std::string err;
  auto back = read_calibration(path, &err);
  REQUIRE(back);
  CHECK(back->shape == cal.shape);
  CHECK(back->forward_s == cal.forward_s);
  CHECK(back->seconds_per_madd == Approx(2e-11));
  CHECK(cluster_scale(*back, 1) == 1);  // unset
  // The cluster's excess over the model: one value for every stage, or one per stage.
  cal.cluster_scale = {0.7, 1.25};
  std::ofstream(path) << format_calibration(cal);
  back = read_calibration(path, &err);
  REQUIRE(back);
  CHECK(cluster_scale(*back, 0) == Approx(0.7));
  CHECK(cluster_scale(*back, 1) == Approx(1.25));
  const auto per_stage = stage_microbatch_seconds(*back);
  REQUIRE(per_stage.size() == 2);
  CHECK(per_stage[0] + per_stage[1] == Approx(microbatch_seconds(*back)));
  std::ofstream(path) << format_calibration(cal) << "cluster-scale = 0.9\n";
  back = read_calibration(path, &err);
  REQUIRE(back);
  CHECK(cluster_scale(*back, 0) == Approx(0.9));
  CHECK(cluster_scale(*back, 1) == Approx(0.9));
  std::ofstream(path) << format_calibration(cal) << "cluster-scale = 0.9,1,1.1\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err.find("cluster-scale needs one value, or one per stage") != std::string::npos);
  std::ofstream(path) << format_calibration(cal) << "cluster-scale = 0.9,abc\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err.find("cluster-scale: abc is not a finite number >= 0") != std::string::npos);
  // Without light-scale the load changes nothing.
  CHECK(cluster_scale(cal, 1, 0.1) == Approx(1.25));
  // With it: light-scale at light-load, cluster-scale at cluster-load, linear
  // between them and held outside.
  cal.light_scale = {0.5, 1.0};
  cal.light_load = 0.4;
  cal.cluster_load = 0.9;
  std::ofstream(path) << format_calibration(cal);
  back = read_calibration(path, &err);
  REQUIRE(back);
  CHECK(back->light_scale == cal.light_scale);
  CHECK(cluster_scale(*back, 0, 0.4) == Approx(0.5));
  CHECK(cluster_scale(*back, 1, 0.65) == Approx(1.125));
  CHECK(cluster_scale(*back, 1, 0.9) == Approx(1.25));
  CHECK(cluster_scale(*back, 1, 0.0) == Approx(1.0));
  CHECK(cluster_scale(*back, 0, 1.0) == Approx(0.7));
  CHECK(cluster_scale(*back, 0) == Approx(0.7));  // no load given: the busy cluster's
  std::ofstream(path) << format_calibration(cal) << "light-load = 0.95\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err.find("light-scale needs 0 <= light-load < cluster-load <= 1") != std::string::npos);
  std::ofstream(path) << format_calibration(cal) << "light-scale = 0.5,1,1\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err.find("light-scale needs one value, or one per stage") != std::string::npos);
  cal.light_scale.clear();
  std::ofstream(path) << "d-model = 64\nthis line is wrong\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err == path + ":2: not key = value: this line is wrong");
  std::ofstream(path) << format_calibration(cal) << "forward-s = 0.01\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK(err.find("one value per stage") != std::string::npos);
  std::ofstream(path) << format_calibration(cal) << "seconds-per-madd = -1\n";
  CHECK_FALSE(read_calibration(path, &err));
  CHECK_FALSE(read_calibration("/nonexistent/cal", &err));
  CHECK(err.find("swarm --role calibrate") != std::string::npos);
}
