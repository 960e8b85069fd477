#include "net/http_server.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.hpp"
#include "net/http_request.hpp"
#include "net/tcp.hpp"

namespace swarm {

namespace {

using clock = std::chrono::steady_clock;

}  // namespace

struct http_server::impl {
  struct conn {
    std::string in, out;
    size_t sent = 0;
    bool close_after = false;
    clock::time_point deadline;
    uint64_t order = 0;  ///< key in `oldest`: when it last started waiting for a request
    /// The client shut its side: what it sent is answered, then the
    /// connection closes (and is never watched for reading again: a
    /// half-closed socket is always readable, so epoll would wake the loop
    /// at once, forever).
    bool peer_done = false;
  };
  struct reused {
    clock::time_point until;
    http_response response;
  };

  http_handler handler;
  http_options opt;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1, spare_fd = -1;
  uint16_t port = 0;
  std::unordered_map<int, conn> conns;
  std::map<uint64_t, int> oldest;
  std::map<std::string, reused> recent;  ///< 2xx answers by path, reused for opt.reuse_for
  uint64_t next_order = 0;
  clock::time_point last_eviction_log{};
  mutable std::mutex stats_mutex;
  http_stats stats;
  std::thread thread;

  void count(uint64_t http_stats::*field) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++(stats.*field);
    stats.open = conns.size();
  }

