// Config parsing: files, flags overriding files, validation messages, to_flags round
// trip; the table of keys and what is generated from it (options, checks, flags, docs).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <memory>
#include <set>

#include <unistd.h>

#include "base/metrics_events.hpp"
#include "config/config.hpp"
#include "config/family.hpp"
#include "config/keys.hpp"
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

}  // namespace

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
  for (const char* file : {SWARM_SOURCE_DIR "/config/tiny", SWARM_SOURCE_DIR "/config/small",
                           SWARM_SOURCE_DIR "/config/llama-small", SWARM_SOURCE_DIR "/config/llama-shared"}) {
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
      {{"--role", "trainer", "--coordinator", "localhost:7000", "--trainer-slot", "-1"},
       "--trainer-slot -1: must be auto"},
      {{"--role", "trainer", "--coordinator", "localhost:7000", "--trainer-slot", "4096"}, "--trainer-slot 4096"},
      {{"--role", "local", "--model", "mamba"}, "--model"},
      {{"--role", "local", "--n-layers", "4", "--share-layers", "3"}, "--share-layers 3: must divide n-layers"},
      {{"--role", "cluster", "--n-layers", "4", "--share-layers", "4", "--stages", "2"}, "n-layers / share-layers"},
      {{"--role", "local", "--model", "llama", "--n-kv-heads", "3"}, "--n-kv-heads 3: must be 0 (= n-heads) or divide"},
      {{"--role", "local", "--model", "llama", "--d-model", "60"}, "even head width"},
      {{"--role", "local", "--model", "llama", "--norm-eps", "0"}, "--norm-eps 0"},
      {{"--role", "local", "--model", "qwen2", "--n-kv-heads", "3"}, "--n-kv-heads 3: must be 0 (= n-heads) or divide"},
      {{"--role", "local", "--model", "qwen2", "--d-model", "60"}, "even head width"},
      {{"--role", "local", "--lr-schedule", "cosine"}, "--lr-schedule cosine: decays to --min-lr at --max-steps"},
      {{"--role", "local", "--lr-schedule", "cosine", "--max-steps", "5", "--warmup-steps", "5"}, "--lr-schedule"},
      {{"--role", "local", "--min-lr", "0.01", "--lr", "0.001"}, "--min-lr 0.01: must be <= --lr"},
      {{"--role", "local", "--optimizer", "sgd"}, "--optimizer"},
      {{"--role", "cluster", "--boundary", "pca:2"}, "must be none, bottleneck:K or maxout:K"},
      {{"--role", "cluster", "--boundary", "maxout:"}, "must be none, bottleneck:K or maxout:K"},
      {{"--role", "cluster", "--boundary", "maxout:3", "--d-model", "128"}, "K of at least 2 that divides"},
      {{"--role", "cluster", "--boundary", "bottleneck:1"}, "K of at least 2"},
      {{"--role", "cluster", "--boundary", "bottleneck:2", "--stages", "1"}, "--stages 2 or more"},
      {{"--role", "server", "--stale-wait", "-1"}, "--stale-wait -1"},
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
  CHECK(parse({"--role", "trainer", "--coordinator", "localhost:7000"}).config->trainer.slot == -1);
  CHECK(parse({"--role", "trainer", "--coordinator", "localhost:7000", "--trainer-slot", "2"}).config->trainer.slot ==
        2);
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
  CHECK(child.config->coordinator.moves.min_gain == 0.25);
  CHECK(child.config->coordinator.moves.min_replicas == 3);
}

