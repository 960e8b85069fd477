// The coordinator's HTTP port while a real cluster trains: /api/status and
// /metrics read by real parsers (tests/check_status.py) against the metrics
// file, the page in headless chromium (tests/process/test_status_page.sh), bad
// requests answered with HTTP errors while training goes on, and
// `--role status` in the terminal.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <httplib.h>

#include "net/tcp.hpp"
#include "process_util.hpp"

using namespace swarm::test;

namespace {

/// Runs a shell command; its exit code and what it printed.
std::pair<int, std::string> sh(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p))
    out += buf;
  const int status = p ? ::pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

/// Sends `bytes` on a fresh connection to 127.0.0.1:port and returns what came
/// back before the server closed it or `wait_s` passed; `closed` says which.
std::string raw_exchange(int port, const std::string& bytes, double wait_s, bool& closed) {
  const int fd = swarm::connect_loopback(static_cast<uint16_t>(port));
  REQUIRE(fd >= 0);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  timeval tv{0, 200 * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  closed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) {
      closed = true;
      break;
    }
    if (n > 0)
      got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

/// Waits until the cluster has trained a while (30 steps, an averaging round),
/// then a little more, so a trainer report follows those steps.
void wait_for_training(const std::string& metrics) {
  REQUIRE(wait_for_metrics(
      metrics,
      [](const auto& lines) {
        return std::count_if(lines.begin(), lines.end(), [](const auto& l) { return is_event(l, "step"); }) >= 30 &&
               std::any_of(lines.begin(), lines.end(), [](const auto& l) { return is_event(l, "round_end"); });
      },
      120));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // a trainer report after those steps
}

/// /api/status and /metrics, their content types, and their content read by
/// tests/check_status.py against the metrics file (copies kept beside `base`).
void check_api_and_metrics(httplib::Client& client, const std::string& base, const std::string& metrics) {
  auto status = client.Get("/api/status");
  REQUIRE(status);
  CHECK(status->status == 200);
  CHECK(status->get_header_value("Content-Type") == "application/json");
  auto prom = client.Get("/metrics");
  REQUIRE(prom);
  CHECK(prom->status == 200);
  CHECK_THAT(prom->get_header_value("Content-Type"), Catch::StartsWith("text/plain; version=0.0.4"));
  write_file(base + ".status.json", status->body);
  write_file(base + ".metrics.txt", prom->body);
  const auto [code, out] = sh("/usr/bin/python3 " SWARM_SOURCE_DIR "/tests/check_status.py " + base + ".status.json " +
                              base + ".metrics.txt " + metrics);
  std::printf("%s", out.c_str());
  CHECK(code == 0);
}

/// The page at /: whole without anything from elsewhere, and in a browser.
void check_page(httplib::Client& client, int http) {
  auto page = client.Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK_THAT(page->body, Catch::Contains("api/status"));
  // No external assets: the one URL in it is the SVG namespace's name.
  const auto svg_ns = page->body.find("http://www.w3.org/2000/svg");
  CHECK(page->body.find("http://", svg_ns == std::string::npos ? 0 : svg_ns + 1) == std::string::npos);
  CHECK(page->body.find("http://") == svg_ns);
  CHECK(page->body.find("https://") == std::string::npos);

  // The page in a real browser: stages, servers and charts, no console errors.
  const auto [code, out] =
      sh("bash " SWARM_SOURCE_DIR "/tests/process/test_status_page.sh http://127.0.0.1:" + std::to_string(http) + "/");
  std::printf("%s", out.c_str());
  CHECK(code == 0);
}

/// Bad requests get HTTP errors; a slow client is cut off; training goes on.
void check_bad_requests(httplib::Client& client, int http, const std::string& metrics) {
  const auto steps_before = events(metrics, "step").size();
  auto missing = client.Get("/nope");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK_THAT(missing->body, Catch::Contains("/api/status"));
  httplib::Headers huge{{"X-Filler", std::string(100000, 'x')}};
  auto big = client.Get("/api/status", huge);
  CHECK((!big || big->status >= 400));  // refused, or the connection cut
  auto posted = client.Post("/api/status", std::string(1 << 20, 'y'), "text/plain");
  CHECK((!posted || posted->status >= 400));
  bool closed = false;
  const auto garbage = raw_exchange(http, std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 16), 3, closed);
  CHECK_THAT(garbage, Catch::StartsWith("HTTP/1.1 400"));
  const auto t0 = std::chrono::steady_clock::now();
  raw_exchange(http, "GET / HTTP/1.1\r\nHost: x\r\n", 12, closed);  // never finishes its headers
  const double cut_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a client that never finished its request was cut off after %.1f s\n", cut_after);
  CHECK(closed);
  CHECK(cut_after < 8);
  auto again = client.Get("/api/status");
  REQUIRE(again);
  CHECK(again->status == 200);
  CHECK(events(metrics, "step").size() > steps_before);
}

