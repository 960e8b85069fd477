// The bounds net/ holds a stranger to (issue #46): how many may wait at a
// door (greeting_slots, and the guard in front of a stand-in backend), how
// much chunk reassembly holds, how long an etcd reply may be, and that a
// signal in the middle of a socket call is not a broken peer. Time is passed
// in where the code takes it; the socket tests wait at most a few seconds.
#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "socket_helpers.hpp"

#include <caf/all.hpp>

#include "messages/errors.hpp"
#include "net/basp_guard.hpp"
#include "net/chunks.hpp"
#include "net/etcd.hpp"
#include "net/greeting_slots.hpp"
#include "net/tcp.hpp"
#include "net/tls.hpp"

using namespace swarm;
using namespace std::chrono_literals;
using swarm::testing::closed_within;
using swarm::testing::dial_from;

namespace {

using steady = std::chrono::steady_clock;

const caf::actor_addr nobody{};

}  // namespace

TEST_CASE("greeting slots: a cap per address, and a newcomer cuts the stranger waiting longest", "[net][doors]") {
  greeting_slots slots(3, 2);  // 3 strangers at once, 2 per address
  const steady::time_point t0{};
  CHECK(slots.arrive(1, "a", t0).admitted);
  CHECK(slots.arrive(2, "a", t0 + 1s).admitted);
  const auto third = slots.arrive(3, "a", t0 + 2s);
  CHECK_FALSE(third.admitted);  // a's two are waiting
  CHECK(third.evict == -1);
  const auto b = slots.arrive(4, "b", t0 + 3s);
  CHECK(b.admitted);
  CHECK(b.evict == -1);
  const auto c = slots.arrive(5, "c", t0 + 4s);  // full: the oldest (1, from a) makes room
  CHECK(c.admitted);
  CHECK(c.evict == 1);
  CHECK(slots.waiting() == 3);
  CHECK(slots.arrive(6, "a", t0 + 5s).evict == 2);  // a has one waiting now, so it may; 2 is the oldest
  slots.done(4);
  slots.done(4);  // twice: no-op
  slots.done(99);
  CHECK(slots.waiting() == 2);
  CHECK(slots.arrive(7, "d", t0 + 6s).evict == -1);  // room again
}

TEST_CASE("chunk reassembly holds at most its limits per sender and in all, and drops stale payloads",
          "[net][chunks]") {
  chunk_limits limits;
  limits.sender_bytes = 100;
  limits.total_bytes = 150;
  limits.sender_transfers = 2;
  limits.total_transfers = 3;
  limits.stale = 10s;
  chunk_assembler a(limits);
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto one = caf::actor_cast<caf::actor_addr>(sys.spawn([] {}));
  auto two = caf::actor_cast<caf::actor_addr>(sys.spawn([] {}));
  const steady::time_point t0{std::chrono::hours(1)};

  CHECK_FALSE(a.add(one, 1, std::string(60, 'x'), t0));
  auto over = a.add(one, 1, std::string(50, 'x'), t0);  // 110 > 100 from one sender
  REQUIRE(over);
  CHECK(code_of(over) == errc::BAD_REQUEST);
  CHECK(a.held_bytes() == 0);     // the refused transfer's bytes are freed at once
  CHECK(a.add(one, 1, "y", t0));  // and its later pieces refused: no payload with a hole
  CHECK_FALSE(a.finish(one, 1, "tail"));
  CHECK(a.pending() == 0);

  CHECK_FALSE(a.add(one, 2, std::string(90, 'x'), t0));
  CHECK_FALSE(a.add(two, 3, std::string(60, 'x'), t0));
  CHECK(a.add(two, 3, std::string(10, 'x'), t0));  // 160 > 150 from all senders
  CHECK(a.held_bytes() == 90);
  CHECK_FALSE(a.add(one, 4, "a", t0));
  CHECK(a.add(one, 5, "b", t0));  // one has 2 transfers unfinished
  CHECK(a.add(two, 6, "c", t0));  // 3 in all (one's 2, two's refused 3)
  CHECK(a.refused() >= 5);

  // Nothing for longer than `stale`: every unfinished payload is dropped.
  CHECK_FALSE(a.add(two, 7, "d", t0 + 11s));
  CHECK(a.pending() == 1);
  CHECK(a.held_bytes() == 1);
  auto whole = a.finish(two, 7, "e");
  REQUIRE(whole);
  CHECK(*whole == "de");
  CHECK(a.pending() == 0);
  CHECK(a.held_bytes() == 0);
  CHECK_FALSE(a.finish(one, 2, "tail"));  // dropped as stale
}