TEST_CASE("model families: one table, each descriptor whole, --model and its help made from it", "[config][families]") {
  const auto names = family_names();
  CHECK(names == std::vector<std::string>{"gpt", "llama", "qwen2"});
  const auto help = parse({"--help"}).message;
  std::set<std::string> architectures;
  for (const auto* f : model_families()) {
    INFO(f->name);
    CHECK(find_family(f->name) == f);
    CHECK(help.find(f->name + " (" + f->summary + ")") != std::string::npos);
    CHECK(architectures.insert(f->hf_architecture).second);
    for (const bool ok :
         {f->ffn_width != nullptr, f->norm_eps != nullptr, f->block_madds != nullptr, f->block_parameters != nullptr,
          f->validate != nullptr, f->hf_embeddings != nullptr, f->hf_layer != nullptr, f->hf_head != nullptr,
          f->hf_config != nullptr, !f->block.empty(), !f->final_norm.empty(), !f->hf_model_type.empty()})
      CHECK(ok);
    auto r = parse({"--role", "local", "--model", f->name, "--d-model", "64", "--n-heads", "4"});
    REQUIRE(r.config);
    CHECK(&family_of(r.config->model) == f);
  }
  // A key only some families read says which.
  CHECK(families_reading("n-kv-heads") == "llama, qwen2");
  CHECK(help.find("llama, qwen2: key/value heads") != std::string::npos);
  model_config m;
  m.arch = "mamba";
  CHECK(find_family(m.arch) == nullptr);
  CHECK_THROWS_AS(family_of(m), std::invalid_argument);
}

TEST_CASE("qwen2: llama's fields and rules, grouped-query attention, its own blocks' parameters",
          "[config][families]") {
  model_config l;
  l.arch = "llama";
  l.d_model = 64;
  l.n_heads = 4;
  l.n_kv_heads = 2;
  auto q = l;
  q.arch = "qwen2";
  CHECK(q.kv_heads() == 2);
  CHECK(q.ffn_width() == l.ffn_width());
  const auto& qwen2 = family_of(q);
  // q, k and v biases: d + 2 kv_dim (kv_dim = 2 heads of 16) beyond llama's block.
  CHECK(qwen2.block_parameters(q) == family_of(l).block_parameters(l) + 64 + 2 * 32);
  CHECK(qwen2.block_madds(q) == family_of(l).block_madds(l));
  // gpt has no grouped-query attention: --n-kv-heads builds nothing there.
  auto g = l;
  g.arch = "gpt";
  CHECK(g.kv_heads() == 4);
  CHECK(g.ffn_width() == 4 * 64);
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
  // gpt's hash is what it was before model families: checkpoints written then still load.
  CHECK(a.hash() == 0x88194ccb015d16e7ULL);  // FNV-1a of "128 4 4 128 8 256 0.001 0.1 0.9 0.95 1 1"
  // The llama fields count for llama, each one; for gpt they build nothing and do not.
  b = a;
  b.rope_theta = 5e5;
  CHECK(a.hash() == b.hash());
  model_config l;
  l.arch = "llama";
  CHECK(l.hash() != a.hash());
  // llama's too is what it was before the families' table: FNV-1a of "... 1 1 llama 4 512 1e-05 10000".
  CHECK(l.hash() == 0x92ede05133ab3537ULL);
  // qwen2 builds other blocks from the same fields: its own hash.
  auto q = l;
  q.arch = "qwen2";
  CHECK(q.hash() != l.hash());
  CHECK(q.hash() == 0xf0ff3ee2b123d211ULL);  // "... 1 1 qwen2 4 512 1e-05 10000"
  for (int field = 0; field < 5; ++field) {
    auto m = l;
    if (field == 4)
      m.share_layers = 2;
    if (field == 0)
      m.n_kv_heads = 2;
    if (field == 1)
      m.ffn_dim = 100;
    if (field == 2)
      m.norm_eps = 1e-6;
    if (field == 3)
      m.rope_theta = 5e5;
    INFO("llama field " << field);
    CHECK(m.hash() != l.hash());
  }
  // n_kv_heads 0 and n_heads build the same model, so they hash the same.
  auto same = l;
  same.n_kv_heads = l.n_heads;
  CHECK(same.hash() == l.hash());
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

}  // namespace

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

  // Every event some source file emits has a row in base/metrics_events.cpp (so in docs/metrics.md).
  std::set<std::string> documented;
  for (const auto& e : swarm::metrics_events())
    documented.insert(e.name);
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
        CHECK(documented.count(name) == 1);
        ++events;
      }
    }
  CHECK(events >= 7);
}

