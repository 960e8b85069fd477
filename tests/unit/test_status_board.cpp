// The status board (observe/status_board.*) and the run summary
// (observe/run_summary.*) from synthetic events: what the page, /metrics,
// `--role status` and the cluster's last lines say.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "base/metrics.hpp"
#include "observe/run_summary.hpp"
#include "observe/status_board.hpp"

using namespace swarm;

namespace {

/// A board fed the way the coordinator feeds it: through a metrics sink's observer.
struct fed_board {
  std::shared_ptr<status_board> board = std::make_shared<status_board>(1000.0);
  metrics_sink sink;
  fed_board() {
    sink.observe(
        [b = board](double t, const char* e, std::initializer_list<metrics_sink::field> f) { b->on_event(t, e, f); });
  }
};

/// Events of a small swarm, fed as the coordinator sees them: two servers join,
/// one steps twice, each stage ends a round (stage 1's failed, after 45 s), a
/// trainer reports, and stage 1's server goes down.
void feed_a_short_run(fed_board& f) {
  auto& b = *f.board;
  b.on_event(1001, "server_join",
             {{"stage", int64_t{0}},
              {"server", std::string{"s-1"}},
              {"host", std::string{"127.0.0.1"}},
              {"port", int64_t{4000}}});
  b.on_event(1001, "server_join",
             {{"stage", int64_t{1}},
              {"server", std::string{"s-2\"x"}},
              {"host", std::string{"127.0.0.1"}},
              {"port", int64_t{4001}}});
  b.on_event(1002, "server_progress",
             {{"stage", int64_t{0}},
              {"server", std::string{"s-1"}},
              {"step", int64_t{3}},
              {"hash", int64_t{0x1234abcd5678}},
              {"committed_samples", int64_t{100}}});
  b.on_event(1008, "server_progress",
             {{"stage", int64_t{0}},
              {"server", std::string{"s-1"}},
              {"step", int64_t{4}},
              {"hash", int64_t{0x1234abcd5678}},
              {"committed_samples", int64_t{160}}});
  b.on_event(1008, "round_end",
             {{"stage", int64_t{0}}, {"step", int64_t{4}}, {"applied", int64_t{2}}, {"seconds", 0.5}});
  b.on_event(1009, "round_end",
             {{"stage", int64_t{1}}, {"step", int64_t{0}}, {"applied", int64_t{0}}, {"seconds", 45.0}});
  f.sink.note("trainer_report", {{"trainer", std::string{"t9"}},
                                 {"step", int64_t{7}},
                                 {"max_steps", int64_t{10}},
                                 {"loss", 3.5},
                                 {"tokens_per_s", 900.0},
                                 {"samples", int64_t{56}},
                                 {"tokens", int64_t{3584}},
                                 {"reroutes", int64_t{2}},
                                 {"bans", int64_t{1}},
                                 {"busy", int64_t{40}}});
  b.on_event(1010, "server_down",
             {{"stage", int64_t{1}},
              {"server", std::string{"s-2\"x"}},
              {"reason", std::string{"exit_reason(remote_link_unreachable)"}}});
}

}  // namespace

