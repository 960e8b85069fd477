// net/http_server on loopback: what it answers, what it refuses, and that
// idle clients can neither hold a thread nor keep a new client out.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "net/http_server.hpp"
#include "net/tcp.hpp"

namespace {

int dial(uint16_t port) {
  const int fd = swarm::connect_loopback(port);
  REQUIRE(fd >= 0);
  return fd;
}

/// Everything the server sends on `fd` within `wait_ms` after `bytes`, and whether it closed.
std::string exchange(int fd, const std::string& bytes, int wait_ms, bool* closed = nullptr) {
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    char buf[4096];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed)
        *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
    ++n;
  return n;
}

std::unique_ptr<swarm::http_server> serve(swarm::http_options opt = {}) {
  auto s = swarm::http_server::start(
      "127.0.0.1", 0,
      [](const std::string& path) {
        swarm::http_response r;
        if (path == "/boom")
          throw std::runtime_error("boom");
        r.status = path == "/" ? 200 : 404;
        r.body = "path " + path;
        return r;
      },
      opt);
  REQUIRE(s);
  return std::move(*s);
}

}  // namespace

TEST_CASE("the HTTP server answers GET and HEAD, keeps connections alive and refuses the rest", "[http]") {
  auto server = serve();
  const int fd = dial(server->port());
  // Two pipelined requests on one connection, answered in order; the query string is not part of the path.
  auto got = exchange(fd, "GET /?x=1 HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\n\r\n", 300);
  CHECK(count_of(got, "HTTP/1.1 200 OK") == 1);
  CHECK(count_of(got, "HTTP/1.1 404 Not Found") == 1);
  CHECK(got.find("Content-Length: 6\r\n") != std::string::npos);
  CHECK(got.find("path /nope") != std::string::npos);
  got = exchange(fd, "HEAD / HTTP/1.1\r\n\r\n", 300);
  CHECK(got.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(got.find("path") == std::string::npos);  // headers only
  bool closed = false;
  got = exchange(fd, "GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n", 1000, &closed);
  CHECK(got.rfind("HTTP/1.1 500", 0) == 0);
  CHECK(closed);
  ::close(fd);

  const std::vector<std::pair<std::string, std::string>> refused{
      {"POST / HTTP/1.1\r\n\r\n", "HTTP/1.1 405"},
      {"GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", "HTTP/1.1 413"},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 413"},
      {"GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505"},
      {std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 16), "HTTP/1.1 400"},  // a TLS hello
      {"GET / HTTP/1.1\r\nX: " + std::string(20000, 'x') + "\r\n\r\n", "HTTP/1.1 431"},
  };
  for (const auto& [request, status] : refused) {
    const int c = dial(server->port());
    closed = false;
    got = exchange(c, request, 2000, &closed);
    INFO(request.substr(0, 40));
    CHECK(got.rfind(status, 0) == 0);
    CHECK(closed);
    ::close(c);
  }
  // HTTP/1.0 closes after its answer unless it asks otherwise.
  const int old = dial(server->port());
  closed = false;
  CHECK(exchange(old, "GET / HTTP/1.0\r\n\r\n", 2000, &closed).rfind("HTTP/1.1 200", 0) == 0);
  CHECK(closed);
  ::close(old);
  const auto stats = server->stats();
  CHECK(stats.answered == 3);
  CHECK(stats.refused == 8);  // the 404 and 500 count as refused too
}

TEST_CASE("idle HTTP clients are cut off and cannot keep a new client out", "[http]") {
  swarm::http_options opt;
  opt.max_connections = 8;
  opt.request_timeout = std::chrono::milliseconds(300);
  auto server = serve(opt);
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i)
    idle.push_back(dial(server->port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A ninth client is answered at once; the oldest idle one made room.
  const int fresh = dial(server->port());
  CHECK(exchange(fresh, "GET / HTTP/1.1\r\n\r\n", 500).rfind("HTTP/1.1 200", 0) == 0);
  bool closed = false;
  exchange(idle.front(), "", 200, &closed);
  CHECK(closed);
  CHECK(server->stats().evicted == 1);
  // The rest, and the kept-alive one, are closed once the request timeout passes.
  for (int fd : idle) {
    closed = false;
    exchange(fd, "", 1500, &closed);
    CHECK(closed);
    ::close(fd);
  }
  closed = false;
  exchange(fresh, "", 1500, &closed);
  CHECK(closed);
  ::close(fresh);
  CHECK(server->stats().timed_out == 8);
  CHECK(server->stats().open == 0);
}