TEST_CASE("the docs document every swarm-sim flag", "[config][readme][sim]") {
  const std::string readme = docs_text();
  std::vector<std::string> args{"swarm-sim", "--help"};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  const auto help = swarm::sim::parse_scenario(static_cast<int>(argv.size()), argv.data()).message;
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
  CHECK(flags > 40);
}

// --- the table of keys (config/keys.cpp) and what is generated from it ---------

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

swarm::sim::parse_result parse_sim(std::vector<std::string> args) {
  args.insert(args.begin(), "swarm-sim");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  return swarm::sim::parse_scenario(static_cast<int>(argv.size()), argv.data());
}

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

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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
  for (const char* own : {"--role",         "--out",           "--port",
                          "--port-file",    "--http-port",     "--http-host",
                          "--coordinator",  "--stage",         "--host",
                          "--server-port",  "--slowdown",      "--fault",
                          "--fault-after",  "--trainers",      "--servers-per-stage",
                          "--chaos",        "--stage-servers", "--server-slowdowns",
                          "--input",        "--vocab-size",    "--encode",
                          "--val-fraction", "--shard-tokens"}) {
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

TEST_CASE("the markdown tables have one row per key", "[config][keys]") {
  const auto count_rows = [](const std::string& md, const std::string& flag) {
    int n = 0;
    for (size_t pos = md.find("| `--" + flag + "` |"); pos != std::string::npos;
         pos = md.find("| `--" + flag + "` |", pos + 1))
      ++n;
    return n;
  };
  const auto rows_of = [](const std::string& md) {
    int n = 0;
    for (size_t pos = md.find("\n| `--"); pos != std::string::npos; pos = md.find("\n| `--", pos + 1))
      ++n;
    return n;
  };
  /// Every flag --help lists (but --help, --config and --help-markdown) has one row.
  const auto check_help = [&](const std::string& help, const std::string& md) {
    int flags = 0;
    for (size_t pos = help.find("  --"); pos != std::string::npos; pos = help.find("  --", pos + 1)) {
      const auto end = help.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", pos + 4);
      const auto flag = help.substr(pos + 4, end - pos - 4);
      if (flag == "help" || flag == "config")
        continue;
      INFO("--" << flag);
      CHECK(count_rows(md, flag) == 1);
      ++flags;
    }
    return flags;
  };
  const auto md = parse({"--help-markdown"}).message;
  CHECK(rows_of(md) == static_cast<int>(swarm_keys().size()));
  CHECK(check_help(parse({"--help"}).message, md) == static_cast<int>(swarm_keys().size()));

  swarm::sim::scenario s;
  const auto sim_keys = swarm::sim::bind_keys(s).size();
  const auto sim_md = parse_sim({"--help-markdown"}).message;
  CHECK(rows_of(sim_md) == static_cast<int>(sim_keys));
  CHECK(check_help(parse_sim({"--help"}).message, sim_md) == static_cast<int>(sim_keys));
  CHECK(sim_keys > 50);
}

TEST_CASE("the docs' flag and event tables are the generated ones", "[config][keys][readme]") {
  const auto block = [&](const std::string& doc, const std::string& marker) {
    const auto text = file_text(SWARM_SOURCE_DIR "/docs/" + doc);
    const auto begin = "<!-- " + marker + ": begin -->\n";
    const auto b = text.find(begin);
    const auto e = text.find("<!-- " + marker + ": end -->");
    return b == std::string::npos || e == std::string::npos ? std::string{}
                                                            : text.substr(b + begin.size(), e - b - begin.size());
  };
  const std::tuple<std::string, std::string, std::string> tables[] = {
      {"flags.md", "swarm --help-markdown", parse({"--help-markdown"}).message},
      {"simulator.md", "swarm-sim --help-markdown", parse_sim({"--help-markdown"}).message},
      {"metrics.md", "swarm --help-metrics-markdown", parse({"--help-metrics-markdown"}).message}};
  for (const auto& [doc, marker, generated] : tables) {
    const auto fresh = "/tmp/" + doc;
    INFO("docs/" << doc << "'s table is stale: paste " << fresh << " (`" << marker << "`) between its markers");
    const bool same = block(doc, marker) == generated;
    if (!same)
      std::ofstream(fresh) << generated;
    CHECK(same);
  }
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
