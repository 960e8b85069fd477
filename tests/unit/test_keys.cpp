// The table of keys (config/keys.cpp) and what is generated from it: every key
// round-trips, flags are unique, each check refuses bad values, swarm-sim's flags.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "sim/scenario.hpp"
#include "config_helpers.hpp"

using namespace swarm;
using namespace swarm::testing::config_helpers;

namespace {

/// Every key of swarm set to a valid value other than its default (valid
/// together: the cross-field rules hold). A new key needs a value here: the
/// first test below fails until it has one.
const std::vector<std::string> every_key_set = {"--role",
                                                "server",
                                                "--out",
                                                "/tmp/calibration.txt",
                                                "--stages",
                                                "3",
                                                "--threads",
                                                "2",
                                                "--device",
                                                "cuda:1",
                                                "--metrics",
                                                "/tmp/m.jsonl",
                                                "--log-level",
                                                "debug",
                                                "--model",
                                                "llama",
                                                "--d-model",
                                                "96",
                                                "--n-heads",
                                                "6",
                                                "--n-layers",
                                                "6",
                                                "--n-kv-heads",
                                                "3",
                                                "--ffn-dim",
                                                "200",
                                                "--norm-eps",
                                                "1e-06",
                                                "--rope-theta",
                                                "500000",
                                                "--share-layers",
                                                "2",
                                                "--boundary",
                                                "maxout:3",
                                                "--seq-len",
                                                "32",
                                                "--microbatch",
                                                "4",
                                                "--lr",
                                                "0.0012345678901234",
                                                "--weight-decay",
                                                "0.05",
                                                "--beta1",
                                                "0.8",
                                                "--beta2",
                                                "0.99",
                                                "--grad-clip",
                                                "0.5",
                                                "--seed",
                                                "7",
                                                "--optimizer",
                                                "lamb",
                                                "--lr-schedule",
                                                "cosine",
                                                "--warmup-steps",
                                                "3",
                                                "--min-lr",
                                                "0.0001",
                                                "--tokenizer",
                                                "/tmp/tok.model",
                                                "--vocab",
                                                "8000",
                                                "--data",
                                                "/tmp/shards",
                                                "--eval-every",
                                                "10",
                                                "--eval-tokens",
                                                "4096",
                                                "--input",
                                                "/tmp/a",
                                                "/tmp/b c",
                                                "--vocab-size",
                                                "4000",
                                                "--encode",
                                                "--val-fraction",
                                                "0.01",
                                                "--shard-tokens",
                                                "2048",
                                                "--init-from",
                                                "/tmp/w.safetensors",
                                                "--prompt",
                                                "Once upon",
                                                "--max-new-tokens",
                                                "77",
                                                "--temperature",
                                                "0.5",
                                                "--top-k",
                                                "9",
                                                "--sample-seed",
                                                "42",
                                                "--kv-cache",
                                                "off",
                                                "--heartbeat",
                                                "0.5",
                                                "--connection-timeout",
                                                "3",
                                                "--coordinator-wait",
                                                "12",
                                                "--control",
                                                "etcd://10.0.0.5:2379,10.0.0.6:2379",
                                                "--control-lease",
                                                "3",
                                                "--control-ca",
                                                "etcd-ca.pem",
                                                "--control-cert",
                                                "etcd-node.pem",
                                                "--control-key",
                                                "etcd-node.key",
                                                "--chunk-bytes",
                                                "1048576",
                                                "--bulk-min-bytes",
                                                "0",
                                                "--bulk-budget",
                                                "512",
                                                "--tls-ca",
                                                "ca.pem",
                                                "--tls-cert",
                                                "node.pem",
                                                "--tls-key",
                                                "node.key",
                                                "--port",
                                                "7001",
                                                "--port-file",
                                                "/tmp/port",
                                                "--http-port",
                                                "8080",
                                                "--http-host",
                                                "0.0.0.0",
                                                "--http-token",
                                                "t0ken",
                                                "--averaging-timeout",
                                                "12.5",
                                                "--rebalance",
                                                "off",
                                                "--rebalance-period",
                                                "7",
                                                "--rebalance-min-gain",
                                                "0.123456789",
                                                "--min-replicas",
                                                "3",
                                                "--ban-cooldown",
                                                "77",
                                                "--aggregation",
                                                "centered-clip",
                                                "--clip-radius",
                                                "1.5",
                                                "--clip-iterations",
                                                "5",
                                                "--coordinator",
                                                "example.org:7000",
                                                "--stage",
                                                "1",
                                                "--host",
                                                "10.0.0.2",
                                                "--server-port",
                                                "7002",
                                                "--bulk-port",
                                                "7003",
                                                "--batch-size",
                                                "32",
                                                "--slowdown",
                                                "2.5",
                                                "--averaging-compression",
                                                "blockwise8",
                                                "--stale-wait",
                                                "0.25",
                                                "--activation-cache-mb",
                                                "64",
                                                "--max-outstanding",
                                                "7",
                                                "--precision",
                                                "bf16",
                                                "--fault",
                                                "hang-round",
                                                "--fault-after",
                                                "3",
                                                "--allow-faults",
                                                "--corpus",
                                                "/tmp/corpus",
                                                "--trainer-slot",
                                                "3",
                                                "--in-flight",
                                                "2",
                                                "--max-steps",
                                                "9",
                                                "--forward-timeout",
                                                "11",
                                                "--backward-timeout",
                                                "22",
                                                "--max-retries",
                                                "2",
                                                "--no-server-wait",
                                                "33",
                                                "--routing",
                                                "static",
                                                "--compression",
                                                "fp16",
                                                "--ema-alpha",
                                                "0.3",
                                                "--backward-cost",
                                                "3",
                                                "--ban-base",
                                                "2",
                                                "--ban-max",
                                                "20",
                                                "--busy-retries",
                                                "2",
                                                "--verify-fraction",
                                                "0.25",
                                                "--verify-strikes",
                                                "4",
                                                "--verify-probation",
                                                "5",
                                                "--commit-grace",
                                                "0.2",
                                                "--checkpoint-dir",
                                                "/tmp/ckpt",
                                                "--checkpoint-every",
                                                "90s",
                                                "--checkpoint-keep",
                                                "5",
                                                "--servers-per-stage",
                                                "3",
                                                "--trainers",
                                                "2",
                                                "--chaos",
                                                "mixed",
                                                "--chaos-every",
                                                "5",
                                                "--chaos-down",
                                                "2",
                                                "--chaos-stage",
                                                "1",
                                                "--chaos-seed",
                                                "9",
                                                "--chaos-coordinator-every",
                                                "40",
                                                "--chaos-coordinator-action",
                                                "stop",
                                                "--control-replicas",
                                                "3",
                                                "--chaos-wipe-at",
                                                "15",
                                                "--server-slowdowns",
                                                "1,3",
                                                "--stage-servers",
                                                "3,1,1"};

/// Values a row's check refuses: just outside each bound of a range, a word
/// not in the list, text no custom check takes.
std::vector<std::string> bad_values(const keys::row& r) {
  const auto& c = r.rule;
  if (!c.is_range())
    return {"no such value"};
  const bool whole = !std::holds_alternative<double>(r.fallback);
  const auto text = [whole](double x) {
    return whole ? std::to_string(static_cast<long long>(x)) : keys::show(keys::value{x});
  };
  std::vector<std::string> out;
  if (std::isfinite(c.lo()))
    out.push_back(text(c.lo_open() ? c.lo() : c.lo() - 1));
  if (std::isfinite(c.hi()))
    out.push_back(text(c.hi_open() ? c.hi() : c.hi() + 1));
  return out;
}

}  // namespace

