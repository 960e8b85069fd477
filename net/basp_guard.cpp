#include "net/basp_guard.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "net/greeting_slots.hpp"
#include "net/tcp.hpp"
#include "net/tls.hpp"

namespace swarm {

namespace {

enum basp_op : unsigned char { server_handshake = 0, client_handshake = 1, heartbeat = 6 };

using clock_type = std::chrono::steady_clock;

/// Reads exactly `n` bytes unless the peer closes, `deadline` passes, or
/// nothing arrives for `idle` (the last two set `timed_out`).
bool read_exact(int fd, char* p, size_t n, clock_type::time_point deadline, std::chrono::milliseconds idle,
                bool* timed_out = nullptr) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    const auto wait = std::min(idle, left);
    pollfd pfd{fd, POLLIN, 0};
    const int ready = wait.count() <= 0 ? 0 : ::poll(&pfd, 1, static_cast<int>(wait.count()));
    if (ready < 0 && errno == EINTR)
      continue;  // a signal's handler ran: wait on, for what is left
    if (ready != 1) {
      if (timed_out)
        *timed_out = true;
      return false;
    }
    const auto r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

/// One relayed connection; the last of its two threads closes both sockets.
struct link {
  int peer = -1, backend = -1;
  uint16_t relay_port = 0;  ///< backend's local port, known to net/tls.cpp
  ~link() {
    if (relay_port != 0)
      note_relayed_peer(relay_port, {});
    ::close(peer);
    if (backend >= 0)
      ::close(backend);
  }
  void cut() {
    ::shutdown(peer, SHUT_RDWR);
    if (backend >= 0)
      ::shutdown(backend, SHUT_RDWR);
  }
};

}  // namespace

uint32_t basp_payload_size(const unsigned char* h) {
  return (uint32_t{h[4]} << 24) | (uint32_t{h[5]} << 16) | (uint32_t{h[6]} << 8) | uint32_t{h[7]};
}

std::string judge_basp_header(const unsigned char* h, bool first, const basp_limits& limits) {
  const unsigned op = h[0];
  const uint32_t size = basp_payload_size(h);
  if (first) {
    if (op != client_handshake)
      return "the first frame is not a client handshake (operation " + std::to_string(op) + ")";
    if (size == 0 || size > limits.max_handshake)
      return "a client handshake of " + std::to_string(size) + " bytes";
    return {};
  }
  if (op == heartbeat)
    return size == 0 ? std::string{} : "a heartbeat with a payload";
  if (op == server_handshake || op > heartbeat)
    return "operation " + std::to_string(op) + " from a connecting peer";
  if (size == 0 || size > limits.max_payload)
    return "a payload of " + std::to_string(size) + " bytes (operation " + std::to_string(op) + ")";
  return {};
}

std::string judge_routed_source(const unsigned char* header, const char* payload, size_t n, const std::string& node) {
  constexpr unsigned routed_message = 3;
  if (header[0] != routed_message)
    return {};
  // Its payload begins with the source node, serialized as the handshake
  // serialized the peer's own: another node there is a forged sender (CAF
  // 0.17 would deliver it as that node's, even as one of this node's actors).
  if (node.empty() || n < node.size() || std::memcmp(payload, node.data(), node.size()) != 0)
    return "a routed message naming another node as its sender";
  return {};
}

std::string judge_tls_header(const unsigned char* h, bool first) {
  enum : unsigned { change_cipher_spec = 20, alert = 21, handshake = 22, application_data = 23 };
  const unsigned type = h[0];
  const uint32_t size = tls_record_size(h);
  if (first && type != handshake)
    return "not TLS (first bytes " + std::to_string(h[0]) + " " + std::to_string(h[1]) + ")";
  if (type < change_cipher_spec || type > application_data || h[1] != 3)
    return "not a TLS record (type " + std::to_string(type) + ", version " + std::to_string(h[1]) + ")";
  if (size == 0 || size > max_tls_record)
    return "a TLS record of " + std::to_string(size) + " bytes";
  return {};
}

struct basp_guard::impl {
  guard_options opts;
  int listen_fd = -1;
  uint16_t port = 0;
  std::thread acceptor;