TEST_CASE("the status board shows servers, trainers, rounds and events", "[status]") {
  fed_board f;
  auto& b = *f.board;
  feed_a_short_run(f);

  const auto json = b.json(1012);
  CHECK_THAT(json, Catch::Contains("\"id\": \"s-1\", \"host\": \"127.0.0.1\", \"port\": 4000, \"state\": \"serving\", "
                                   "\"step\": 4, \"samples_per_s\": 10.0, \"hash\": \"00001234\""));
  CHECK_THAT(json, Catch::Contains("\"id\": \"s-2\\\"x\""));  // escaped
  CHECK_THAT(json, Catch::Contains("\"state\": \"down\""));
  CHECK_THAT(json, Catch::Contains("\"rounds\": {\"applied\": 1, \"failed\": 0"));
  CHECK_THAT(json, Catch::Contains("\"rounds\": {\"applied\": 0, \"failed\": 1"));
  CHECK_THAT(json, Catch::Contains("\"id\": \"t9\", \"step\": 7, \"max_steps\": 10, \"loss\": 3.5,"));
  CHECK_THAT(json, Catch::Contains("\"uptime_s\": 12.0"));
  CHECK_THAT(json, Catch::Contains("a round failed after 45.0 s"));

  const auto prom = b.prometheus(1012);
  CHECK_THAT(prom, Catch::Contains("# TYPE swarm_rounds_total counter\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_rounds_total{outcome=\"applied\",stage=\"0\"} 1\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_stage_servers{stage=\"1\"} 0\n"));  // its one server went down
  CHECK_THAT(prom, Catch::Contains("swarm_trainer_tokens_total{trainer=\"t9\"} 3584\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_trainer_bans_total{trainer=\"t9\"} 1\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_trainer_busy_answers_total{trainer=\"t9\"} 40\n"));
  CHECK_THAT(json, Catch::Contains("\"bans\": 1, \"busy\": 40,"));
  CHECK_THAT(prom, Catch::Contains("swarm_round_seconds_sum{stage=\"1\"} 45\n"));

  const auto text = b.text(1012);
  CHECK_THAT(text, Catch::Contains("trainer t9"));
  CHECK_THAT(text, Catch::Contains("step 7/10"));
  CHECK_THAT(text, Catch::Contains("s-2\"x"));

  CHECK_THAT(b.summary_line(), Catch::Contains("1 rounds failed in all"));
  CHECK_THAT(b.summary_line(), Catch::Contains("since the last line: 0 rounds, 0 joins, 0 downs"));
  CHECK_THAT(prom, !Catch::Contains("swarm_eval_loss{"));  // no validation measured yet
  CHECK_THAT(json, Catch::Contains("\"eval_history\": []"));

  // Validation (--eval-every): the latest loss, and one point per measurement.
  for (const auto& [step, loss] : {std::pair<int64_t, double>{0, 6.9}, {50, 5.25}, {50, 5.25}, {100, 4.5}})
    f.sink.note("trainer_report", {{"trainer", std::string{"t9"}},
                                   {"step", step + 1},
                                   {"loss", 3.0},
                                   {"has_eval", true},
                                   {"eval_step", step},
                                   {"eval_loss", loss}});
  CHECK_THAT(b.json(1013), Catch::Contains("\"eval_step\": 100, \"eval_loss\": 4.5, \"eval_history\": [[0, 6.9], "
                                           "[50, 5.25], [100, 4.5]]"));
  CHECK_THAT(b.prometheus(1013),
             Catch::Contains("# TYPE swarm_eval_loss gauge\nswarm_eval_loss{trainer=\"t9\"} 4.5\n"));
  CHECK_THAT(b.text(1013), Catch::Contains("validation 4.500 at step 100"));
}

TEST_CASE("a server stopped on purpose is shown stopped, not down, and counts as no down", "[status]") {
  status_board b(0);
  for (int64_t stage : {0, 1})  // the coordinator's periodic stage_load makes the stages known
    b.on_event(1, "stage_load", {{"stage", stage}, {"servers", int64_t{0}}});
  for (const char* id : {"s-1", "s-2"})
    b.on_event(1, "server_join",
               {{"stage", int64_t{0}}, {"server", std::string{id}}, {"host", std::string{"h"}}, {"port", int64_t{1}}});
  b.on_event(2, "server_stop", {{"stage", int64_t{0}}, {"server", std::string{"s-1"}}});
  CHECK_THAT(b.prometheus(3), Catch::Contains("swarm_stage_servers{stage=\"0\"} 1\n"));
  CHECK_THAT(b.json(3), Catch::Contains("\"id\": \"s-1\", \"host\": \"h\", \"port\": 1, \"state\": \"stopped\""));
  CHECK_THAT(b.json(3), Catch::Contains("stage 0: s-1 stopped"));
  CHECK_THAT(b.summary_line(), Catch::Contains("0 downs"));
  CHECK_THAT(b.prometheus(3), Catch::Contains("swarm_server_events_total{kind=\"down\"} 0\n"));
  // Joining again serves again; a stopped server that joins another stage is no move.
  b.on_event(4, "server_join",
             {{"stage", int64_t{1}}, {"server", std::string{"s-1"}}, {"host", std::string{"h"}}, {"port", int64_t{1}}});
  CHECK_THAT(b.prometheus(5), Catch::Contains("swarm_stage_servers{stage=\"0\"} 1\n"));
  CHECK_THAT(b.prometheus(5), Catch::Contains("swarm_stage_servers{stage=\"1\"} 1\n"));
  CHECK_THAT(b.summary_line(), Catch::Contains("0 moves"));
}

