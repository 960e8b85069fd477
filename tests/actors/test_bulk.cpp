// Tier (b): the bulk data plane's receiving side, in one process, fed over real
// loopback sockets: whole frames reach the attached actor, half frames and
// garbage never do, and the endpoint keeps serving. (The sending side, across
// real processes, is exercised by test_cluster: every activation there goes bulk.)
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "bulk_fixture.hpp"
#include "net/bulk.hpp"
#include "messages/errors.hpp"
#include "net/tcp.hpp"

using namespace swarm;
using namespace std::chrono_literals;
using swarm::testing::endpoint_fixture;

namespace {

int connect_local(uint16_t port) {
  const int fd = connect_loopback(port);
  REQUIRE(fd >= 0);
  return fd;
}

void send_all(int fd, const std::string& s) {
  REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
}

/// A connection as a member opens it: with the hello naming the endpoint's token.
int connect_member(const bulk_endpoint& bulk) {
  const int fd = connect_local(bulk.port());
  send_all(fd, bulk.hello());
  return fd;
}

/// A frame of `parts` as net/bulk.hpp lays it out; `size` overrides the total.
std::string frame(uint64_t dest, uint64_t key, const bulk_parts& parts, uint32_t magic = 0x32425753,
                  std::optional<uint64_t> size = std::nullopt) {
  std::string f(32, '\0');
  const auto n = static_cast<uint32_t>(parts.size());
  uint64_t total = 0;
  std::string sizes, bytes;
  for (const auto& p : parts) {
    const uint64_t len = p.size();
    sizes.append(reinterpret_cast<const char*>(&len), 8);
    bytes += p;
    total += len;
  }
  total = size.value_or(total);
  std::memcpy(&f[0], &magic, 4);
  std::memcpy(&f[4], &n, 4);
  std::memcpy(&f[8], &dest, 8);
  std::memcpy(&f[16], &key, 8);
  std::memcpy(&f[24], &total, 8);
  return f + sizes + bytes;
}

std::string frame(uint64_t dest, uint64_t key, const std::string& bytes, uint32_t magic = 0x32425753) {
  return frame(dest, key, bulk_parts{bytes}, magic);
}

/// Waits until `cond` holds (stats are updated by the endpoint's threads).
template <class Cond>
bool eventually(Cond cond) {
  for (int i = 0; i < 500 && !cond(); ++i)
    std::this_thread::sleep_for(10ms);
  return cond();
}

/// The next frame `self` receives within 5 s: its key (0: none came), its parts
/// in `parts`, and its first part (or nothing) in `bytes`.
uint64_t next_frame(caf::scoped_actor& self, bulk_parts& parts, std::string& bytes) {
  uint64_t key = 0;
  bool ok = false;
  self->receive([&](bulk_delivery& d) { key = d.key, parts = std::move(d.parts), ok = true; }, caf::after(5s) >> [] {});
  bytes = parts.empty() ? std::string{} : parts.front();
  return ok ? key : 0;
}

/// Sends the endpoint `bulk` frames for `me` that must never reach it, each on a
/// connection of its own: half a frame, garbage, and frames that break the
/// format; the endpoint closes every connection of a bad one.
void send_half_and_bad_frames(const bulk_endpoint& bulk, uint64_t me) {
  // Half a frame, then the connection drops: nothing is delivered.
  const int half = connect_member(bulk);
  send_all(half, frame(me, 9, std::string(1000, 'y')).substr(0, 500));
  ::close(half);
  // Garbage and an oversized frame close their connections.
  const int junk = connect_member(bulk);
  send_all(junk, "GET / HTTP/1.1\r\nHost: x\r\n\r\n.....");
  const int huge = connect_member(bulk);
  const uint64_t too_big = uint64_t{1} << 62;
  auto oversized = frame(me, 10, bulk_parts{""}, 0x32425753, too_big);
  std::memcpy(&oversized[32], &too_big, 8);  // its one part as large
  send_all(huge, oversized);
  // A well-sized frame with another magic: not ours, closed before its bytes are read.
  const int alien = connect_member(bulk);
  send_all(alien, frame(me, 14, "alien", 0xdeadbeef));
  // Parts that do not add up to the frame's size; no parts; too many parts.
  const int lying = connect_member(bulk);
  send_all(lying, frame(me, 16, bulk_parts{"ab", "cd"}, 0x32425753, 3));
  const int none = connect_member(bulk);
  send_all(none, frame(me, 17, bulk_parts{}));
  const int many = connect_member(bulk);
  send_all(many, frame(me, 18, bulk_parts(max_bulk_parts + 1, "x")));
  CHECK(eventually([&] { return bulk.stats().bad_frames == 6; }));
  CHECK(bulk.stats().strangers == 0);  // each began with the hello
  char c;
  CHECK(::recv(junk, &c, 1, 0) == 0);  // closed by the endpoint
  CHECK(::recv(huge, &c, 1, 0) <= 0);
  CHECK(::recv(alien, &c, 1, 0) <= 0);  // closed (reset: its 5 bytes were never read)
  for (int closed : {lying, none, many})
    CHECK(::recv(closed, &c, 1, 0) <= 0);
  for (int closed : {junk, huge, alien, lying, none, many})
    ::close(closed);
}

}  // namespace