  mutable std::mutex m;  // everything below
  bool stopping = false;
  std::set<std::shared_ptr<link>> links;
  std::condition_variable threads_done;
  int threads = 0;
  std::set<std::string> warned;  ///< peers whose refusal was logged: once each
  guard_stats stats;
  greeting_slots strangers;  ///< connections before their handshake (net/greeting_slots.hpp)

  explicit impl(guard_options o)
      : opts(std::move(o)), strangers(opts.max_connections - opts.member_slots, opts.max_strangers_per_address) {}

  /// Connection `l` is past its handshake, or ends before it.
  void greeted_or_gone(const link& l) {
    std::lock_guard<std::mutex> lock(m);
    strangers.done(l.peer);
  }

  void refuse(const std::string& peer, const std::string& why) {
    std::lock_guard<std::mutex> lock(m);
    ++stats.refused;
    if (warned.size() < 1024 && warned.insert(peer).second)
      get_logger("guard")->warn("closed a connection from {}: {} (further ones from it are not logged)", peer, why);
  }

  /// Peer to CAF: frame by frame (TLS: record by record), each header judged
  /// before anything passes.
  void upstream(const std::shared_ptr<link>& l, const std::string& who) {
    unsigned char h[basp_header_size];
    const size_t header_size = opts.tls ? tls_header_size : basp_header_size;
    std::vector<char> buf(64 << 10);
    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(opts.idle_timeout);
    auto deadline = clock_type::now() + opts.handshake_timeout;
    // A BASP server speaks first; a TLS client does, so CAF is dialed only
    // once a first record passed and never starts a session for garbage.
    if (!opts.tls && !open_backend(l, who)) {
      greeted_or_gone(*l);
      l->cut();
      return;
    }
    std::string node;  // plain: the peer's node id, as its client handshake serialized it
    for (bool first = true, shook = false;; first = false) {
      if (shook)
        deadline = clock_type::time_point::max();
      bool late = false;
      if (!read_exact(l->peer, reinterpret_cast<char*>(h), header_size, deadline, idle, &late)) {
        if (!shook && late)  // else it hung up, or CAF refused it
          refuse(who, "no complete handshake within " + std::to_string(opts.handshake_timeout.count()) + " s");
        break;
      }
      const auto why = opts.tls ? judge_tls_header(h, first) : judge_basp_header(h, first, opts.limits);
      if (!why.empty()) {
        refuse(who, why);
        break;
      }
      // BASP: the first frame is the handshake. TLS 1.3: the client's first
      // encrypted record carries the end of its handshake.
      shook = !opts.tls || h[0] == 23;
      if (first && opts.tls && !open_backend(l, who))
        break;
      size_t left = opts.tls ? tls_record_size(h) : basp_payload_size(h);
      // The header goes on with the payload's first piece, once that was judged; a heartbeat alone.
      bool ok = left > 0 || write_all(l->backend, reinterpret_cast<const char*>(h), header_size);
      for (bool head = true; ok && left > 0; head = false) {
        const size_t n = std::min(left, buf.size());
        ok = read_exact(l->peer, buf.data(), n, deadline, idle);
        if (ok && head && !opts.tls) {
          if (first)  // the handshake (<= max_handshake) comes whole in one piece
            node.assign(buf.data(), n);
          if (auto forged = judge_routed_source(h, buf.data(), n, node); !forged.empty()) {
            refuse(who, forged);
            ok = false;
          }
        }
        ok = ok && (!head || write_all(l->backend, reinterpret_cast<const char*>(h), header_size)) &&
             write_all(l->backend, buf.data(), n);
        left -= n;
      }
      if (!ok)
        break;
      std::lock_guard<std::mutex> lock(m);
      ++stats.frames_passed;
      if (shook)
        strangers.done(l->peer);  // only once its handshake frame passed whole: a trickled payload still counts
    }
    greeted_or_gone(*l);  // before `l` closes: its descriptor's number names it among the strangers
    l->cut();
  }