TEST_CASE("the status board keeps a bounded history and event list", "[status]") {
  status_board b(0);
  for (int i = 0; i < 5000; ++i) {
    b.on_event(i, "trainer_report", {{"trainer", std::string{"t"}}, {"step", int64_t{i}}, {"loss", 1.0}});
    b.on_event(i, "server_down", {{"stage", int64_t{0}}, {"server", std::string{"s"}}});
  }
  const auto json = b.json(5000);
  const auto history = json.substr(json.find("\"history\""));
  const size_t points =
      static_cast<size_t>(std::count(history.begin(), history.end(), '[')) - 2;  // less the list and events
  CHECK(points <= status_board::max_history);
  CHECK(points >= status_board::max_history / 2);
  CHECK_THAT(history, Catch::Contains("[1.0, 1, "));        // the start stays, coarser (step 0 is no point)
  CHECK_THAT(history, Catch::Contains("[4999.0, 4999, "));  // and the latest
  CHECK(static_cast<size_t>(std::count(json.begin(), json.end(), '{')) < status_board::max_events + 10);
}

TEST_CASE("the status board holds at most max_trainers trainers: the longest silent makes room", "[status]") {
  status_board b(0);
  for (int i = 0; i < 1000; ++i)  // made-up ids, or trainers that came and went
    b.on_event(i, "trainer_report", {{"trainer", "t" + std::to_string(i)}, {"step", int64_t{1}}, {"loss", 1.0}});
  const auto json = b.json(1000);
  size_t shown = 0;
  for (size_t pos = json.find("\"id\": \"t"); pos != std::string::npos; pos = json.find("\"id\": \"t", pos + 1))
    ++shown;
  CHECK(shown == status_board::max_trainers);
  CHECK_THAT(json, Catch::Contains("\"t999\""));  // the newest stays
  CHECK_THAT(json, !Catch::Contains("\"t0\""));   // the longest silent went
}

TEST_CASE("the board lists banned servers and why while their cool-down lasts, and each trainer's verification",
          "[status][verify]") {
  fed_board f;
  feed_a_short_run(f);
  auto& b = *f.board;
  b.on_event(1020, "server_banned",
             {{"stage", int64_t{0}},
              {"server", std::string{"s-1"}},
              {"cooldown_s", 600.0},
              {"last_of_stage", true},
              {"why", std::string{"trainer t's verification: microbatch 3"}}});
  b.on_event(1021, "trainer_report",
             {{"trainer", std::string{"t"}},
              {"verify_requests", int64_t{40}},
              {"verify_samples", int64_t{320}},
              {"forward_samples", int64_t{6400}},
              {"verify_disagreed", int64_t{3}},
              {"verify_strikes", int64_t{3}},
              {"verify_bans", int64_t{1}}});
  const auto text = b.text(1030);
  CHECK_THAT(text, Catch::Contains("banned: s-1 (stage 0, 590 s left): trainer t's verification: microbatch 3"));
  CHECK_THAT(text, Catch::Contains("verified 40 (5.0% extra forward samples), 3 disagreed, 3 strikes, 1 banned"));
  CHECK_THAT(text, Catch::Contains("the stage's LAST server"));
  const auto json = b.json(1030);
  CHECK_THAT(json, Catch::Contains("\"banned\": [{\"server\": \"s-1\", \"stage\": 0"));
  CHECK_THAT(json, Catch::Contains("\"verify_bans\": 1"));
  CHECK_THAT(b.prometheus(1030), Catch::Contains("swarm_banned_servers{stage=\"0\"} 1"));
  CHECK_THAT(b.json(1700), Catch::Contains("\"banned\": []"));  // its cool-down over
}