TEST_CASE("bulk_inbox pairs bytes and claims in either order and fails late claims", "[bulk]") {
  bulk_inbox inbox(std::chrono::seconds(10), 100);
  const auto t0 = bulk_inbox::clock::now();
  std::vector<std::string> got;
  std::vector<errc> failed;
  auto k = [&](caf::expected<bulk_parts> b) {
    if (b)
      got.push_back(b->front());
    else
      failed.push_back(code_of(b.error()));
  };
  // Bytes first, then the claim: runs at once.
  inbox.arrived(1, {"one"}, t0);
  CHECK(inbox.claim(1, k, t0));
  // Claim first, then the bytes.
  CHECK_FALSE(inbox.claim(2, k, t0));
  CHECK(inbox.waiting() == 1);
  inbox.arrived(2, {"two"}, t0);
  CHECK(got == std::vector<std::string>{"one", "two"});
  // A claim whose bytes never come fails, retryably, once; later bytes are just held.
  CHECK_FALSE(inbox.claim(3, k, t0));
  inbox.expire(3);
  inbox.expire(3);
  CHECK(failed == std::vector<errc>{errc::PEER_GONE});
  CHECK(is_retryable(make_error(errc::PEER_GONE, "")));
  // Unclaimed bytes go after the ttl, and beyond the byte budget oldest first.
  inbox.arrived(4, {std::string(30, 'a'), std::string(30, 'a')}, t0);  // every part counts
  inbox.arrived(5, {std::string(60, 'b')}, t0 + 1s);                   // 120 > 100 bytes: 4 goes
  CHECK(inbox.held() == 1);
  CHECK_FALSE(inbox.claim(4, k, t0 + 1s));
  CHECK(inbox.claim(5, k, t0 + 2s));
  inbox.arrived(6, {"six"}, t0);
  CHECK_FALSE(inbox.claim(6, k, t0 + 11s));  // older than the ttl: dropped
  CHECK(got.size() == 3);
}

