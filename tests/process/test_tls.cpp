// Tier (c): a swarm with mutual TLS (net/tls.hpp). Certificates are made
// by scripts/make_certs.sh for each run: the cluster's CA and node, and a
// second CA with a node of its own (a stranger with a valid-looking
// certificate).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <regex>
#include <thread>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "net/basp_guard.hpp"
#include "net/tcp.hpp"
#include "process_util.hpp"

using namespace swarm;
using namespace swarm::test;
using namespace std::chrono_literals;

namespace {

/// A TLS client to 127.0.0.1:port presenting `cert` (none when empty). It
/// trusts any server, so a refusal can only be the server's. True when the
/// server lets it in: CAF's first BASP bytes arrive within 10 s.
bool admitted(uint16_t port, const std::string& cert, const std::string& key) {
  const int fd = connect_loopback(port);
  if (fd < 0)
    return false;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  if (!cert.empty()) {
    SSL_CTX_use_certificate_chain_file(ctx, cert.c_str());
    SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM);
  }
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  char buf[64];
  ERR_clear_error();
  const bool in = SSL_connect(ssl) == 1 && SSL_read(ssl, buf, sizeof buf) > 0;
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  return in;
}

/// A plain BASP client handshake; true when the port closes on it without a byte back.
bool plain_closed(uint16_t port) {
  const int fd = connect_loopback(port);
  if (fd < 0)
    return false;
  std::string hello(basp_header_size + 32, '\0');
  hello[0] = 1;  // client handshake of 32 bytes
  hello[7] = 32;
  ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[64];
  const auto r = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

size_t count_lines(const std::string& path, const std::string& needle) {
  size_t n = 0;
  for (const auto& l : read_lines(path))
    n += l.find(needle) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("a TLS swarm trains while strangers are refused again and again, its links intact", "[tls]") {
  const test_certs c;
  manual_swarm swarm(c.flags(), "tls", true);
  REQUIRE_FALSE(swarm.address.empty());
  swarm.server(0);
  swarm.server(1);
  // It trains until the probing is over and 20 steps more, then is stopped (it
  // lets its microbatches in flight finish); a fixed 500 steps outlasted the
  // probing by ~20 s.
  const pid_t trainer = swarm.trainer({"--max-steps", "0"});
  const auto ports = swarm.public_ports(2);
  REQUIRE(ports.size() == 3);
  // The probe tells members from strangers: a member is let in.
  CHECK(admitted(ports[0], c.cert, c.key));

  // Real processes of the binary: one with a certificate of another CA, one
  // without TLS. Each keeps dialing the coordinator until it gives up.
  const auto stranger =
      spawn_swarm({"--role", "trainer", "--config", tiny, "--coordinator", swarm.address, "--tls-ca", c.other_ca,
                   "--tls-cert", c.other_cert, "--tls-key", c.other_key, "--max-steps", "5", "--coordinator-wait", "5"},
                  swarm.output);
  const auto plain = spawn_swarm({"--role", "trainer", "--config", tiny, "--coordinator", swarm.address, "--max-steps",
                                  "5", "--coordinator-wait", "5"},
                                 swarm.output);
  int refused = 0, probes = 0;
  for (int round = 0; round < 10; ++round)
    for (uint16_t port : ports) {
      refused += !admitted(port, c.other_cert, c.other_key);  // another CA
      refused += !admitted(port, "", "");                     // no certificate
      refused += plain_closed(port);                          // plain BASP
      probes += 3;
    }
  CHECK(refused == probes);
  CHECK(wait_exit(stranger, 60) == std::optional<int>{1});
  CHECK(wait_exit(plain, 60) == std::optional<int>{1});
  // Each said at once what it was trying, and its last line what to check.
  std::ifstream said(swarm.output);
  const std::string out((std::istreambuf_iterator<char>(said)), std::istreambuf_iterator<char>());
  CHECK(out.find("cannot reach the coordinator at " + swarm.address + " yet") != std::string::npos);
  CHECK(out.find("needs --tls-ca, --tls-cert and --tls-key too") != std::string::npos);  // the plain one
  CHECK(out.find("must come from the same --tls-ca") != std::string::npos);              // the stranger
  CHECK(admitted(ports[1], c.cert, c.key));
  CHECK(kill(trainer, 0) == 0);  // all of it while the swarm trained
  const double probed_until = unix_seconds();

  REQUIRE(wait_for_metrics(
      swarm.metrics, [&](const std::vector<std::string>& lines) { return steps_after(lines, probed_until) >= 20; },
      120));
  CHECK(stop(trainer) == 0);
  swarm.shutdown();
  check_trainer_accounting(swarm.metrics, -1);
  // No established link was cut by the refusals: no server went down, no
  // request had to be re-sent.
  for (const auto& l : events(swarm.metrics, "server_down"))
    CHECK(number(l, "t") > probed_until);  // the shutdown's
  CHECK(events(swarm.metrics, "reroute").empty());
  // Each refusing process logged its refusals of this peer address once.
  const auto handshakes = count_lines(swarm.output, "refused a TLS handshake from 127.0.0.1");
  const auto not_tls = count_lines(swarm.output, "not TLS");
  std::printf("%d of %d probes refused; refusals logged: %zu TLS handshakes, %zu non-TLS connections\n", refused,
              probes, handshakes, not_tls);
  CHECK(handshakes == 3);  // coordinator and two servers
  // Each names the prober, never the guard's own loopback connection (ip:port;
  // a race let CAF's first handshake step see it before the guard noted it).
  const std::regex relay_port("handshake from 127\\.0\\.0\\.1:[0-9]");
  for (const auto& l : read_lines(swarm.output)) {
    INFO(l);
    CHECK_FALSE(std::regex_search(l, relay_port));
  }
  CHECK(not_tls == 3);
  const auto stranger_said = count_lines(swarm.output, "cannot reach coordinator");
  CHECK(stranger_said == 2);
}

TEST_CASE("bad TLS files stop a node at start-up with exit 2, naming the file", "[tls]") {
  const test_certs c;
  const std::string bogus = c.dir + "/bogus.pem";
  std::ofstream(bogus) << "not a certificate\n";
  auto coordinator = [&](const std::string& ca, const std::string& cert, const std::string& key) {
    return run_swarm_output(
        {"--role", "coordinator", "--port", "0", "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}, 30);
  };
  const std::pair<std::pair<int, std::string>, std::string> cases[] = {
      {coordinator(c.dir + "/missing.crt", c.cert, c.key), c.dir + "/missing.crt"},
      {coordinator(c.ca, bogus, c.key), bogus},
      {coordinator(c.ca, c.cert, c.other_key), "does not match"},
      {coordinator(c.ca, c.other_cert, c.other_key), "does not verify against --tls-ca"},
      {coordinator(bogus, c.cert, c.key), bogus},
      {run_swarm_output({"--role", "trainer", "--coordinator", "127.0.0.1:1", "--tls-ca", c.ca}, 30), "go together"},
  };
  for (const auto& [result, needle] : cases) {
    INFO(result.second);
    CHECK(result.first == 2);
    CHECK(result.second.find(needle) != std::string::npos);
  }
}
