#include "net/tcp.hpp"

#include <cerrno>
#include <cstring>

#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/errors.hpp"

namespace swarm {

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

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
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
    if (w <= 0)
      return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

} // namespace swarm