TEST_CASE("every key round-trips through to_flags and the parser", "[config][keys]") {
  const auto defaults_config = std::make_unique<app_config>();
  const auto defaults = bind_keys(*defaults_config);
  auto set = parse(every_key_set);
  INFO(set.message);
  REQUIRE(set.config);
  const auto original = bind_keys(*set.config);
  REQUIRE(original.size() == swarm_keys().size());
  for (size_t i = 0; i < original.size(); ++i) {
    INFO("--" << original[i].key->flag << " is not set to a value of its own in every_key_set");
    CHECK(keys::current(original[i]) != keys::current(defaults[i]));
  }

  // Every key, --role included: the parsed config equals the original.
  auto all = to_flags(*set.config, true);
  auto back = parse(all);
  INFO(back.message);
  REQUIRE(back.config);
  const auto round = bind_keys(*back.config);
  for (size_t i = 0; i < round.size(); ++i) {
    INFO("--" << round[i].key->flag);
    CHECK(keys::current(round[i]) == keys::current(original[i]));
  }
  CHECK(back.config->checkpoint.every_s == 90);
  CHECK(back.config->trainer.batch_size == 32);
  CHECK(back.config->trainer.coordinator == "example.org:7000");
  CHECK(back.config->server.stage == 1);
  CHECK(back.config->which == role::server);

  // A cluster's child gets exactly the keys that reach the whole swarm: not the
  // launcher's own, nor one process's port, address, stage or test hook.
  auto common = to_flags(*set.config);
  for (const char* own : {"--role",
                          "--out",
                          "--port",
                          "--port-file",
                          "--http-port",
                          "--http-host",
                          "--http-token",
                          "--coordinator",
                          "--stage",
                          "--host",
                          "--server-port",
                          "--slowdown",
                          "--fault",
                          "--fault-after",
                          "--allow-faults",
                          "--trainers",
                          "--servers-per-stage",
                          "--chaos",
                          "--stage-servers",
                          "--server-slowdowns",
                          "--input",
                          "--vocab-size",
                          "--encode",
                          "--val-fraction",
                          "--shard-tokens"}) {
    INFO(own);
    CHECK(std::find(common.begin(), common.end(), own) == common.end());
  }
  common.insert(common.begin(), {"--role", "local"});
  auto child = parse(common);
  INFO(child.message);
  REQUIRE(child.config);
  const auto inherited = bind_keys(*child.config);
  for (size_t i = 0; i < inherited.size(); ++i) {
    INFO("--" << inherited[i].key->flag);
    const bool passed = inherited[i].key->scope == keys::reach::swarm;
    CHECK(keys::current(inherited[i]) == keys::current(passed ? original[i] : defaults[i]));
  }
}