/// 1,000 connections to `http` that send nothing, or one byte a second (every
/// tenth), held until `holding` turns false; one cut off connects again, as a
/// hostile client would, and counts in `reconnects`.
void hold_idle_crowd(int http, const std::atomic<bool>& holding, std::atomic<int>& reconnects) {
  std::vector<int> fds(1000, -1);
  while (holding) {
    for (size_t i = 0; i < fds.size(); ++i) {
      pollfd p{fds[i], POLLIN | POLLRDHUP, 0};
      if (fds[i] >= 0 && ::poll(&p, 1, 0) == 1) {
        ::close(fds[i]);  // cut off: come back
        fds[i] = -1;
        ++reconnects;
      }
      if (fds[i] < 0)
        fds[i] = swarm::connect_loopback(static_cast<uint16_t>(http));
      else if (i % 10 == 0)
        ::send(fds[i], "G", 1, MSG_NOSIGNAL);  // a slow one
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  for (int fd : fds)
    if (fd >= 0)
      ::close(fd);
}

/// 1,000 idle and slow clients held open for 8 s: a scrape and the page's poll
/// are still answered within 1 s.
void check_answers_beside_idle_crowd(int http) {
  const auto hold = std::chrono::seconds(8);
  std::atomic<bool> holding{true};
  std::atomic<int> reconnects{0};
  std::thread crowd([&] { hold_idle_crowd(http, holding, reconnects); });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  double slowest = 0;
  int answered = 0;
  for (const auto until = std::chrono::steady_clock::now() + hold; std::chrono::steady_clock::now() < until;) {
    for (const char* path : {"/api/status", "/metrics"}) {
      httplib::Client scraper("127.0.0.1", http);
      const auto t = std::chrono::steady_clock::now();
      const auto r = scraper.Get(path);
      slowest = std::max(slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
      answered += r && r->status == 200;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  holding = false;
  crowd.join();
  std::printf("1,000 idle and slow clients (%d reconnects): %d answers, the slowest in %.3f s\n", reconnects.load(),
              answered, slowest);
  CHECK(answered >= 20);
  CHECK(slowest < 1.0);
}

/// The terminal view, asked of the coordinator's CAF port.
void check_terminal_view(const std::string& metrics) {
  const auto start = events(metrics, "cluster_start").at(0);
  const auto [code, screen] =
      run_swarm_output({"--role", "status", "--coordinator",
                        "127.0.0.1:" + std::to_string(static_cast<int>(number(start, "coordinator_port")))},
                       30);
  std::printf("%s", screen.c_str());
  CHECK(code == 0);
  CHECK_THAT(screen, Catch::Contains("stage 0  step"));
  CHECK_THAT(screen, Catch::Contains("stage 1  step"));
  CHECK_THAT(screen, Catch::Contains("trainer t"));
}

/// What the cluster printed once Ctrl-C ended it: where its status page was,
/// a summary of the run and the plot of it (`base`.png).
void check_run_summary(const std::string& output, const std::string& metrics, const std::string& base, int http) {
  std::string out;
  for (const auto& l : read_lines(output))
    out += l + "\n";
  CHECK_THAT(out, Catch::Contains("status page: http://127.0.0.1:" + std::to_string(http) + "/"));
  CHECK_THAT(out, Catch::Contains("run summary (" + metrics + ")"));
  CHECK_THAT(out, Catch::Contains(std::to_string(events(metrics, "step").size()) + " steps"));
  CHECK_THAT(out, Catch::Contains("plot of the run: " + base + ".png"));
  CHECK(std::filesystem::exists(base + ".png"));
  CHECK(out.find(" done in ") == std::string::npos);  // no line per round at the default level
}

}  // namespace

TEST_CASE("--http-token: a coordinator's HTTP port answers only requests carrying it", "[status]") {
  const int http = free_port();
  const pid_t coordinator = spawn_swarm({"--role", "coordinator", "--config", tiny, "--port", "0", "--http-port",
                                         std::to_string(http), "--http-token", "t0k-en", "--log-level", "warn"});
  httplib::Client client("127.0.0.1", http);
  client.set_read_timeout(5, 0);
  auto r = client.Get("/metrics");
  for (int i = 0; i < 200 && !r; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = client.Get("/metrics");
  }
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(client.Get("/api/status")->status == 401);
  CHECK(client.Get("/api/status?token=t0k-e")->status == 401);
  CHECK(client.Get("/", {{"Authorization", "Bearer t0k-en"}})->status == 200);
  CHECK(client.Get("/metrics?token=t0k-en")->status == 200);
  CHECK(client.Get("/api/status", {{"Authorization", "Bearer t0k-en"}})->status == 200);
  CHECK(stop(coordinator) == 0);
}

TEST_CASE("the status page, /api/status and /metrics of a training cluster", "[status]") {
  const std::string base = "/tmp/swarm-test-status-" + std::to_string(getpid());
  const auto metrics = base + ".jsonl", output = base + ".out";
  for (const auto& f : {metrics, output, base + ".png"})
    std::remove(f.c_str());
  const int http = free_port();
  const pid_t cluster = spawn_swarm({"--role", "cluster", "--config", tiny, "--metrics", metrics, "--max-steps", "0",
                                     "--http-port", std::to_string(http)},
                                    output);
  wait_for_training(metrics);

  httplib::Client client("127.0.0.1", http);
  client.set_read_timeout(10, 0);
  check_api_and_metrics(client, base, metrics);
  check_page(client, http);
  check_bad_requests(client, http, metrics);
  check_answers_beside_idle_crowd(http);
  check_terminal_view(metrics);

  // Ctrl-C ends the run (everything above is checked): a summary and its plot.
  kill(cluster, SIGINT);
  REQUIRE(wait_exit(cluster, 60) == 0);
  check_run_summary(output, metrics, base, http);
  for (const auto& f : {metrics, output, base + ".png", base + ".status.json", base + ".metrics.txt"})
    std::remove(f.c_str());
}
