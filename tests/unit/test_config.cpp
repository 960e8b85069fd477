// Config parsing: files, flags overriding files, validation messages, to_flags round
// trip, model families and the model hash.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>
#include <unistd.h>

#include "config/config.hpp"
#include "config/family.hpp"
#include "config_helpers.hpp"

using namespace swarm;
using namespace swarm::testing::config_helpers;

namespace {

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

TEST_CASE("plain-HTTP etcd off this machine beside a TLS swarm is warned about", "[config]") {
  const std::vector<std::string> tls{"--tls-ca", "ca.crt", "--tls-cert", "n.crt", "--tls-key", "n.key"};
  const auto warnings = [&](std::vector<std::string> args, bool with_tls) {
    args.insert(args.begin(), {"--role", "trainer"});
    if (with_tls)
      args.insert(args.end(), tls.begin(), tls.end());
    const auto r = parse(args);
    REQUIRE(r.config);
    return r.warnings;
  };
  const auto w = warnings({"--control", "etcd://10.0.0.1:2379,127.0.0.1:2379"}, true);
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("plain HTTP while this swarm uses TLS") && Catch::Contains("--control-ca"));
  CHECK(warnings({"--control", "etcd://10.0.0.1:2379"}, false).empty());  // no TLS anywhere: nothing promised
  CHECK(warnings({"--control", "etcd://127.0.0.1:2379,localhost:2380"}, true).empty());  // this machine only
  CHECK(warnings({"--control", "etcd://10.0.0.1:2379", "--control-ca", "etcd-ca.crt"}, true).empty());
  CHECK(warnings({"--coordinator", "10.0.0.1:7000"}, true).empty());
}

TEST_CASE("--http-token: URL-safe characters only", "[config]") {
  const auto ok = parse({"--role", "coordinator", "--http-token", "Abc-1._~z"});
  REQUIRE(ok.config);
  CHECK(ok.config->coordinator.http_token == "Abc-1._~z");
  const auto bad = parse({"--role", "coordinator", "--http-token", "a b&c"});
  CHECK_FALSE(bad.config);
  CHECK_THAT(bad.message, Catch::Contains("--http-token") && Catch::Contains("travels in URLs"));
}

TEST_CASE("a lying fault is refused without --allow-faults", "[config]") {
  // Issue #47: --fault noise makes a server answer with noise, for tests and benchmarks only.
  auto refused = parse({"--role", "server", "--coordinator", "127.0.0.1:1", "--fault", "noise"});
  CHECK_FALSE(refused.config);
  CHECK(refused.exit_code == 2);
  CHECK(refused.message.find("--allow-faults") != std::string::npos);
  auto allowed = parse({"--role", "server", "--coordinator", "127.0.0.1:1", "--fault", "noise", "--allow-faults"});
  REQUIRE(allowed.config);
  CHECK(allowed.config->server.fault == server_config::fault_kind::noise);
  CHECK(parse({"--role", "server", "--coordinator", "127.0.0.1:1", "--fault", "hang-round"})
            .config);  // lies about nothing
}
