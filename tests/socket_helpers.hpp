#pragma once
// What the tests of listening sockets share (test_net_bounds, test_bulk_doors):
// connections from distinct loopback addresses, and whether the other end closed.
// Include after catch.hpp (and, where torch is used, after torch).

#include <cerrno>
#include <chrono>
#include <cstdint>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

namespace swarm::testing {

/// A connection to 127.0.0.1:port from the loopback address 127.0.0.`from`
/// (all of 127/8 is this host: distinct peer addresses without a network).
inline int dial_from(uint16_t port, int from) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(0x7f000000u | static_cast<uint32_t>(from));
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

/// Whether the other end closed `fd` within `wait` (what it sent before is read and dropped).
inline bool closed_within(int fd, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
      return false;
    char buf[4096];
    const auto r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET))
      return true;
  }
}

}  // namespace swarm::testing