TEST_CASE("the run summary reads a run's metrics file", "[status]") {
  const std::string path = "/tmp/swarm-test-summary.jsonl";
  {
    std::ofstream out(path);
    out << "{\"t\": 10.0, \"role\": \"trainer\", \"event\": \"step\", \"trainer\": \"t1\", \"step\": 99, \"loss\": "
           "9.0}\n"  // an earlier run
        << "{\"t\": 100.0, \"role\": \"cluster\", \"event\": \"cluster_start\"}\n"
        << "{\"t\": 101.0, \"role\": \"trainer\", \"event\": \"step\", \"trainer\": \"t1\", \"step\": 1, \"loss\": "
           "5.5, "
           "\"samples\": 8, \"tokens\": 512, \"dropped\": 0, \"retries\": 0}\n"
        << "{\"t\": 102.0, \"role\": \"coordinator\", \"event\": \"round_end\", \"stage\": 0, \"applied\": 2}\n"
        << "{\"t\": 103.0, \"role\": \"coordinator\", \"event\": \"round_end\", \"stage\": 0, \"applied\": 0}\n"
        << "{\"t\": 104.0, \"role\": \"trainer\", \"event\": \"reroute\", \"stage\": 1}\n"
        << "{\"t\": 104.5, \"role\": \"coordinator\", \"event\": \"server_down\", \"stage\": 1}\n"
        << "{\"t\": 104.6, \"role\": \"coordinator\", \"event\": \"server_stop\", \"stage\": 1}\n"
        << "{\"t\": 105.0, \"role\": \"server\", \"event\": \"rebalance\", \"from\": 0, \"to\": 1}\n"
        << "{\"t\": 105.5, \"role\": \"server\", \"event\": \"rebalance\", \"from\": -1, \"to\": 1}\n"
        << "{\"t\": 100.5, \"role\": \"trainer\", \"event\": \"eval\", \"trainer\": \"t1\", \"step\": 0, \"loss\": "
           "6.9}\n"
        << "not json at all\n"
        << "{\"t\": 109.0, \"role\": \"trainer\", \"event\": \"eval\", \"trainer\": \"t1\", \"step\": 2, \"loss\": "
           "4.75}\n"
        << "{\"t\": 110.0, \"role\": \"trainer\", \"event\": \"step\", \"trainer\": \"t1\", \"step\": 2, \"loss\": "
           "4.25, "
           "\"samples\": 16, \"tokens\": 1024, \"dropped\": 1, \"retries\": 3}\n"
        << "{\"t\": 110.0, \"role\": \"trainer\", \"event\": \"verify\", \"trainer\": \"t1\", \"requests\": 7, "
           "\"share\": 0.05, \"disagreed\": 2, \"strikes\": 2, \"bans\": 1}\n"
        << "{\"t\": 110.0, \"role\": \"coordinator\", \"event\": \"server_banned\", \"stage\": 0, \"server\": "
           "\"s-9\", \"why\": \"trainer t1's verification\"}\n";
  }
  const auto s = run_summary(path, 100.0);
  CHECK_THAT(s, Catch::Contains("time 10 s"));
  CHECK_THAT(s, Catch::Contains("trainer t1: 2 steps, 16 samples, 102 tokens/s on average, loss 5.500 -> 4.250, "
                                "1 dropped, 3 retries"));
  CHECK_THAT(s, Catch::Contains("validation loss 6.900 at step 0 -> 4.750 at step 2"));
  CHECK_THAT(s, Catch::Contains("stage 0 1 applied (1 failed)"));
  CHECK_THAT(s, Catch::Contains("reroutes 1, moves 1, server downs 1,"));
  CHECK_THAT(s, Catch::Contains("verified 7 forwards (5.0% extra forward samples), 2 disagreed, 2 strikes, 1 "
                                "servers banned"));
  CHECK_THAT(s, Catch::Contains("s-9 of stage 0 banned: trainer t1's verification"));
  CHECK_THAT(run_summary("/nonexistent/metrics.jsonl", 0), Catch::Contains("cannot read"));
  std::remove(path.c_str());
}

TEST_CASE("with --control the board shows the election and etcd; without, nothing of it", "[status][control]") {
  fed_board plain;
  CHECK_THAT(plain.board->json(1001), !Catch::Contains("\"control\""));
  CHECK_THAT(plain.board->prometheus(1001), !Catch::Contains("swarm_control_"));
  fed_board f;
  auto& b = *f.board;
  b.on_event(1001, "leadership",
             {{"change", std::string{"won"}},
              {"term", int64_t{42}},
              {"address", std::string{"10.0.0.1:7000"}},
              {"pid", int64_t{7}},
              {"stood_by_s", 3.5}});
  f.sink.note("control", {{"role", std::string{"leader"}},
                          {"leader", std::string{"10.0.0.1:7000"}},
                          {"term", int64_t{42}},
                          {"candidates", std::string{"10.0.0.1:7000,10.0.0.2:7000"}},
                          {"members", std::string{"10.0.0.1:2379=ok,10.0.0.2:2379=down,10.0.0.3:2379=ok"}},
                          {"healthy", int64_t{2}}});
  const auto json = b.json(1002);
  CHECK_THAT(json,
             Catch::Contains("\"control\": {\"role\": \"leader\", \"leader\": \"10.0.0.1:7000\", \"term\": 42, "
                             "\"leadership_changes\": 1, \"candidates\": [\"10.0.0.1:7000\", \"10.0.0.2:7000\"]"));
  CHECK_THAT(json, Catch::Contains("{\"endpoint\": \"10.0.0.2:2379\", \"healthy\": false}"));
  CHECK_THAT(json, Catch::Contains("leads as term 42 at 10.0.0.1:7000"));
  const auto prom = b.prometheus(1002);
  CHECK_THAT(prom, Catch::Contains("swarm_control_term 42\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_control_leading 1\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_control_leadership_changes_total 1\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_control_members_healthy 2\n"));
  CHECK_THAT(b.text(1002), Catch::Contains("control: this process is the leader; leader 10.0.0.1:7000 (term 42)"));
}