namespace {

volatile sig_atomic_t interrupted = 0;
void note_signal(int) { interrupted = interrupted + 1; }

/// SIGUSR1 with a handler installed without SA_RESTART (so a blocked socket
/// call returns EINTR, as under a profiler or a runtime that uses signals),
/// for the life of the object.
struct interrupting_signal {
  struct sigaction old {};
  interrupting_signal() {
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    ::sigaction(SIGUSR1, &sa, &old);
  }
  ~interrupting_signal() { ::sigaction(SIGUSR1, &old, nullptr); }
};

/// Signals `t` every 5 ms for `how_long`: at least one lands while it blocks.
void pester(std::thread& t, std::chrono::milliseconds how_long) {
  const auto until = steady::now() + how_long;
  while (steady::now() < until) {
    ::pthread_kill(t.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace

TEST_CASE("a signal during a blocked write or read is not a broken connection", "[net][eintr]") {
  interrupting_signal sig;
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  // Fill the writer's buffer so that its next send blocks.
  ::fcntl(sv[0], F_SETFL, O_NONBLOCK);
  const std::string block(4096, 'z');
  while (::send(sv[0], block.data(), block.size(), MSG_NOSIGNAL) > 0) {
  }
  ::fcntl(sv[0], F_SETFL, 0);

  interrupted = 0;
  std::atomic<bool> wrote{false};
  std::thread writer([&] { wrote = write_all(sv[0], block.data(), block.size()); });
  pester(writer, 200ms);
  CHECK(interrupted > 0);
  // Drain: the writer's bytes go through once there is room.
  ::fcntl(sv[1], F_SETFL, O_NONBLOCK);
  char sink[65536];
  for (auto until = steady::now() + 2s; steady::now() < until && !wrote;)
    if (::recv(sv[1], sink, sizeof sink, 0) <= 0)
      std::this_thread::sleep_for(1ms);
  writer.join();
  CHECK(wrote);
  while (::recv(sv[1], sink, sizeof sink, 0) > 0) {
  }
  ::fcntl(sv[1], F_SETFL, 0);

  interrupted = 0;
  std::atomic<bool> read{false};
  std::string got(5, '\0');
  std::thread reader([&] {
    tls_link in(sv[1]);
    read = in.read_all(got.data(), got.size());
  });
  pester(reader, 200ms);
  CHECK(interrupted > 0);
  REQUIRE(write_all(sv[0], "hello", 5));
  reader.join();
  CHECK(read);
  CHECK(got == "hello");
  ::close(sv[0]);
  ::close(sv[1]);
}

namespace {

/// A BASP header (net/basp_guard.hpp): operation, payload length.
std::string basp_header(unsigned op, uint32_t size) {
  std::string h(basp_header_size, '\0');
  h[0] = static_cast<char>(op);
  for (int i = 0; i < 4; ++i)
    h[4 + i] = static_cast<char>(size >> (24 - 8 * i));
  return h;
}

/// A guard in front of a port that accepts nothing (its backlog holds the
/// relayed connections): what is tested here is the guard's door.
struct guard_on_stand_in {
  std::pair<int, uint16_t> backend;
  std::unique_ptr<basp_guard> guard;
  explicit guard_on_stand_in(guard_options o) {
    auto listening = listen_tcp("127.0.0.1", 0, "stand-in backend");
    REQUIRE(listening);
    backend = *listening;
    o.backend_port = backend.second;
    auto g = basp_guard::start(o);
    REQUIRE(g);
    guard = std::move(*g);
  }
  ~guard_on_stand_in() {
    guard.reset();
    ::close(backend.first);
  }
};

}  // namespace

TEST_CASE("the guard caps strangers per address and cuts the longest waiting for a newcomer", "[net][guard]") {
  guard_options o;
  o.handshake_timeout = 30s;  // far beyond the test: every close here is the door's
  o.max_connections = 5;
  o.member_slots = 1;  // 4 strangers at once
  o.max_strangers_per_address = 2;
  guard_on_stand_in g(o);
  const uint16_t port = g.guard->port();

  const int a1 = dial_from(port, 2);
  CHECK_FALSE(closed_within(a1, 100ms));
  const int a2 = dial_from(port, 2);
  CHECK_FALSE(closed_within(a2, 100ms));
  const int a3 = dial_from(port, 2);
  CHECK(closed_within(a3, 2s));  // a third from 127.0.0.2: refused at once
  const int b = dial_from(port, 3);
  const int c = dial_from(port, 4);
  CHECK_FALSE(closed_within(c, 100ms));
  const int d = dial_from(port, 5);  // a fifth stranger: a1, the longest waiting, is cut for it
  CHECK(closed_within(a1, 2s));
  CHECK_FALSE(closed_within(d, 100ms));
  CHECK_FALSE(closed_within(a2, 10ms));
  CHECK_FALSE(closed_within(b, 10ms));
  // One that says hello (a client handshake) is a stranger no more: room for another.
  const int member = dial_from(port, 6);
  const std::string hello = basp_header(1, 4) + "abcd";
  REQUIRE(::send(member, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
  CHECK_FALSE(closed_within(member, 200ms));  // it cut a2 on arrival, and left the strangers once greeted
  CHECK(closed_within(a2, 2s));
  const int e = dial_from(port, 7);
  CHECK_FALSE(closed_within(e, 100ms));
  for (int fd : {b, c, d})
    CHECK_FALSE(closed_within(fd, 10ms));  // nobody cut for e: the member left a slot
  CHECK(g.guard->stats().refused >= 3);
  for (int fd : {a1, a2, a3, b, c, d, member, e})
    ::close(fd);
}

TEST_CASE("the guard's handshake deadline is one for all its reads: a trickle does not extend it", "[net][guard]") {
  guard_options o;
  o.handshake_timeout = 1s;
  guard_on_stand_in g(o);
  const int fd = dial_from(g.guard->port(), 1);
  const std::string header = basp_header(1, 1000);  // a client handshake whose 1000 bytes trickle in
  REQUIRE(::send(fd, header.data(), header.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(header.size()));
  const auto start = steady::now();
  bool closed = false;
  while (!closed && steady::now() - start < 4s) {
    ::send(fd, "x", 1, MSG_NOSIGNAL);
    closed = closed_within(fd, 200ms);
  }
  const double secs = std::chrono::duration<double>(steady::now() - start).count();
  CHECK(closed);
  CHECK(secs < 2.5);  // per read it would stay open for as long as bytes came
  ::close(fd);
}

namespace {

/// Answers one HTTP request on a port of its own with `reply` (status line,
/// headers and body, as they go on the wire), then waits for the client to hang up.
struct one_reply {
  std::pair<int, uint16_t> listening;
  std::thread t;
  explicit one_reply(std::string reply) {
    auto l = listen_tcp("127.0.0.1", 0, "stand-in etcd");
    REQUIRE(l);
    listening = *l;
    t = std::thread([fd = listening.first, reply = std::move(reply)] {
      const int c = ::accept(fd, nullptr, nullptr);
      if (c < 0)
        return;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const auto r = ::recv(c, buf, sizeof buf, 0);
        if (r <= 0)
          break;
        request.append(buf, static_cast<size_t>(r));
      }
      (void)write_all(c, reply.data(), reply.size());
      while (::recv(c, buf, sizeof buf, 0) > 0) {
      }
      ::close(c);
    });
  }
  ~one_reply() {
    t.join();
    ::close(listening.first);
  }
};

std::string json_reply(const std::string& body, bool chunked) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
  if (!chunked)
    return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  head += "Transfer-Encoding: chunked\r\n\r\n";
  constexpr size_t piece = 64 << 10;
  for (size_t at = 0; at < body.size(); at += piece) {
    const auto part = body.substr(at, piece);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    head += size + part + "\r\n";
  }
  return head + "0\r\n\r\n";
}

caf::expected<std::optional<etcd_kv>> get_from(const std::string& reply) {
  one_reply server(reply);
  etcd_client client({{"127.0.0.1", server.listening.second}}, 3000ms);
  return client.get("k");
}

}  // namespace

TEST_CASE("an etcd reply longer than the cap is an error, announced or chunked", "[net][etcd]") {
  CHECK(get_from(json_reply(R"({"kvs":[]})", false)));  // the stand-in answers as etcd would
  CHECK(get_from(json_reply(R"({"kvs":[]})", true)));
  const std::string huge = R"({"kvs":[],"pad":")" + std::string(9 << 20, 'x') + R"("})";  // valid JSON, 9 MiB
  for (bool chunked : {false, true}) {
    auto r = get_from(json_reply(huge, chunked));
    REQUIRE_FALSE(r);
    CHECK(code_of(r.error()) == errc::INTERNAL);
    CHECK(to_string(r.error()).find("over") != std::string::npos);
  }
}