TEST_CASE("no two keys share a flag or a value", "[config][keys]") {
  app_config c;
  std::set<std::string> flags;
  std::set<const void*> places;
  for (const auto& b : bind_keys(c)) {
    INFO("--" << b.key->flag);
    CHECK(flags.insert(b.key->flag).second);
    if (!b.text)
      CHECK(places.insert(std::visit([](auto* p) -> const void* { return p; }, b.where)).second);
  }
  CHECK(flags.size() == swarm_keys().size());
}

TEST_CASE("a bad value for each checked key exits 2 naming the flag", "[config][keys]") {
  int tried = 0;
  for (const auto& r : swarm_keys()) {
    if (!r.rule.checks_anything())
      continue;
    for (const auto& bad : bad_values(r)) {
      auto result = parse({"--role", "local", "--" + r.flag, bad});
      INFO("--" << r.flag << " " << bad << " -> " << result.message);
      CHECK_FALSE(result.config);
      CHECK(result.exit_code == 2);
      CHECK_THAT(result.message, Catch::Contains("--" + r.flag));
      ++tried;
    }
  }
  CHECK(tried >= 60);
}

TEST_CASE("swarm-sim: a bad value for each checked key exits 2 naming the flag", "[config][keys][sim]") {
  swarm::sim::scenario s;
  int tried = 0;
  for (const auto& b : swarm::sim::bind_keys(s)) {
    if (!b.key->rule.checks_anything())
      continue;
    for (const auto& bad : bad_values(*b.key)) {
      auto result = parse_sim({"--" + b.key->flag, bad});
      INFO("--" << b.key->flag << " " << bad << " -> " << result.message);
      CHECK_FALSE(result.config);
      CHECK(result.exit_code == 2);
      CHECK_THAT(result.message, Catch::Contains("--" + b.key->flag));
      ++tried;
    }
  }
  CHECK(tried >= 40);
}

