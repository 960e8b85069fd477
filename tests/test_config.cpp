// Config parsing: files, flags overriding files, validation messages, to_flags round trip.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "config/config.hpp"
#include "sim/scenario.hpp"

using namespace swarm;

namespace {

parse_result parse(std::vector<std::string> args) {
  args.insert(args.begin(), "swarm");
  std::vector<const char*> argv;
  for (auto& a : args)
    argv.push_back(a.c_str());
  return parse_config(static_cast<int>(argv.size()), argv.data());
}

std::string write_temp(const std::string& text) {
  char name[] = "/tmp/swarm-config-XXXXXX";
  close(mkstemp(name));
  std::ofstream(name) << text;
  return name;
}

} // namespace

TEST_CASE("defaults are valid and the role is required", "[config]") {
  auto ok = parse({"--role", "local"});
  REQUIRE(ok.config);
  CHECK(ok.config->which == role::local);
  CHECK(ok.config->device == "cpu");
  CHECK(ok.config->model.d_model == 128);
  auto missing = parse({});
  CHECK_FALSE(missing.config);
  CHECK(missing.exit_code == 2);
  CHECK(missing.message.find("--role") != std::string::npos);
  auto bad = parse({"--role", "wizard"});
  CHECK_FALSE(bad.config);
  CHECK(bad.exit_code == 2);
}

TEST_CASE("the shipped config files parse", "[config]") {
  for (const char* file : {SWARM_SOURCE_DIR "/config/tiny", SWARM_SOURCE_DIR "/config/small"}) {
    INFO(file);
    auto r = parse({"--role", "cluster", "--config", file});
    REQUIRE(r.config);
    CHECK(r.config->config_file == file);
    CHECK(r.config->stages == 2);
  }
  auto tiny = parse({"--role", "local", "--config", SWARM_SOURCE_DIR "/config/tiny"});
  REQUIRE(tiny.config);
  CHECK(tiny.config->model.d_model == 64);
  CHECK(tiny.config->trainer.batch_size == 16);
}

TEST_CASE("flags override the file", "[config]") {
  const auto file = write_temp("d-model = 96\nn-heads = 3\nstages = 2\n");
  auto r = parse({"--role", "local", "--config", file, "--d-model", "48"});
  REQUIRE(r.config);
  CHECK(r.config->model.d_model == 48);
  CHECK(r.config->model.n_heads == 3);
  std::remove(file.c_str());
}

TEST_CASE("a config file with a misspelt key or a line that is not key = value is refused", "[config]") {
  struct bad_file {
    std::string text;
    std::string says;
  };
  const std::vector<bad_file> cases = {
      {"stages = 2\n# a comment\n\nd-modle = 64\n", ":4: unknown key 'd-modle'; the nearest flag is 'd-model'"},
      {"d-model = 64\njust some words\n", ":2: not `key = value`: just some words"},
      {"n-heads =\n", ":1: not `key = value`"},
      {"[trainer]\nlr = 0.1\n", ":1: not `key = value`: [trainer]"},
  };
  for (const auto& c : cases) {
    const auto file = write_temp(c.text);
    INFO(c.text);
    auto r = parse({"--role", "local", "--config", file});
    CHECK_FALSE(r.config);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.message, Catch::Contains(file + c.says));
    std::remove(file.c_str());
  }
  auto passwd = parse({"--role", "local", "--config=/etc/passwd"});
  CHECK(passwd.exit_code == 2);
  CHECK_THAT(passwd.message, Catch::Contains("/etc/passwd:1: not `key = value`: root:"));
  // Comments after a value, and every flag's own name, stay fine.
  const auto good = write_temp("lr = 0.002   # a comment\nmax-steps = 5\n");
  auto ok = parse({"--role", "local", "--config", good});
  REQUIRE(ok.config);
  CHECK(ok.config->trainer.max_steps == 5);
  std::remove(good.c_str());
}

TEST_CASE("--checkpoint-every takes steps or seconds", "[config]") {
  auto steps = parse({"--role", "local", "--checkpoint-every", "250"});
  REQUIRE(steps.config);
  CHECK(steps.config->checkpoint.every_steps == 250);
  CHECK(steps.config->checkpoint.every_s == 0);
  auto secs = parse({"--role", "local", "--checkpoint-every", "1.5s"});
  REQUIRE(secs.config);
  CHECK(secs.config->checkpoint.every_steps == 0);
  CHECK(secs.config->checkpoint.every_s == 1.5);
  auto fallback = parse({"--role", "local"});
  REQUIRE(fallback.config);
  CHECK(fallback.config->checkpoint.every_s == 60);
  CHECK(fallback.config->checkpoint.dir.empty());
}

