// Tier (c): the etcd client (net/etcd.hpp) against a real etcd 3.4 process
// (Debian's etcd-server) on loopback: keys, leases, the election and its
// terms, a member that is gone, and bad --control values; and a leader's
// recorder (apps/control.hpp) flushing before it steps down, against a slow stand-in.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <future>
#include <thread>

#include <httplib.h>

#include "apps/control.hpp"
#include "messages/errors.hpp"
#include "config/config.hpp"
#include "net/etcd.hpp"
#include "process_util.hpp"

using namespace swarm;
using namespace swarm::test;
namespace fs = std::filesystem;

namespace {

/// One etcd member in a fresh data folder, stopped and removed at the end.
struct etcd_process {
  fs::path dir;
  int client_port = free_port(), peer_port = free_port();
  pid_t pid = -1;

  /// `pki`: a folder with ca.crt and member.crt/.key (scripts/make_certs.sh):
  /// clients over TLS, and client certificates of that CA required.
  explicit etcd_process(const fs::path& pki = {}) {
    dir = fs::temp_directory_path() /
          ("swarm-test-etcd-" + std::to_string(::getpid()) + "-" + std::to_string(client_port));
    fs::create_directories(dir);
    const std::string client =
        (pki.empty() ? "http" : "https") + std::string{"://127.0.0.1:"} + std::to_string(client_port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args{"etcd",
                                  "--name",
                                  "m0",
                                  "--data-dir",
                                  (dir / "data").string(),
                                  "--listen-client-urls",
                                  client,
                                  "--advertise-client-urls",
                                  client,
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  "m0=" + peer};
    if (!pki.empty())
      args.insert(args.end(),
                  {"--cert-file", (pki / "member.crt").string(), "--key-file", (pki / "member.key").string(),
                   "--trusted-ca-file", (pki / "ca.crt").string(), "--client-cert-auth"});
    pid = spawn_command(args, (dir / "etcd.log").string());
  }
  ~etcd_process() {
    if (pid > 0)
      stop(pid);
    if (std::getenv("SWARM_TEST_KEEP") == nullptr)
      fs::remove_all(dir);
  }
  [[nodiscard]] etcd_member member() const { return {"127.0.0.1", static_cast<uint16_t>(client_port)}; }
};

/// Waits until etcd answers (its start takes about a second).
bool ready(etcd_client& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (c.put("swarm/ready", "1"))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// A prefix lists its keys; a leader's write holds only while it leads.
void check_prefix_and_leader_writes(etcd_client& c) {
  REQUIRE(c.put("swarm/state/b", "2"));
  REQUIRE(c.put("swarm/state/a", "1"));
  REQUIRE(c.put("swarm/statf", "not under the prefix"));
  auto listed = c.get_prefix("swarm/state/");
  REQUIRE(listed);
  REQUIRE(listed->size() == 2);
  CHECK((*listed)[0].key == "swarm/state/a");
  CHECK((*listed)[1].value == "2");
  auto lease = c.grant(30);
  REQUIRE(lease);
  auto won = c.campaign("swarm/writer", "w:1", *lease, std::chrono::milliseconds(5000));
  REQUIRE(won);
  auto wrote = c.put_if_leader(*won, "swarm/state/a", "3");
  REQUIRE(wrote);
  CHECK(*wrote);
  REQUIRE_FALSE(c.revoke(*lease));  // its leadership ends with the lease
  auto refused = c.put_if_leader(*won, "swarm/state/a", "4");
  REQUIRE(refused);
  CHECK_FALSE(*refused);
  auto kept = c.get("swarm/state/a");
  REQUIRE(kept);
  REQUIRE(*kept);
  CHECK((*kept)->value == "3");
}

/// A watch on a prefix calls back once it is in place and on each change under
/// it, until told to stop; quiet for its idle time, it times out.
void check_watch(etcd_client& c, const etcd_member& member) {
  std::atomic<int> calls{0};
  etcd_client watcher({member}, std::chrono::milliseconds(2000));
  auto watching = std::async(std::launch::async, [&] {
    return watcher.watch(
        "swarm/leader/", [&] { return ++calls < 3; }, std::chrono::seconds(10));
  });
  const auto until = [&](int n) {
    for (int i = 0; i < 100 && calls < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return calls.load();
  };
  CHECK(until(1) == 1);                // in place
  REQUIRE(c.put("swarm/other", "x"));  // not under the prefix
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(calls == 1);
  REQUIRE(c.put("swarm/leader/a", "1"));
  CHECK(until(2) == 2);
  REQUIRE(c.put("swarm/leader/b", "2"));  // the third call says stop
  REQUIRE(watching.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(watching.get());
  CHECK(calls == 3);
  // Quiet for its idle time: TIMEOUT, to be made again.
  auto quiet = watcher.watch(
      "swarm/quiet/", [] { return true; }, std::chrono::milliseconds(700));
  REQUIRE(quiet);
  CHECK(code_of(quiet) == errc::TIMEOUT);
}

/// One leader at a time; the next one's term is larger.
void check_election(etcd_client& c, const etcd_member& member) {
  auto a_lease = c.grant(30), b_lease = c.grant(30);
  REQUIRE(a_lease);
  REQUIRE(b_lease);
  auto none = c.leader("swarm/coordinator");
  INFO((none ? std::string{} : describe(none.error())));
  REQUIRE(none);
  CHECK_FALSE(*none);

  auto a = c.campaign("swarm/coordinator", "a:1", *a_lease, std::chrono::milliseconds(5000));
  REQUIRE(a);
  CHECK(a->term > 0);
  auto now = c.leader("swarm/coordinator");
  REQUIRE(now);
  REQUIRE(*now);
  CHECK((*now)->value == "a:1");
  CHECK((*now)->create_revision == a->term);

  // b waits behind a: its campaign does not return while a leads.
  etcd_client other({member}, std::chrono::milliseconds(2000));
  auto early = other.campaign("swarm/coordinator", "b:0", *b_lease, std::chrono::milliseconds(1500));
  REQUIRE_FALSE(early);
  CHECK(code_of(early.error()) == errc::TIMEOUT);

  // a's lease ends (as when its process dies and stops renewing): b leads.
  // Under a fresh lease: etcd withdraws the campaign that timed out.
  auto b_fresh = other.grant(30);
  REQUIRE(b_fresh);
  auto b = std::async(std::launch::async, [&] {
    return other.campaign("swarm/coordinator", "b:1", *b_fresh, std::chrono::milliseconds(10000));
  });
  REQUIRE_FALSE(c.revoke(*a_lease));
  auto won = b.get();
  REQUIRE(won);
  CHECK(won->term > a->term);
  auto after = c.leader("swarm/coordinator");
  REQUIRE(after);
  REQUIRE(*after);
  CHECK((*after)->value == "b:1");

  REQUIRE_FALSE(other.resign(*won));
  auto empty = c.leader("swarm/coordinator");
  REQUIRE(empty);
  CHECK_FALSE(*empty);
}

}  // namespace

TEST_CASE("etcd: keys, leases, and an election whose term grows with each leader", "[etcd]") {
  etcd_process etcd;
  etcd_client c({etcd.member()}, std::chrono::milliseconds(2000));
  REQUIRE(ready(c));

  SECTION("keys round-trip bytes; a missing key is none") {
    const std::string value{"a\0b\xff", 4};
    auto rev = c.put("swarm/stage/0", value);
    REQUIRE(rev);
    auto got = c.get("swarm/stage/0");
    REQUIRE(got);
    REQUIRE(*got);
    CHECK((*got)->value == value);
    CHECK((*got)->mod_revision == *rev);
    auto none = c.get("swarm/nothing");
    REQUIRE(none);
    CHECK_FALSE(*none);
  }

  SECTION("a prefix lists its keys; a leader's write holds only while it leads") { check_prefix_and_leader_writes(c); }

  SECTION("a watch on a prefix calls back once it is in place and on each change under it, until told to stop") {
    check_watch(c, etcd.member());
  }

  SECTION("a key tied to a lease goes with it") {
    auto lease = c.grant(30);
    REQUIRE(lease);
    REQUIRE(c.put("swarm/leased", "x", *lease));
    auto ttl = c.keep_alive(*lease);
    REQUIRE(ttl);
    CHECK(*ttl > 0);
    REQUIRE_FALSE(c.revoke(*lease));
    auto gone = c.get("swarm/leased");
    REQUIRE(gone);
    CHECK_FALSE(*gone);
    auto expired = c.keep_alive(*lease);
    CHECK((!expired || *expired == 0));
  }

  SECTION("one leader at a time; the next one's term is larger") { check_election(c, etcd.member()); }

  SECTION("a member that is gone answers with an error, in time") {
    etcd_client both({{"127.0.0.1", static_cast<uint16_t>(free_port())}, etcd.member()},
                     std::chrono::milliseconds(1000));
    CHECK(both.put("swarm/k", "v"));  // the dead first member is skipped
    stop(etcd.pid);
    etcd.pid = -1;
    const auto start = std::chrono::steady_clock::now();
    auto r = c.get("swarm/k");
    REQUIRE_FALSE(r);
    CHECK(is_retryable(r.error()));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
}

TEST_CASE("etcd: over TLS with client certificates; without one, or with another CA's, refused", "[etcd]") {
  const fs::path pki = fs::temp_directory_path() / ("swarm-test-etcd-pki-" + std::to_string(::getpid()));
  const fs::path other = pki / "other";
  const std::string certs = "bash " SWARM_SOURCE_DIR "/scripts/make_certs.sh ";
  REQUIRE(std::system((certs + "ca " + pki.string() + " >/dev/null").c_str()) == 0);
  REQUIRE(std::system(("SAN=IP:127.0.0.1 " + certs + "node " + pki.string() + " member >/dev/null").c_str()) == 0);
  REQUIRE(std::system((certs + "node " + pki.string() + " client >/dev/null").c_str()) == 0);
  REQUIRE(std::system((certs + "ca " + other.string() + " >/dev/null").c_str()) == 0);
  REQUIRE(std::system((certs + "node " + other.string() + " client >/dev/null").c_str()) == 0);
  {
    etcd_process etcd(pki);
    const auto ca = (pki / "ca.crt").string();
    etcd_client c({etcd.member()}, std::chrono::milliseconds(2000),
                  {ca, (pki / "client.crt").string(), (pki / "client.key").string()});
    REQUIRE(ready(c));
    auto got = c.get("swarm/ready");
    REQUIRE(got);
    REQUIRE(*got);
    CHECK((*got)->value == "1");
    etcd_client plain({etcd.member()}, std::chrono::milliseconds(2000));
    CHECK_FALSE(plain.get("swarm/ready"));  // HTTP to an HTTPS port
    etcd_client no_cert({etcd.member()}, std::chrono::milliseconds(2000), {ca, "", ""});
    CHECK_FALSE(no_cert.get("swarm/ready"));
    etcd_client stranger({etcd.member()}, std::chrono::milliseconds(2000),
                         {ca, (other / "client.crt").string(), (other / "client.key").string()});
    CHECK_FALSE(stranger.get("swarm/ready"));
    etcd_client wrong_ca({etcd.member()}, std::chrono::milliseconds(2000),
                         {(other / "ca.crt").string(), (pki / "client.crt").string(), (pki / "client.key").string()});
    CHECK_FALSE(wrong_ca.get("swarm/ready"));  // etcd's certificate is not of the CA it trusts
  }
  fs::remove_all(pki);
}

TEST_CASE("etcd: --control values", "[etcd]") {
  std::string why;
  auto ok = parse_control("etcd://10.0.0.1:2379,host-b:2380", why);
  REQUIRE(ok);
  REQUIRE(ok->size() == 2);
  CHECK((*ok)[0].first == "10.0.0.1");
  CHECK((*ok)[1].second == 2380);
  for (const char* bad : {"", "etcd://", "http://h:1", "etcd://h", "etcd://h:0", "etcd://h:99999", "etcd://h:1,",
                          "etcd://:1", "etcd://h:1x"}) {
    INFO(bad);
    why.clear();
    CHECK_FALSE(parse_control(bad, why));
    CHECK(why.find("--control") != std::string::npos);
  }
}

TEST_CASE("etcd: plain HTTP off this machine beside a TLS swarm is said at start", "[etcd]") {
  // The TLS files need not exist: the warning comes before they are read.
  const std::vector<std::string> tls{"--tls-ca",           "/nonexistent/ca.crt", "--tls-cert",
                                     "/nonexistent/n.crt", "--tls-key",           "/nonexistent/n.key"};
  auto args = std::vector<std::string>{"--role", "status", "--control", "etcd://10.0.0.1:2379"};
  args.insert(args.end(), tls.begin(), tls.end());
  const auto [code, out] = run_swarm_output(args, 30);
  CHECK(code == 2);  // then the missing TLS files
  CHECK_THAT(out, Catch::Contains("swarm: warning: --control etcd://10.0.0.1:2379 is plain HTTP while this swarm "
                                  "uses TLS"));
  args[3] = "etcd://127.0.0.1:2379";
  CHECK_THAT(run_swarm_output(args, 30).second, !Catch::Contains("warning"));
}

TEST_CASE("etcd: an answer that is not etcd's is an error, never a crash", "[etcd]") {
  // A stand-in on the member's port answering each path with something wrong.
  httplib::Server fake;
  fake.Post("/v3/kv/put", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("[1, 2]", "application/json");  // JSON, not an object
  });
  fake.Post("/v3/kv/range", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"kvs\": 7, \"count\": \"x\"}", "application/json");  // fields of the wrong types
  });
  fake.Post("/v3/lease/grant",
            [](const httplib::Request&, httplib::Response& res) { res.set_content("not json at all", "text/plain"); });
  fake.Post("/v3/lease/revoke", [](const httplib::Request&, httplib::Response& res) {
    res.status = 500;
    res.set_content("{\"code\": \"fourteen\", \"message\": 3}", "application/json");
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread server([&] { fake.listen_after_bind(); });
  etcd_client c({{"127.0.0.1", static_cast<uint16_t>(port)}}, std::chrono::milliseconds(2000));

  auto put = c.put("k", "v");
  REQUIRE_FALSE(put);
  CHECK(code_of(put.error()) == errc::INTERNAL);
  auto get = c.get("k");
  REQUIRE(get);  // wrong types read as absent
  CHECK_FALSE(*get);
  auto grant = c.grant(5);
  REQUIRE_FALSE(grant);
  CHECK(code_of(grant.error()) == errc::INTERNAL);
  auto revoke = c.revoke(1);
  REQUIRE(revoke);
  CHECK(code_of(revoke) == errc::BAD_REQUEST);
  CHECK(describe(revoke).find("HTTP 500") != std::string::npos);
  auto unknown = c.leader("x");  // 404 with a body that is not JSON
  REQUIRE_FALSE(unknown);
  fake.stop();
  server.join();
}

TEST_CASE("etcd: a leader stepping down writes its queued records first (a bounded wait)", "[etcd][control]") {
  // A stand-in that takes 300 ms per write, so that records queue behind the
  // one in flight. Before, a clean stop (SIGTERM) dropped what was queued: the
  // successor resumed from older positions.
  std::atomic<int> written{0};
  httplib::Server fake;
  fake.Post("/v3/kv/txn", [&](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ++written;
    res.set_content(R"({"succeeded": true})", "application/json");
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread server([&] { fake.listen_after_bind(); });
  const control::endpoints where{{{"127.0.0.1", static_cast<uint16_t>(port)}}, {}};
  const etcd_leadership won{"c", "swarm/leader/1", 5, 1};
  const auto queue = [](control::recorder& rec, std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      rec.put(key, "{}");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first is in flight, the rest queue
    }
  };
  {
    control::recorder rec(where, won);
    queue(rec, {"state/stage/0", "state/stage/1", "state/rebalancer"});
    const auto asked = std::chrono::steady_clock::now();
    CHECK_FALSE(rec.flush(std::chrono::milliseconds(100)));  // bounded: two writes are still to come
    CHECK(std::chrono::steady_clock::now() - asked < std::chrono::milliseconds(500));
    CHECK(rec.flush(std::chrono::seconds(2)));
    CHECK(written == 3);
  }
  {
    control::recorder rec(where, won);
    queue(rec, {"state/stage/0", "state/stage/1"});
  }  // the destructor flushes too
  CHECK(written == 5);
  fake.stop();
  server.join();
}