TEST_CASE("a bulk endpoint delivers whole frames, drops half ones, and closes on garbage", "[bulk]") {
  endpoint_fixture f;
  auto& bulk = f.bulk;
  auto& self = *f.self;
  const auto me = self->id();
  bulk_parts parts;
  auto next = [&](std::string& bytes) { return next_frame(self, parts, bytes); };

  // Two whole frames on one connection, in order.
  const int fd = connect_member(*bulk);
  const std::string big(3 << 20, 'x');
  send_all(fd, frame(me, 7 | bulk_flag, "hello") + frame(me, 8 | bulk_flag, big));
  std::string bytes;
  CHECK(next(bytes) == (7 | bulk_flag));
  CHECK(bytes == "hello");
  CHECK(next(bytes) == (8 | bulk_flag));
  CHECK(bytes == big);
  // A frame of parts arrives as those parts, an empty one included.
  send_all(fd, frame(me, 15, bulk_parts{"head", "", big}));
  CHECK(next(bytes) == 15);
  CHECK(parts == bulk_parts{"head", "", big});

  send_half_and_bad_frames(*bulk, me);
  // A frame for an actor not attached here is dropped and counted.
  send_all(fd, frame(me + 12345, 11, "lost"));
  CHECK(eventually([&] { return bulk->stats().undeliverable == 1; }));

  // The endpoint still serves: the first connection and a new one.
  send_all(fd, frame(me, 12, "still"));
  CHECK(next(bytes) == 12);
  CHECK(bytes == "still");
  const int again = connect_member(*bulk);
  send_all(again, frame(me, 13, "again"));
  CHECK(next(bytes) == 13);
  const auto s = bulk->stats();
  CHECK(s.frames_received == 6);  // hello, big, parts, lost, still, again: never the half one
  std::printf("bulk endpoint: %llu frames, %llu bytes received, %llu connections closed for garbage\n",
              static_cast<unsigned long long>(s.frames_received), static_cast<unsigned long long>(s.bytes_received),
              static_cast<unsigned long long>(s.bad_frames));
  ::close(fd);
  ::close(again);

  // In this process a push is handed over directly, its parts as they were.
  const auto key =
      bulk->push(caf::actor_cast<caf::actor>(self), "local", std::make_shared<const bulk_parts>(bulk_parts{"data"}));
  CHECK(is_bulk(key));
  CHECK(next(bytes) == key);
  CHECK(parts == bulk_parts{"local", "data"});
  CHECK_THROWS_AS(
      bulk->push(caf::actor_cast<caf::actor>(self), "x", std::make_shared<const bulk_parts>(max_bulk_parts, "y")),
      std::invalid_argument);
}

TEST_CASE("frames being received stay within the budget; a stalled frame frees its room; legitimate ones get through",
          "[bulk]") {
  bulk_options opts;
  opts.max_frame = 1 << 20;
  opts.max_pending = 1 << 20;
  opts.read_timeout = 1s;
  endpoint_fixture f(opts);
  auto& bulk = f.bulk;
  auto& self = *f.self;
  const auto me = self->id();

  // Three members (a buggy one may do this) each announce 600 KiB and send a
  // sixth of it, then nothing: one holds room, the others wait for it; each is
  // closed by the stall in turn.
  const std::string announced(600 << 10, 's');
  std::vector<int> buggy;
  for (int i = 0; i < 3; ++i) {
    buggy.push_back(connect_member(*bulk));
    send_all(buggy.back(), frame(me, 100 + i, announced).substr(0, 40 + (100 << 10)));
  }
  // Meanwhile a frame larger than the budget is refused at its header.
  const int greedy = connect_member(*bulk);
  send_all(greedy, frame(me, 99, std::string(2 << 20, 'g')).substr(0, 40));
  CHECK(eventually([&] { return bulk->stats().bad_frames == 1; }));
  CHECK(eventually([&] { return bulk->stats().frames_waited >= 1; }));
  const auto held = bulk->stats().peak_pending;
  CHECK(held <= opts.max_pending);
  CHECK(held >= announced.size());

  // After the stalls (about a second each) a peer's whole frame is delivered.
  CHECK(eventually([&] { return bulk->stats().stalled >= 3; }));
  const int peer = connect_member(*bulk);
  const std::string payload(900 << 10, 'p');
  send_all(peer, frame(me, 7, payload));
  std::string got;
  self->receive([&](bulk_delivery& d) { got = d.key == 7 && !d.parts.empty() ? d.parts.front() : ""; },
                caf::after(5s) >> [] {});
  CHECK(got == payload);
  const auto s = bulk->stats();
  std::printf("bulk budget %llu bytes: peak %llu held, %llu frames waited, %llu connections closed stalled\n",
              static_cast<unsigned long long>(opts.max_pending), static_cast<unsigned long long>(s.peak_pending),
              static_cast<unsigned long long>(s.frames_waited), static_cast<unsigned long long>(s.stalled));
  CHECK(s.peak_pending <= opts.max_pending);
  CHECK(s.frames_received == 1);  // only the peer's
  for (int fd : buggy)
    ::close(fd);
  ::close(greedy);
  ::close(peer);
}