TEST_CASE("bad values get a message naming the flag and the fix", "[config]") {
  struct bad_case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::vector<bad_case> cases{
      {{"--role", "local", "--d-model", "100", "--n-heads", "3"}, "--n-heads 3"},
      {{"--role", "local", "--stages", "9"}, "--stages 9"},
      {{"--role", "local", "--lr", "-1"}, "--lr"},
      {{"--role", "local", "--device", "gpu"}, "must be cpu, cuda or cuda:N"},
      {{"--role", "local", "--device", "cuda:x"}, "must be cpu, cuda or cuda:N"},
      {{"--role", "trainer", "--compression", "int4"}, "compression"},
      {{"--role", "server", "--averaging-compression", "zip"}, "averaging-compression"},
      {{"--role", "trainer", "--bulk-min-bytes", "-1"}, "--bulk-min-bytes -1"},
      {{"--role", "server", "--stage", "0"}, "--coordinator"},
      {{"--role", "server", "--coordinator", "localhost:7000", "--stage", "2"}, "--stage 2"},
      {{"--role", "trainer", "--coordinator", "localhost:99999"}, "HOST:PORT"},
      {{"--role", "local", "--batch-size", "4"}, "--batch-size 4"},
      {{"--role", "local", "--no-such-flag", "1"}, "no-such-flag"},
      {{"--role", "local", "--config", "/nonexistent/file"}, "/nonexistent/file"},
      {{"--role", "server", "--coordinator", "localhost:7000", "--stage", "one"}, "--stage one: must be auto"},
      {{"--role", "server", "--coordinator", "localhost:7000", "--stage", "-1"}, "--stage -1"},
      {{"--role", "cluster", "--stage-servers", "3"}, "--stage-servers 3"},
      {{"--role", "cluster", "--stage-servers", "3,x"}, "--stage-servers 3,x"},
      {{"--role", "cluster", "--stage-servers", "0,0"}, "at least one server"},
      {{"--role", "cluster", "--stage-servers", "2,0", "--rebalance", "off"}, "only --rebalance on"},
      {{"--role", "cluster", "--rebalance", "maybe"}, "--rebalance"},
      {{"--role", "coordinator", "--rebalance-period", "0"}, "--rebalance-period 0"},
      {{"--role", "coordinator", "--rebalance-min-gain", "-0.1"}, "--rebalance-min-gain"},
      {{"--role", "coordinator", "--min-replicas", "0"}, "--min-replicas 0"},
      {{"--role", "local", "--checkpoint-every", "0"}, "--checkpoint-every 0"},
      {{"--role", "local", "--checkpoint-every", "10m"}, "--checkpoint-every 10m"},
      {{"--role", "local", "--checkpoint-every", "s"}, "number of steps (e.g. 100) or of seconds"},
      {{"--role", "local", "--checkpoint-keep", "0"}, "--checkpoint-keep 0"},
      {{"--role", "cluster", "--chaos", "sometimes"}, "--chaos"},
      {{"--role", "cluster", "--chaos-wipe-at", "-1"}, "--chaos-wipe-at -1"},
  };
  for (const auto& c : cases) {
    auto r = parse(c.args);
    INFO(c.args.back() << " -> " << r.message);
    CHECK_FALSE(r.config);
    CHECK(r.exit_code == 2);
    CHECK(r.message.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("servers go to an explicit stage or auto; clusters start even or as listed", "[config]") {
  auto automatic = parse({"--role", "server", "--coordinator", "localhost:7000"});
  REQUIRE(automatic.config);
  CHECK(automatic.config->server.stage == -1);  // auto is the default
  CHECK(parse({"--role", "server", "--coordinator", "localhost:7000", "--stage", "auto"}).config->server.stage == -1);
  CHECK(parse({"--role", "server", "--coordinator", "localhost:7000", "--stage", "1"}).config->server.stage == 1);
  auto even = parse({"--role", "cluster", "--servers-per-stage", "3"});
  REQUIRE(even.config);
  CHECK(even.config->cluster.servers_of_stages(2) == std::vector<int>{3, 3});
  auto listed = parse({"--role", "cluster", "--stage-servers", "3,1", "--servers-per-stage", "5"});
  REQUIRE(listed.config);
  CHECK(listed.config->cluster.servers_of_stages(2) == std::vector<int>{3, 1});
  auto empty_stage = parse({"--role", "cluster", "--stage-servers", "2,0"});  // rebalancing fills it
  REQUIRE(empty_stage.config);
  CHECK(empty_stage.config->cluster.servers_of_stages(2) == std::vector<int>{2, 0});
}

TEST_CASE("help exits 0 and explains units", "[config]") {
  auto r = parse({"--help"});
  CHECK_FALSE(r.config);
  CHECK(r.exit_code == 0);
  CHECK(r.message.find("seconds") != std::string::npos);
  CHECK(r.message.find("--servers-per-stage") != std::string::npos);
}

TEST_CASE("to_flags round-trips every value a child needs", "[config]") {
  auto r = parse({"--role", "cluster", "--config", SWARM_SOURCE_DIR "/config/tiny", "--lr", "0.00123", "--seed", "7"});
  REQUIRE(r.config);
  auto flags = to_flags(*r.config);
  flags.insert(flags.begin(), {"--role", "local"});
  auto back = parse(flags);
  REQUIRE(back.config);
  CHECK(back.config->model.hash() == r.config->model.hash());
  CHECK(back.config->trainer.batch_size == r.config->trainer.batch_size);
  CHECK(back.config->trainer.forward_timeout_s == r.config->trainer.forward_timeout_s);
  CHECK(back.config->model.lr == 0.00123);
  // The coordinator a cluster starts gets its rebalancing settings.
  auto tuned = parse({"--role", "cluster", "--rebalance", "off", "--rebalance-period", "7", "--rebalance-min-gain",
                      "0.25", "--min-replicas", "3"});
  REQUIRE(tuned.config);
  auto tuned_flags = to_flags(*tuned.config);
  tuned_flags.insert(tuned_flags.begin(), {"--role", "coordinator"});
  auto child = parse(tuned_flags);
  REQUIRE(child.config);
  CHECK(child.config->coordinator.rebalance == "off");
  CHECK(child.config->coordinator.rebalance_period_s == 7);
  CHECK(child.config->coordinator.rebalance_min_gain == 0.25);
  CHECK(child.config->coordinator.min_replicas == 3);
}

TEST_CASE("split_host_port", "[config]") {
  CHECK(split_host_port("127.0.0.1:7000") == std::make_pair(std::string{"127.0.0.1"}, uint16_t{7000}));
  CHECK_FALSE(split_host_port("127.0.0.1"));
  CHECK_FALSE(split_host_port(":80"));
  CHECK_FALSE(split_host_port("h:0"));
  CHECK_FALSE(split_host_port("h:65536"));
  CHECK_FALSE(split_host_port("h:8a"));
}

TEST_CASE("model hash changes with any model field", "[config]") {
  model_config a, b;
  CHECK(a.hash() == b.hash());
  b.lr = 0.0011;
  CHECK(a.hash() != b.hash());
  b = a;
  b.seed = 2;
  CHECK(a.hash() != b.hash());
}

namespace {

/// README.md and every docs/*.md, one after the other.
std::string docs_text() {
  std::vector<std::filesystem::path> files{SWARM_SOURCE_DIR "/README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(SWARM_SOURCE_DIR "/docs"))
    if (entry.path().extension() == ".md")
      files.push_back(entry.path());
  std::string all;
  for (const auto& f : files) {
    std::ifstream in(f);
    all.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return all;
}

} // namespace

TEST_CASE("the docs document every flag and every metrics event", "[config][readme]") {
  const std::string readme = docs_text();
  REQUIRE_FALSE(readme.empty());
  const auto help = parse({"--help"}).message;
  int flags = 0;
  for (size_t pos = help.find("--"); pos != std::string::npos; pos = help.find("--", pos + 2)) {
    const auto end = help.find_first_not_of("abcdefghijklmnopqrstuvwxyz-", pos + 2);
    const auto flag = help.substr(pos, end - pos);
    if (flag.size() <= 2)
      continue;
    INFO(flag);
    CHECK(readme.find(flag) != std::string::npos);
    ++flags;
  }
  CHECK(flags > 30);

  // Every event some source file emits has a row in docs/metrics.md's table.
  int events = 0;
  for (const char* dir : {"/actors", "/apps", "/models", "/sim", "/net", "/observe"})
    for (const auto& entry : std::filesystem::directory_iterator(std::string{SWARM_SOURCE_DIR} + dir)) {
      if (!entry.is_regular_file())
        continue;
      std::ifstream src(entry.path());
      const std::string code((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
      for (size_t pos = code.find("emit(\""); pos != std::string::npos; pos = code.find("emit(\"", pos + 1)) {
        const auto name = code.substr(pos + 6, code.find('"', pos + 6) - pos - 6);
        INFO(entry.path().string() << " emits " << name);
        CHECK(readme.find("| `" + name + "` |") != std::string::npos);
        ++events;
      }
    }
  CHECK(events >= 7);
}

TEST_CASE("the docs document every swarm-sim flag", "[config][readme][sim]") {
  const std::string readme = docs_text();
  std::vector<std::string> args{"swarm-sim", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const auto help = swarm::sim::parse_scenario(static_cast<int>(argv.size()), argv.data()).message;
  int flags = 0;
  for (size_t pos = help.find("--"); pos != std::string::npos; pos = help.find("--", pos + 2)) {
    const auto end = help.find_first_not_of("abcdefghijklmnopqrstuvwxyz-", pos + 2);
    const auto flag = help.substr(pos, end - pos);
    if (flag.size() <= 2) continue;
    INFO(flag);
    CHECK(readme.find(flag) != std::string::npos);
    ++flags;
  }
  CHECK(flags > 40);
}