  /// Closes a connection, counted under `why` if given: the counts change
  /// before the client can see the close.
  void close_conn(int fd, uint64_t http_stats::*why = nullptr) {
    auto it = conns.find(fd);
    if (it == conns.end())
      return;
    oldest.erase(it->second.order);
    conns.erase(it);
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      if (why)
        ++(stats.*why);
      stats.open = conns.size();
    }
    ::close(fd);
  }

  /// The handler's answer for `path`, or the one it gave less than
  /// opt.reuse_for ago: a client pipelining hundreds of requests (or many
  /// clients at once) costs one render, not one each.
  http_response render(const std::string& path) {
    const auto now = clock::now();
    if (const auto it = recent.find(path); it != recent.end() && now < it->second.until)
      return it->second.response;
    auto r = handler(path);
    count(&http_stats::rendered);
    if (opt.reuse_for.count() > 0 && r.status >= 200 && r.status < 300) {
      if (recent.size() >= 16)  // paths that answer 2xx are few; never grows with what clients send
        recent.clear();
      recent[path] = {now + opt.reuse_for, r};
    }
    return r;
  }

  void waiting_for_request(int fd, conn& c) {
    oldest.erase(c.order);
    c.order = next_order++;
    oldest.emplace(c.order, fd);
    c.deadline = clock::now() + opt.request_timeout;
  }

  void evict_oldest() {
    if (oldest.empty())
      return;
    close_conn(oldest.begin()->second, &http_stats::evicted);
    const auto now = clock::now();
    if (now - last_eviction_log > std::chrono::minutes(1)) {
      last_eviction_log = now;
      get_logger("http")->warn(
          "{} connections held open on the HTTP port (the most kept is {}): closing the "
          "oldest to answer new ones ({} closed so far)",
          conns.size() + 1, opt.max_connections, stats.evicted);
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: make room, or take the waiting connection
          // with the spare descriptor and close it, so accept cannot spin.
          if (!oldest.empty()) {
            evict_oldest();
            continue;
          }
          ::close(spare_fd);
          ::close(::accept(listen_fd, nullptr, nullptr));
          spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return;
      }
      if (conns.size() >= opt.max_connections)
        evict_oldest();
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
      auto& c = conns[fd];
      waiting_for_request(fd, c);
      count(&http_stats::accepted);
    }
  }

  /// Sends what is queued; false when the connection was closed.
  bool flush(int fd, conn& c) {
    while (c.sent < c.out.size()) {
      const auto n = ::send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        epoll_event ev{};
        ev.events = c.peer_done ? EPOLLOUT : EPOLLOUT | EPOLLRDHUP;
        ev.data.fd = fd;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
        c.deadline = clock::now() + opt.write_timeout;
        return true;
      }
      close_conn(fd);
      return false;
    }
    c.out.clear();
    c.sent = 0;
    if (c.close_after) {
      close_conn(fd);
      return false;
    }
    if (c.peer_done)
      return true;  // serve() answers what is left, then closes
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
    waiting_for_request(fd, c);
    return true;
  }

  /// Answers every complete request in `c.in` (pipelined ones in order).
  void serve(int fd, conn& c) {
    while (c.out.empty()) {
      auto end = c.in.find("\r\n\r\n");
      size_t skip = 4;
      if (end == std::string::npos && (end = c.in.find("\n\n")) != std::string::npos)
        skip = 2;
      http_answer p;
      if (end == std::string::npos || end > opt.max_request_bytes) {
        if (c.in.size() <= opt.max_request_bytes) {
          if (c.peer_done)
            close_conn(fd);  // no more is coming
          return;            // more to come
        }
        p.response = http_plain(431, "request headers over " + std::to_string(opt.max_request_bytes) + " bytes");
      } else {
        p = answer_request(c.in.substr(0, end), opt.token, [this](const std::string& path) { return render(path); });
        c.in.erase(0, end + skip);
      }
      c.close_after = !p.keep_alive;
      c.out = encode_answer(p);
      count(p.response.status < 400 ? &http_stats::answered : &http_stats::refused);
      if (!flush(fd, c))
        return;
    }
  }

  void on_event(int fd, uint32_t events) {
    auto it = conns.find(fd);
    if (it == conns.end())
      return;
    auto& c = it->second;
    if (!c.out.empty()) {
      if (events & (EPOLLERR | EPOLLHUP)) {
        close_conn(fd);
        return;
      }
      if (events & EPOLLRDHUP) {
        c.peer_done = true;  // it may still read its answers: watch for room only
        epoll_event ev{};
        ev.events = EPOLLOUT;
        ev.data.fd = fd;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
      }
      if (events & EPOLLOUT && flush(fd, c))
        serve(fd, c);
      return;
    }
    char buf[4096];
    for (;;) {
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > opt.max_request_bytes)
          break;  // enough to refuse it
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (n < 0) {
        close_conn(fd);  // an error
        return;
      }
      c.peer_done = true;  // the client shut its side: answer what it sent
      break;
    }
    serve(fd, c);
  }

  void expire() {
    const auto now = clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : conns)
      if (c.deadline < now)
        late.push_back(fd);
    for (int fd : late)
      close_conn(fd, &http_stats::timed_out);
  }

  void run() {
    epoll_event events[256];
    auto last_scan = clock::now();
    for (;;) {
      const int n = ::epoll_wait(epoll_fd, events, 256, 250);
      if (n > 0) {
        std::lock_guard<std::mutex> lock(stats_mutex);
        stats.events += static_cast<uint64_t>(n);
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd)
          return;
        if (fd == listen_fd)
          accept_all();
        else
          on_event(fd, events[i].events);
      }
      if (clock::now() - last_scan > std::chrono::milliseconds(250)) {
        expire();
        last_scan = clock::now();
      }
    }
  }

  ~impl() {
    for (const auto& [fd, c] : conns)
      ::close(fd);
    for (int fd : {listen_fd, epoll_fd, wake_fd, spare_fd})
      if (fd >= 0)
        ::close(fd);
  }
};

caf::expected<std::unique_ptr<http_server>> http_server::start(const std::string& host, uint16_t port,
                                                               http_handler handler, http_options options) {
  auto listening = listen_tcp(host, port, "--http-host/--http-port");
  if (!listening)
    return listening.error();
  auto p = std::make_unique<impl>();
  p->handler = std::move(handler);
  p->opt = options;
  p->listen_fd = listening->first;
  p->port = listening->second;
  ::listen(p->listen_fd, 1024);  // a burst of clients waits in the kernel, not refused
  ::fcntl(p->listen_fd, F_SETFL, O_NONBLOCK);
  p->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  p->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p->spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int fd : {p->listen_fd, p->wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(p->epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

http_server::~http_server() {
  const uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(impl_->wake_fd, &one, sizeof one);
  impl_->thread.join();
}

uint16_t http_server::port() const { return impl_->port; }

http_stats http_server::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

}  // namespace swarm