TEST_CASE("checks: ranges as they read, word lists, custom tests", "[config][keys]") {
  const auto unit = keys::check::range("(0, 1]");
  CHECK(unit.lo() == 0);
  CHECK(unit.hi() == 1);
  CHECK(unit.lo_open());
  CHECK_FALSE(unit.hi_open());
  CHECK(unit.message() == "must be in (0, 1]");
  CHECK(unit(keys::value{1.0}).empty());
  CHECK(unit(keys::value{0.0}) == "must be in (0, 1]");
  CHECK_FALSE(unit(keys::value{std::nan("")}).empty());
  const auto positive = keys::check::range("> 0");
  CHECK(positive(keys::value{int64_t{1}}).empty());
  CHECK(positive(keys::value{0}) == "must be > 0");
  CHECK(positive(keys::value{HUGE_VAL}) == "must be > 0");  // a double must be finite too
  CHECK(keys::check::range(">= -1")(keys::value{-1}).empty());
  CHECK(keys::check::range("[0, 65535]").says("port")(keys::value{65536}) == "port");
  for (const char* bad : {"", "x", ">= one", "[1, 0]", "[0, 1", "0..1"}) {
    INFO(bad);
    CHECK_THROWS_AS(keys::check::range(bad), std::invalid_argument);
  }
  const auto words = keys::check::one_of({"on", "off"});
  CHECK(words(keys::value{std::string{"on"}}).empty());
  CHECK(words(keys::value{std::string{""}}) == "must be one of on, off");
  const auto device = keys::check::custom(valid_device, "must be cpu, cuda or cuda:N");
  CHECK(device(keys::value{std::string{"cuda:0"}}).empty());
  CHECK_FALSE(device(keys::value{std::string{"cuda:"}}).empty());
  // A check that cannot check the key's type is a mistake in the table, found when it is built.
  struct section {
    std::string name;
    int count = 0;
  };
  CHECK_THROWS_AS(keys::key("name", &section::name, "", positive, "?"), std::logic_error);
  CHECK_THROWS_AS(keys::key("count", &section::count, "", words, "?"), std::logic_error);
  CHECK_NOTHROW(keys::key("count", &section::count, "", positive, "?"));
}

TEST_CASE("swarm-sim's flags land in swarm's own sections, word keys included", "[config][keys][sim]") {
  const auto r = parse_sim({"--routing", "static", "--max-outstanding", "2", "--routing-probe", "0", "--busy-retries",
                            "1", "--fault", "hang-round"});
  // --fault is no key of swarm-sim: refused, not ignored.
  CHECK(r.exit_code == 2);
  const auto ok =
      parse_sim({"--routing", "static", "--max-outstanding", "2", "--routing-probe", "0", "--busy-retries", "1"});
  INFO(ok.message);
  REQUIRE(ok.config);
  CHECK(ok.config->trainer.attempts.pinned);
  CHECK(ok.config->trainer.attempts.busy_retries == 1);
  CHECK(ok.config->server.admission.max_outstanding == 2);
  CHECK(ok.config->trainer.router.probe_requests == 0);
  const auto defaults = parse_sim({});
  REQUIRE(defaults.config);
  CHECK_FALSE(defaults.config->trainer.attempts.pinned);
}