TEST_CASE("frames delivered to a busy actor stay in the budget until it takes them", "[bulk]") {
  bulk_options opts;
  opts.max_pending = 200 << 10;
  opts.read_timeout = 1s;
  endpoint_fixture f(opts);
  auto& bulk = f.bulk;
  auto& self = *f.self;
  const auto me = self->id();
  const std::string payload(120 << 10, 'b');

  // The actor is busy (takes nothing yet): the first frame waits in its
  // mailbox and keeps its room, so the second's header finds none.
  const int first = connect_member(*bulk);
  send_all(first, frame(me, 1, payload));
  CHECK(eventually([&] { return bulk->stats().frames_received == 1; }));
  const int second = connect_member(*bulk);
  send_all(second, frame(me, 2, payload).substr(0, 40));  // its header: room is reserved there
  CHECK(eventually([&] { return bulk->stats().stalled == 1; }));
  CHECK(bulk->stats().frames_waited == 1);  // uncounted in the mailbox, it would have had room at once

  // Once the actor took the first, its room is free: a third gets through.
  bulk_parts parts;
  std::string bytes;
  CHECK(next_frame(self, parts, bytes) == 1);
  const int third = connect_member(*bulk);
  send_all(third, frame(me, 3, payload));
  CHECK(next_frame(self, parts, bytes) == 3);
  CHECK(bytes == payload);
  CHECK(bulk->stats().frames_waited == 1);
  for (int fd : {first, second, third})
    ::close(fd);
}

TEST_CASE("a connection gets no frame room until its hello names the endpoint's token; members' frames get through",
          "[bulk]") {
  bulk_options opts;
  opts.connect_timeout = 1s;
  endpoint_fixture f(opts);
  auto& bulk = f.bulk;
  auto& self = *f.self;
  const auto me = self->id();

  // A well-formed 64 MiB frame with no hello; the same after a hello with a
  // wrong token; a hello cut short; a connection that says nothing at all.
  const std::string payload(64 << 20, 'z');
  const int bare = connect_local(bulk->port());
  send_all(bare, frame(me, 1, payload).substr(0, 16 << 10));
  std::string wrong = bulk->hello();
  wrong[10] = static_cast<char>(wrong[10] ^ 1);
  const int guessing = connect_local(bulk->port());
  send_all(guessing, wrong + frame(me, 2, "guess"));
  const int cut = connect_local(bulk->port());
  send_all(cut, bulk->hello().substr(0, 12));
  const int silent = connect_local(bulk->port());
  // The first three are closed at once or after the hello's 1 s; the silent one after 1 s.
  CHECK(eventually([&] { return bulk->stats().strangers == 4; }));
  char c;
  for (int fd : {bare, guessing, cut, silent})
    CHECK(::recv(fd, &c, 1, 0) <= 0);
  CHECK(bulk->stats().peak_pending == 0);  // none of them got room for a frame
  CHECK(bulk->stats().bad_frames == 0);    // refused as strangers, before any frame was judged

  // A member's hello and frame meanwhile.
  const int member = connect_member(*bulk);
  send_all(member, frame(me, 3, payload));
  std::string got;
  self->receive([&](bulk_delivery& d) { got = d.key == 3 && !d.parts.empty() ? d.parts.front() : ""; },
                caf::after(10s) >> [] {});
  CHECK(got == payload);
  const auto s = bulk->stats();
  CHECK(s.frames_received == 1);
  std::printf("bulk hello: %llu strangers closed, peak held %llu bytes, %llu frame delivered\n",
              static_cast<unsigned long long>(s.strangers), static_cast<unsigned long long>(s.peak_pending),
              static_cast<unsigned long long>(s.frames_received));
  for (int fd : {bare, guessing, cut, silent, member})
    ::close(fd);
}