TEST_CASE("/metrics is the text exposition 0.0.4, its families in the board's order", "[status]") {
  status_board b(0);
  for (int64_t stage : {1, 0})
    b.on_event(1, "stage_load", {{"stage", stage}, {"servers", int64_t{1}}});
  b.on_event(
      1, "server_join",
      {{"stage", int64_t{1}}, {"server", std::string{"a\"b\\c\nd"}}, {"host", std::string{"h"}}, {"port", int64_t{1}}});
  b.on_event(2, "round_end", {{"stage", int64_t{1}}, {"step", int64_t{1}}, {"applied", int64_t{1}}, {"seconds", 0.25}});
  b.on_event(3, "round_end", {{"stage", int64_t{1}}, {"applied", int64_t{0}}, {"seconds", 0.5}});
  const auto prom = b.prometheus(10);
  // Each family once: HELP, TYPE, then its samples (a family without samples
  // keeps HELP and TYPE); every line one of the three.
  const std::regex help(R"(# HELP ([a-z_]+) \S.*)"), type(R"(# TYPE ([a-z_]+) (counter|gauge|summary))");
  const std::regex sample(R"(([a-z_]+)(\{[a-z_]+="([^"\\\n]|\\.)*"(,[a-z_]+="([^"\\\n]|\\.)*")*\})? -?[0-9.e+]+)");
  std::vector<std::string> families;
  std::istringstream lines(prom);
  std::string line, helped;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_match(line, m, help)) {
      helped = m[1];
    } else if (std::regex_match(line, m, type)) {
      CHECK(m[1] == helped);
      families.push_back(m[1]);
    } else {
      REQUIRE(std::regex_match(line, m, sample));
      CHECK(!families.empty());
      CHECK(std::string{m[1]}.rfind(families.back(), 0) == 0);  // a sample of the family above it
    }
  }
  const std::vector<std::string> order{"swarm_uptime_seconds",
                                       "swarm_stage_servers",
                                       "swarm_stage_step",
                                       "swarm_stage_stalled_steps",
                                       "swarm_rounds_total",
                                       "swarm_round_seconds",
                                       "swarm_server_samples_per_second",
                                       "swarm_server_events_total",
                                       "swarm_banned_servers",
                                       "swarm_trainer_steps_total",
                                       "swarm_trainer_samples_total",
                                       "swarm_trainer_tokens_total",
                                       "swarm_trainer_loss",
                                       "swarm_trainer_tokens_per_second",
                                       "swarm_trainer_dropped_total",
                                       "swarm_trainer_reroutes_total",
                                       "swarm_trainer_bans_total",
                                       "swarm_trainer_busy_answers_total",
                                       "swarm_trainer_verify_requests_total",
                                       "swarm_trainer_verify_samples_total",
                                       "swarm_trainer_forward_samples_total",
                                       "swarm_trainer_verify_strikes_total",
                                       "swarm_trainer_verify_bans_total",
                                       "swarm_trainer_wire_bytes_total",
                                       "swarm_eval_loss"};
  CHECK(families == order);
  CHECK_THAT(prom, Catch::Contains("# TYPE swarm_round_seconds summary\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_stage_servers{stage=\"0\"} 0\nswarm_stage_servers{stage=\"1\"} 1\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_round_seconds_sum{stage=\"1\"} 0.75\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_round_seconds_count{stage=\"1\"} 2\n"));
  CHECK_THAT(prom, Catch::Contains("swarm_server_samples_per_second{server=\"a\\\"b\\\\c\\nd\",stage=\"1\"} 0\n"));
  CHECK_THAT(prom, Catch::Contains(
                       "swarm_server_events_total{kind=\"join\"} 1\nswarm_server_events_total{kind=\"down\"} 0\n"));
}
