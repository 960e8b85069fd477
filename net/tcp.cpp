#include "net/tcp.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/errors.hpp"

namespace swarm {

namespace {

/// Connects `fd` to `a` within `timeout`; false when refused, unreachable or late.
bool connect_within(int fd, const addrinfo* a, std::chrono::milliseconds timeout) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    ok = ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
         ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  ::fcntl(fd, F_SETFL, flags);
  return ok;
}

}  // namespace

caf::expected<std::pair<int, uint16_t>> listen_tcp(const std::string& host, uint16_t port, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = host.empty() ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const auto service = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0 || !found)
    return make_error(errc::BAD_CONFIG, who + ": cannot resolve host '" + host + "'");
  const int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 64) == 0;
  ::freeaddrinfo(found);
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (!bound || ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0)
      ::close(fd);
    return make_error(errc::BAD_CONFIG, who + ": cannot listen on " + host + ":" + service + ": " + why);
  }
  const auto bound_port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return std::make_pair(fd, bound_port);
}

int connect_loopback(uint16_t port, const std::function<void(uint16_t)>& bound) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bound) {
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      return -1;
    }
    bound(ntohs(a.sin_port));
  }
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool write_all(int fd, const char* p, size_t n, int flags) {
  while (n > 0) {
    const auto w = ::send(fd, p, n, MSG_NOSIGNAL | flags);
    if (w < 0 && errno == EINTR)
      continue;  // a signal's handler ran (one installed without SA_RESTART): not the peer's doing
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

int connect_to(const std::string& host, uint16_t port, std::chrono::seconds connect_timeout,
               std::chrono::seconds write_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0)
    return -1;
  int fd = -1;
  for (auto* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && !connect_within(fd, a, connect_timeout)) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{static_cast<time_t>(write_timeout.count()), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  return fd;
}

std::string peer_name(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  char host[NI_MAXHOST] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  return host;
}

bool peer_hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool wait_ready(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
    if (r > 0)
      return true;  // ready, or hung up: the next read or write says which
    if (r < 0 && errno != EINTR)
      return false;
  }
}

void set_receive_timeout(int fd, std::chrono::seconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

}  // namespace swarm
