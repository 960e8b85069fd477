// Tier (c): the guard (messages/basp_guard.hpp) in front of a real
// coordinator process's CAF port. A peer reaches the coordinator through it;
// probes that crash or stall CAF 0.17.6 when they reach it directly (an empty
// client handshake, a 4 GiB length field, random bytes, truncated and slow
// handshakes, many connections at once) are closed at the guard, and the
// coordinator, its link to the peer and new peers are unharmed.
#include <catch2/catch.hpp>

#include <array>
#include <csignal>
#include <fstream>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "messages/basp_guard.hpp"
#include "messages/protocol.hpp"
#include "process_util.hpp"

using namespace swarm;
using namespace swarm::test;
using namespace std::chrono_literals;

namespace {

int dial(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

/// Whether the other end closes `fd` within 20 s (reading what comes first:
/// CAF's server handshake, relayed).
bool gets_closed(int fd) {
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  ssize_t r = 0;
  while ((r = ::recv(fd, buf, sizeof buf, 0)) > 0) {}
  ::close(fd);
  return r == 0 || errno == ECONNRESET;
}

/// Sends `bytes` on a fresh connection and waits until the guard closes it.
bool closed_after(uint16_t port, const std::string& bytes) {
  const int fd = dial(port);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  return gets_closed(fd);
}

std::string basp_header(unsigned op, uint32_t size) {
  std::string h(basp_header_size, '\0');
  h[0] = static_cast<char>(op);
  h[4] = static_cast<char>(size >> 24);
  h[5] = static_cast<char>(size >> 16);
  h[6] = static_cast<char>(size >> 8);
  h[7] = static_cast<char>(size);
  return h;
}

} // namespace

TEST_CASE("garbage at the guard never reaches the coordinator behind it", "[faults][guard]") {
  const std::string port_file = "/tmp/swarm-test-guard-" + std::to_string(getpid()) + ".port";
  std::remove(port_file.c_str());
  const pid_t coordinator = spawn_swarm({"--role", "coordinator", "--config", tiny, "--port", "0", "--port-file",
                                         port_file, "--log-level", "error"});
  struct reaper {
    pid_t pid;
    ~reaper() {
      kill(pid, SIGKILL);
      wait_exit(pid, 10);
    }
  } reap{coordinator};
  int caf_port = 0;
  for (int i = 0; i < 100 && caf_port == 0; ++i) {
    std::ifstream in(port_file);
    in >> caf_port;
    std::this_thread::sleep_for(100ms);
  }
  std::remove(port_file.c_str());
  REQUIRE(caf_port != 0);

  guard_options opts;
  opts.backend_port = static_cast<uint16_t>(caf_port);
  opts.handshake_timeout = 2s;
  opts.max_connections = 64;
  auto guard = basp_guard::start(opts);
  REQUIRE(guard);
  const uint16_t port = (*guard)->port();

  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<stage_actor>("stage_actor");
  cfg.add_message_type<averager_actor>("averager_actor");
  cfg.set("logger.console", caf::atom("none"));
  // As every node: the coordinator drops a link silent for 5 s.
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  caf::actor_system sys{cfg};
  auto reach = [&] {
    auto c = sys.middleman().remote_actor<coordinator_actor>("127.0.0.1", port);
    REQUIRE(c);
    return *c;
  };
  auto answers = [&](const coordinator_actor& c) {
    bool ok = false;
    caf::scoped_actor self{sys};
    self->request(c, 10s, averager_atom::value).receive([&](const averager_actor& a) { ok = bool(a); },
                                                          [](caf::error&) {});
    return ok;
  };
  const auto linked = reach();
  REQUIRE(answers(linked));

  // The two headers that kill or stall CAF, each of its kinds, and a 4 GiB length later on.
  CHECK(closed_after(port, basp_header(1, 0)));
  CHECK(closed_after(port, basp_header(0, 0)));
  CHECK(closed_after(port, basp_header(0, 0xfffffff0u)));
  CHECK(closed_after(port, basp_header(2, 0xfffffff0u)));
  CHECK(closed_after(port, "GET / HTTP/1.1\r\nHost: swarm\r\n\r\n"));
  // Random bytes of every size, truncated handshakes, and garbage after a good handshake.
  std::mt19937 rng(7);
  int probes = 0, closed = 0;
  for (int i = 0; i < 300; ++i, ++probes) {
    std::string junk(1 + rng() % 4096, '\0');
    for (auto& c : junk)
      c = static_cast<char>(rng());
    closed += closed_after(port, junk);
  }
  for (size_t cut = 1; cut < basp_header_size; cut += 5, ++probes)
    closed += closed_after(port, basp_header(1, 32).substr(0, cut));
  for (int i = 0; i < 20; ++i, ++probes)
    closed += closed_after(port, basp_header(1, 32) + std::string(32, 'h') + basp_header(200 + i, 5));
  CHECK(closed == probes);
  // A slow drip: a byte a second never completes a handshake in time.
  const int drip = dial(port);
  for (int i = 0; i < 3; ++i) {
    ::send(drip, "\x01", 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(1s);
  }
  CHECK(gets_closed(drip));
  CHECK(closed_after(port, ""));  // a silent one times out the same way
  // Many at once: beyond the cap they are refused; the guard keeps serving.
  std::vector<int> crowd;
  for (int i = 0; i < 100; ++i)
    crowd.push_back(dial(port));
  std::this_thread::sleep_for(500ms);
  for (int fd : crowd)
    ::close(fd);

  const auto s = (*guard)->stats();
  std::printf("guard: %llu connections accepted, %llu refused, %llu frames passed\n",
              static_cast<unsigned long long>(s.accepted), static_cast<unsigned long long>(s.refused),
              static_cast<unsigned long long>(s.frames_passed));
  CHECK(s.refused >= static_cast<uint64_t>(probes) + 5);
  // The coordinator lived through it all, and so did its link; new peers get in.
  CHECK(kill(coordinator, 0) == 0);
  CHECK(wait_exit(coordinator, 0.1) == std::nullopt);
  CHECK(answers(linked));
  CHECK(answers(reach()));
}