  /// CAF to peer: as it comes.
  static void downstream(const std::shared_ptr<link>& l) {
    std::vector<char> buf(64 << 10);
    for (;;) {
      const auto r = ::recv(l->backend, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0 || !write_all(l->peer, buf.data(), static_cast<size_t>(r)))
        break;
    }
    l->cut();
  }

  /// Dials CAF for a peer and starts the thread that copies CAF's bytes back.
  bool open_backend(const std::shared_ptr<link>& l, const std::string& who) {
    // Noted before it connects: CAF starts a TLS handshake as soon as it
    // accepts, and a refusal must name the peer, not this relay's port.
    const int fd = connect_loopback(opts.backend_port, [&](uint16_t local) {
      l->relay_port = local;
      note_relayed_peer(local, who);
    });
    if (fd < 0) {
      get_logger("guard")->warn("cannot reach the local CAF port {}: {}", opts.backend_port, std::strerror(errno));
      return false;
    }
    std::lock_guard<std::mutex> lock(m);
    l->backend = fd;
    if (stopping) {
      l->cut();
      return false;
    }
    ++threads;
    std::thread([this, l] { run(l, false); }).detach();
    return true;
  }

  void run(std::shared_ptr<link> l, bool up) {
    if (up)
      upstream(l, peer_name(l->peer));
    else
      downstream(l);
    std::lock_guard<std::mutex> lock(m);
    links.erase(l);  // the other thread's reference keeps it open until that one ends too
    --threads;
    threads_done.notify_all();
  }

  void accept_loop() {
    accept_until_stopped(listen_fd, m, stopping, [this](int fd) {
      auto l = std::make_shared<link>();
      l->peer = fd;
      if (static_cast<int>(links.size()) >= opts.max_connections) {
        ++stats.refused;
        return;  // `l` closes it
      }
      const std::string who = peer_name(fd);
      const auto door = strangers.arrive(fd, who, clock_type::now());
      if (!door.admitted || door.evict >= 0)
        crowded(who, door.admitted);
      if (door.evict >= 0)
        for (const auto& other : links)
          if (other->peer == door.evict)
            other->cut();  // its upstream thread sees the peer gone and ends
      if (!door.admitted)
        return;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ++stats.accepted;
      links.insert(l);
      ++threads;
      std::thread([this, l] { run(l, true); }).detach();
    });
  }

  /// Too many strangers wait at the door (`m` held): the newcomer from `who`
  /// was refused, or (`admitted`) took the slot of the one waiting longest.
  void crowded(const std::string& who, bool admitted) {
    ++stats.refused;
    if (warned.size() < 1024 && warned.insert(who).second)
      get_logger("guard")->warn(
          "{} a connection from {}: too many connections wait for their handshake (further "
          "ones from it are not logged)",
          admitted ? "cut the longest-waiting stranger for" : "refused", who);
  }
};

caf::expected<std::unique_ptr<basp_guard>> basp_guard::start(guard_options opts) {
  auto p = std::make_unique<impl>(std::move(opts));
  auto listening = listen_tcp(p->opts.host, p->opts.port, "guard");
  if (!listening)
    return listening.error();
  std::tie(p->listen_fd, p->port) = *listening;
  auto* raw = p.get();
  p->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<basp_guard>(new basp_guard(std::move(p)));
}

basp_guard::basp_guard(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

basp_guard::~basp_guard() {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> lock(p.m);
    p.stopping = true;
    for (const auto& l : p.links)
      l->cut();
  }
  ::shutdown(p.listen_fd, SHUT_RDWR);
  p.acceptor.join();
  ::close(p.listen_fd);
  std::unique_lock<std::mutex> lock(p.m);
  p.threads_done.wait(lock, [&] { return p.threads == 0; });
}

uint16_t basp_guard::port() const { return impl_->port; }

guard_stats basp_guard::stats() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->stats;
}

}  // namespace swarm
