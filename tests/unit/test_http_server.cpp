// net/http_server on loopback: what it answers, what it refuses, and that
// idle clients can neither hold a thread nor keep a new client out.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "net/http_request.hpp"
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

std::unique_ptr<swarm::http_server> serve(swarm::http_options opt = {}, std::atomic<int>* renders = nullptr) {
  auto s = swarm::http_server::start(
      "127.0.0.1", 0,
      [renders](const std::string& path) {
        if (renders)
          ++*renders;
        swarm::http_response r;
        if (path == "/boom")
          throw std::runtime_error("boom");
        r.status = path == "/" || path == "/big" ? 200 : 404;
        r.body = path == "/big" ? std::string(32 << 20, 'b') : "path " + path;
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

TEST_CASE("a client that half-closes while its answer is pending is answered without spinning the loop", "[http]") {
  auto server = serve();
  const int fd = dial(server->port());
  // 32 MiB cannot fit in loopback's socket buffers: the answer waits on the client.
  const std::string request = "GET /big HTTP/1.1\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::shutdown(fd, SHUT_WR);
  const auto before = server->stats().events;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A half-closed socket is readable at once, forever: watched for that, the
  // loop woke tens of thousands of times here.
  CHECK(server->stats().events - before < 20);
  bool closed = false;
  const auto got = exchange(fd, "", 5000, &closed);
  CHECK(got.size() > (32u << 20));  // the whole answer still arrives
  CHECK(got.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(closed);
  ::close(fd);
}

TEST_CASE("a client that sends its request and half-closes at once still gets the answer", "[http]") {
  auto server = serve();
  const int fd = dial(server->port());
  const std::string request = "GET / HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  bool closed = false;
  const auto got = exchange(fd, "", 2000, &closed);
  CHECK(count_of(got, "HTTP/1.1 200 OK") == 1);
  CHECK(count_of(got, "HTTP/1.1 404") == 1);
  CHECK(closed);
  ::close(fd);
}

TEST_CASE("400 pipelined requests on one connection cost one render, not 400", "[http]") {
  for (const int reuse_ms : {500, 0}) {
    std::atomic<int> renders{0};
    swarm::http_options opt;
    opt.reuse_for = std::chrono::milliseconds(reuse_ms);
    auto server = serve(opt, &renders);
    const int fd = dial(server->port());
    std::string burst;
    for (int i = 0; i < 400; ++i)
      burst += "GET / HTTP/1.1\r\nX-Pad: " + std::string(7000, 'p') + "\r\n\r\n";
    const auto start = std::chrono::steady_clock::now();
    std::string got = exchange(fd, burst, 200);
    while (count_of(got, "HTTP/1.1 200 OK") < 400 &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
      got += exchange(fd, "", 200);
    const auto took =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    INFO("reuse " << reuse_ms << " ms; 400 answers took " << took << " ms, " << renders << " renders");
    CHECK(count_of(got, "HTTP/1.1 200 OK") == 400);
    if (reuse_ms > 0)
      CHECK(renders <= 1 + took / reuse_ms);  // one per reuse period, however many requests
    else
      CHECK(renders == 400);
    CHECK(server->stats().rendered == static_cast<uint64_t>(renders.load()));
    ::close(fd);
  }
}

TEST_CASE("with a token, every path needs it, as a bearer header or ?token=", "[http]") {
  swarm::http_options opt;
  opt.token = "s3cret-Token_1";
  opt.reuse_for = std::chrono::milliseconds(0);
  std::atomic<int> renders{0};
  auto server = serve(opt, &renders);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 401 Unauthorized"},
      {"GET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 401"},
      {"GET /?token=s3cret-Token_ HTTP/1.1\r\n\r\n", "HTTP/1.1 401"},
      {"GET /?token=s3cret-Token_12 HTTP/1.1\r\n\r\n", "HTTP/1.1 401"},
      {"GET / HTTP/1.1\r\nAuthorization: Bearer s3cret-token_1\r\n\r\n", "HTTP/1.1 401"},
      {"GET / HTTP/1.1\r\nAuthorization: Basic s3cret-Token_1\r\n\r\n", "HTTP/1.1 401"},
      {"GET / HTTP/1.1\r\nAuthorization: Bearer s3cret-Token_1\r\n\r\n", "HTTP/1.1 200"},
      {"GET / HTTP/1.1\r\nauthorization:  bearer s3cret-Token_1 \r\n\r\n", "HTTP/1.1 200"},
      {"GET /?token=s3cret-Token_1 HTTP/1.1\r\n\r\n", "HTTP/1.1 200"},
      {"GET /metrics?a=1&token=s3cret-Token_1&b=2 HTTP/1.1\r\n\r\n",
       "HTTP/1.1 404"},  // past the token: the route's own answer
  };
  for (const auto& [request, status] : cases) {
    const int c = dial(server->port());
    INFO(request);
    const auto got = exchange(c, request, 500);
    CHECK(got.rfind(status, 0) == 0);
    if (status == "HTTP/1.1 401 Unauthorized")
      CHECK(got.find("WWW-Authenticate: Bearer") != std::string::npos);
    ::close(c);
  }
  CHECK(renders == 4);  // the refused never reach the handler
  CHECK(swarm::same_secret("abc", "abc"));
  CHECK_FALSE(swarm::same_secret("abd", "abc"));
  CHECK_FALSE(swarm::same_secret("ab", "abc"));
  CHECK_FALSE(swarm::same_secret("abcd", "abc"));
  CHECK_FALSE(swarm::same_secret("", "abc"));
}
