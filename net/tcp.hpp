#pragma once
// Plain TCP pieces shared by the bulk plane (net/bulk.*) and the guard in
// front of CAF ports (net/basp_guard.*).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <sys/socket.h>
#include <unistd.h>

#include <caf/expected.hpp>

namespace swarm {

/// A listening socket on host:port (empty host: every IPv4 interface; port 0:
/// any free one) and the port it got; BAD_CONFIG naming `who` when it cannot.
[[nodiscard]] caf::expected<std::pair<int, uint16_t>> listen_tcp(const std::string& host, uint16_t port,
                                                                 const std::string& who);

/// A connection to 127.0.0.1:port with TCP_NODELAY, or -1. `bound`, when
/// given, learns the connection's own port before it connects: the other end
/// may look it up as soon as it accepts (the guard's relayed peers, net/tls.cpp).
[[nodiscard]] int connect_loopback(uint16_t port, const std::function<void(uint16_t)>& bound = nullptr);

/// Accepts on `listen_fd` until it fails with `stopping` set (read under `m`;
/// the owner sets it, then shuts the socket down), handing each connection to
/// `admit(fd)` with `m` held; admit owns the fd from then on. A failing accept
/// (out of descriptors under a flood of connections) waits 10 ms before the
/// next rather than spinning.
template <class Admit>
void accept_until_stopped(int listen_fd, std::mutex& m, const bool& stopping, Admit admit) {
  for (;;) {
    const int fd = ::accept(listen_fd, nullptr, nullptr);
    if (fd < 0) {
      {
        std::lock_guard<std::mutex> lock(m);
        if (stopping)
          return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    std::lock_guard<std::mutex> lock(m);
    if (stopping)
      ::close(fd);
    else
      admit(fd);
  }
}

/// A connected TCP socket to host:port (TCP_NODELAY), or -1; writes that move
/// nothing for `write_timeout` fail (a peer that stopped reading must not hold a writer).
[[nodiscard]] int connect_to(const std::string& host, uint16_t port, std::chrono::seconds connect_timeout,
                             std::chrono::seconds write_timeout);

/// Waits until `fd` is ready for `events` (POLLIN, POLLOUT) or has hung up;
/// false (errno ETIMEDOUT) once `deadline` passed. A signal does not end the
/// wait: a handshake's deadline is one time point for all its reads, however
/// they are interrupted.
[[nodiscard]] bool wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline);

/// Reads on `fd` fail with EAGAIN after `timeout` without bytes; 0 = never.
void set_receive_timeout(int fd, std::chrono::seconds timeout);

/// The numeric address of the other end of `fd` ("?" when it has none now).
[[nodiscard]] std::string peer_name(int fd);

/// Whether the other end of `fd` closed it (without reading: a writer's peer sends nothing).
[[nodiscard]] bool peer_hung_up(int fd);

/// Writes all `n` bytes, resuming after a signal (EINTR); false when the peer
/// is gone or a write timed out.
bool write_all(int fd, const char* p, size_t n, int flags = 0);

}  // namespace swarm
