// Tier (b): the bulk port's door (issue #46). A stranger's greeting (the TLS
// handshake and the hello) has one deadline in all, however slowly its bytes
// come, and strangers waiting at once are capped per address; members get in
// meanwhile. The deadlines here are 1 s, so each case takes a second or two.
#include <catch2/catch.hpp>

#include "socket_helpers.hpp"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "bulk_fixture.hpp"
#include "net/bulk.hpp"
#include "net/tcp.hpp"
#include "net/tls.hpp"

using namespace swarm;
using namespace std::chrono_literals;
using swarm::testing::closed_within;
using swarm::testing::dial_from;
using swarm::testing::endpoint_fixture;

namespace {

using steady = std::chrono::steady_clock;

/// Sends `bytes` one every 200 ms until the other end closes; the seconds
/// that took, or -1 when it had not closed after 4 s.
double trickle_until_closed(int fd, const std::string& bytes) {
  const auto start = steady::now();
  for (size_t i = 0; steady::now() - start < 4s; ++i) {
    if (i < bytes.size())
      ::send(fd, &bytes[i], 1, MSG_NOSIGNAL);
    if (closed_within(fd, 200ms))
      return std::chrono::duration<double>(steady::now() - start).count();
  }
  return -1;
}

/// A CA and a node certificate (scripts/make_certs.sh), removed afterwards.
struct certs {
  std::string dir = "/tmp/swarm-doors-certs-" + std::to_string(::getpid());
  certs() {
    const std::string script = std::string{SWARM_SOURCE_DIR} + "/scripts/make_certs.sh";
    const std::string cmd = "rm -rf " + dir + " && bash " + script + " ca " + dir + " >/dev/null && bash " + script +
                            " node " + dir + " node >/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  ~certs() { std::system(("rm -rf " + dir).c_str()); }
};

}  // namespace

TEST_CASE("a bulk hello trickled a byte at a time is closed at the connect timeout, in all", "[bulk][doors]") {
  bulk_options opts;
  opts.connect_timeout = 1s;
  endpoint_fixture f(opts);
  const int fd = dial_from(f.bulk->port(), 1);
  const double secs = trickle_until_closed(fd, f.bulk->hello());  // the right token: 24 bytes in 4.8 s
  std::printf("a trickled bulk hello was closed after %.1f s (connect timeout 1 s)\n", secs);
  CHECK(secs > 0);    // with a wait per read it would have got in
  CHECK(secs < 2.5);  // one deadline for the whole hello
  CHECK(f.bulk->stats().strangers == 1);
  ::close(fd);
}

TEST_CASE("with TLS, a handshake trickled a byte at a time is closed at the connect timeout, in all",
          "[bulk][doors][tls]") {
  certs c;
  auto ctx = tls_context::load({c.dir + "/ca.crt", c.dir + "/node.crt", c.dir + "/node.key"});
  REQUIRE(ctx);
  bulk_options opts;
  opts.connect_timeout = 1s;
  opts.tls = *ctx;
  endpoint_fixture f(opts);
  const auto refused_before = tls_refusals();
  const int fd = dial_from(f.bulk->port(), 1);
  // A handshake record announcing 512 bytes: OpenSSL waits for all of them.
  const std::string record = std::string{"\x16\x03\x01\x02\x00", 5} + std::string(512, 'q');
  const double secs = trickle_until_closed(fd, record);
  std::printf("a trickled TLS handshake at the bulk port was closed after %.1f s (connect timeout 1 s)\n", secs);
  CHECK(secs > 0);
  CHECK(secs < 2.5);
  CHECK(tls_refusals() > refused_before);  // counted, like a refused handshake
  ::close(fd);
}

TEST_CASE("strangers waiting for their hello are capped per address; a member from elsewhere gets in",
          "[bulk][doors]") {
  bulk_options opts;
  opts.connect_timeout = 30s;  // beyond the test: every close here is the door's
  opts.max_strangers_per_address = 2;
  endpoint_fixture f(opts);
  const uint16_t port = f.bulk->port();
  const int a1 = dial_from(port, 2);
  const int a2 = dial_from(port, 2);
  CHECK_FALSE(closed_within(a2, 100ms));
  const int a3 = dial_from(port, 2);
  CHECK(closed_within(a3, 2s));  // a third stranger from 127.0.0.2: refused at once
  CHECK(f.bulk->stats().crowded == 1);
  const int member = dial_from(port, 3);
  const std::string hello = f.bulk->hello();
  REQUIRE(write_all(member, hello.data(), hello.size()));
  CHECK_FALSE(closed_within(member, 300ms));
  CHECK_FALSE(closed_within(a1, 10ms));
  CHECK(f.bulk->stats().strangers == 0);
  for (int fd : {a1, a2, a3, member})
    ::close(fd);
}
