#include "net/bulk.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "net/tcp.hpp"
#include "net/tls.hpp"

namespace swarm {

namespace {

const auto lookup_name = caf::atom("swarmbulk");

/// Large buffers are fresh memory every time (glibc maps them anew), and
/// faulting them in 4 KiB pages cost more than copying into them: ask for huge
/// pages where the kernel grants them on request (THP "madvise" mode).
void advise_huge_pages(void* p, size_t n) {
  constexpr uintptr_t huge = uintptr_t{2} << 20;
  if (n < 2 * huge)
    return;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + huge - 1) & ~(huge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) & ~(huge - 1);
  if (end > begin)
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

struct job {
  caf::actor_id dest = 0;
  uint64_t key = 0;
  std::string head;
  std::shared_ptr<const bulk_parts> data;
};

} // namespace

/// One peer process: its queue and the writer thread that owns its connection.
struct peer_link {
  std::mutex m;
  std::condition_variable cv;
  std::deque<job> queue;
  bool stop = false;
  bool done = false;  ///< the writer gave up on the peer and ended: join and replace
  int fd = -1;        ///< the writer's connection, for shutdown to break
  std::thread writer;

  bool stopped() {
    std::lock_guard<std::mutex> lock(m);
    return stop;
  }
};

struct bulk_endpoint::impl {
  caf::actor_system& sys;
  bulk_options opts;
  int listen_fd = -1;
  uint16_t port = 0;
  bulk_token token;  ///< what a peer's hello must name (bulk_frame.hpp)
  caf::actor info;
  std::thread acceptor;

  mutable std::mutex m;  // everything below
  bool stopping = false;
  std::map<caf::actor_id, caf::actor_addr> receivers;
  std::map<caf::node_id, std::unique_ptr<peer_link>> links;
  std::set<int> reader_fds;
  std::set<std::string> warned;  ///< hosts whose missing or wrong hello was logged: once each
  std::condition_variable readers_done;
  std::mt19937_64 rng{std::random_device{}()};
  bulk_stats stats;
  uint64_t pending = 0;  ///< bytes of frames being received (reserved at their header)
  std::condition_variable room;

  std::chrono::steady_clock::time_point last_sweep{};

  impl(caf::actor_system& s, bulk_options o) : sys(s), opts(std::move(o)) {}

  /// Links whose writer ended (its peer hung up or could not be reached), taken
  /// out of `links` for the caller to join; looked for at most once a second.
  std::vector<std::unique_ptr<peer_link>> sweep_ended() {
    std::vector<std::unique_ptr<peer_link>> ended;
    std::lock_guard<std::mutex> lock(m);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sweep < std::chrono::seconds(1))
      return ended;
    last_sweep = now;
    for (auto it = links.begin(); it != links.end();) {
      bool done = false;
      {
        std::lock_guard<std::mutex> link_lock(it->second->m);
        done = it->second->done;
      }
      if (done) {
        ended.push_back(std::move(it->second));
        it = links.erase(it);
      } else {
        ++it;
      }
    }
    return ended;
  }

  void deliver(caf::actor_id dest, uint64_t key, bulk_parts parts) {
    caf::actor target;
    {
      std::lock_guard<std::mutex> lock(m);
      if (auto it = receivers.find(dest); it != receivers.end())
        target = caf::actor_cast<caf::actor>(it->second);
      if (!target)
        ++stats.undeliverable;
    }
    if (target)
      caf::anon_send(target, bulk_atom::value, key, std::move(parts));
  }

  /// The node's lookup entry, or null after opts.connect_timeout or once the
  /// link is stopped. What middleman::remote_lookup does, but that one waits
  /// 5 minutes for a node that died, holding the writer, every frame queued
  /// behind it and the process's exit (which joins the writer).
  caf::strong_actor_ptr lookup(const caf::node_id& node, peer_link& link) {
    auto basp = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    caf::strong_actor_ptr found;
    caf::scoped_actor self{sys, true};
    // Asked again every second: BASP drops a forward to a node it has no route
    // to at that moment (a link that just dropped and is being dialed again,
    // seen after a peer was SIGSTOPped), and nothing tells us.
    const auto start = std::chrono::steady_clock::now();
    const auto give_up = start + opts.connect_timeout;
    auto next_ask = start;
    bool answered = false;
    while (!answered && std::chrono::steady_clock::now() < give_up && !link.stopped()) {
      if (std::chrono::steady_clock::now() >= next_ask) {
        self->send(basp, caf::forward_atom::value, node, caf::atom("ConfigServ"),
                   caf::make_message(caf::get_atom::value, lookup_name));
        next_ask += std::chrono::seconds(1);
      }
      self->receive([&](caf::strong_actor_ptr& entry) { found = std::move(entry), answered = true; },
                    caf::after(std::chrono::milliseconds(100)) >> [] {});
    }
    return found;
  }

  /// Asks the peer node where its bulk endpoint listens and the token its
  /// hello must name (through CAF), then connects.
  int connect_peer(const caf::node_id& node, peer_link& link, bulk_hello& hello) {
    auto entry = lookup(node, link);
    if (!entry)
      return -1;
    std::string host;
    uint16_t peer_port = 0;
    caf::scoped_actor self{sys};
    self->request(caf::actor_cast<caf::actor>(entry), opts.connect_timeout, caf::get_atom::value)
        .receive(
            [&](const std::string& h, uint16_t p, uint64_t hi, uint64_t lo) {
              host = h, peer_port = p, hello.token = {hi, lo};
            },
            [](caf::error&) {});
    return peer_port == 0 ? -1 : connect_to(host, peer_port, opts.connect_timeout, opts.write_timeout);
  }

  static bool write_frame(tls_link& out, const job& j, bulk_frame_header& h) {
    if (!out.write_all(reinterpret_cast<const char*>(&h), header_bytes(h), true) ||
        !out.write_all(j.head.data(), j.head.size(), j.data && !j.data->empty()))
      return false;
    if (j.data)
      for (size_t i = 0; i < j.data->size(); ++i)
        if (!out.write_all((*j.data)[i].data(), (*j.data)[i].size(), i + 1 < j.data->size()))
          return false;
    return true;
  }

  /// The connection on `fd` as a stream: plain, or after a TLS handshake (null when it fails).
  std::unique_ptr<tls_link> secure(int fd, bool server) const {
    if (fd < 0)
      return nullptr;
    if (!opts.tls)
      return std::make_unique<tls_link>(fd);
    return tls_link::handshake(*opts.tls, fd, server, static_cast<int>(opts.connect_timeout.count()));
  }

  /// Sends the link's frames in order until stopped, or until the peer cannot
  /// be reached or its connection breaks: then the frames queued for it are
  /// dropped (their receivers' claims time out, like a dead peer's) and the
  /// thread ends, so a dead peer holds neither a thread nor memory.
  void write_loop(const caf::node_id node, peer_link* link) {
    int fd = -1;
    std::unique_ptr<tls_link> out;
    for (;;) {
      job j;
      {
        std::unique_lock<std::mutex> lock(link->m);
        // Idle, it looks once a second whether the peer hung up: a peer that
        // died (a restarted one comes back as another node) would otherwise
        // keep this thread and its connection for the life of the process.
        while (!link->cv.wait_for(lock, std::chrono::seconds(1), [&] { return link->stop || !link->queue.empty(); }))
          if (fd >= 0 && peer_hung_up(fd))
            link->stop = link->done = true;
        if (link->stop)
          break;
        j = std::move(link->queue.front());
        link->queue.pop_front();
      }
      if (fd < 0) {
        bulk_hello hello;
        fd = connect_peer(node, *link, hello);
        {
          std::lock_guard<std::mutex> lock(link->m);
          link->fd = fd;
        }
        out = secure(fd, false);
        if (out && !out->write_all(reinterpret_cast<const char*>(&hello), sizeof hello, true))
          out.reset();
      }
      bulk_frame_header h;
      h.dest = j.dest;
      h.key = j.key;
      h.parts = static_cast<uint32_t>(1 + (j.data ? j.data->size() : 0));
      h.part_size[0] = j.head.size();
      for (size_t i = 1; i < h.parts; ++i)
        h.part_size[i] = (*j.data)[i - 1].size();
      for (size_t i = 0; i < h.parts; ++i)
        h.size += h.part_size[i];
      const bool ok = out && write_frame(*out, j, h);
      size_t dropped = 0;
      if (!ok) {
        std::lock_guard<std::mutex> lock(link->m);
        dropped = link->queue.size();
        link->queue.clear();
        link->done = true;
      }
      std::lock_guard<std::mutex> lock(m);
      if (ok) {
        ++stats.frames_sent;
        stats.bytes_sent += h.size;
        continue;
      }
      stats.send_failures += 1 + dropped;
      get_logger("bulk")->warn("cannot send {} bytes to {}: {}; {} more frames for it dropped", h.size,
                               caf::to_string(node),
                               fd < 0 ? "its bulk endpoint cannot be reached"
                               : !out ? "the TLS handshake failed"
                                      : "the connection broke",
                               dropped);
      break;
    }
    out.reset();
    std::lock_guard<std::mutex> lock(link->m);
    if (fd >= 0)
      ::close(fd);
    link->fd = -1;
  }

  /// Room for a frame of `n` bytes within opts.max_pending, waiting up to
  /// opts.read_timeout for frames being received to finish; false (said in
  /// the log) when none came or the endpoint stops.
  bool reserve(uint64_t n, const std::string& who) {
    std::unique_lock<std::mutex> lock(m);
    if (pending + n > opts.max_pending) {
      ++stats.frames_waited;
      get_logger("bulk")->warn("a frame of {} bytes from {} waits: frames being received hold {} of {} bytes", n,
                               who, pending, opts.max_pending);
      if (!room.wait_for(lock, opts.read_timeout, [&] { return stopping || pending + n <= opts.max_pending; }) ||
          stopping) {
        ++stats.stalled;
        get_logger("bulk")->warn("closed a bulk connection from {}: no room for its frame of {} bytes within {} s",
                                 who, n, opts.read_timeout.count());
        return false;
      }
    }
    pending += n;
    stats.peak_pending = std::max(stats.peak_pending, pending);
    return true;
  }

  void release(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock(m);
      pending -= n;
    }
    room.notify_all();
  }

  /// A frame's parts read from `in` into `parts`; false when the connection
  /// broke or stalled mid-frame (said in the log), the half frame dropped.
  bool read_parts(tls_link& in, const bulk_frame_header& h, bulk_parts& parts, std::vector<char>& scratch,
                  const std::string& who) {
    for (size_t i = 0; i < h.parts; ++i) {
      auto& bytes = parts[i];
      try {
        bytes.reserve(h.part_size[i]);
        advise_huge_pages(bytes.data(), h.part_size[i]);
      } catch (const std::bad_alloc&) {
        return false;
      }
      // Through a scratch buffer that stays in cache: a std::string cannot
      // grow without zeroing, and zeroing a fresh buffer first cost one more
      // pass over memory than the copy out of the scratch.
      while (bytes.size() < h.part_size[i]) {
        const size_t n = std::min<uint64_t>(scratch.size(), h.part_size[i] - bytes.size());
        errno = 0;  // a peer that hangs up leaves it alone
        if (!in.read_all(scratch.data(), n)) {
          if (errno == EAGAIN || errno == EWOULDBLOCK) {
            std::lock_guard<std::mutex> lock(m);
            ++stats.stalled;
            get_logger("bulk")->warn("closed a bulk connection from {}: nothing came for {} s in the middle of a frame",
                                     who, opts.read_timeout.count());
          }
          return false;
        }
        bytes.append(scratch.data(), n);
      }
    }
    return true;
  }

  /// Closes a connection that has not shown this endpoint's token in time:
  /// false, said in the log once per peer address.
  bool greeted(tls_link& in, int fd, const std::string& who) {
    bulk_hello h;
    h.magic = 0;
    set_receive_timeout(fd, opts.connect_timeout);
    errno = 0;
    std::string why;
    if (!in.read_all(reinterpret_cast<char*>(&h), sizeof h))
      why = errno == EAGAIN || errno == EWOULDBLOCK
                ? "no hello within " + std::to_string(opts.connect_timeout.count()) + " s"
                : "it closed before its hello";
    else
      why = judge_hello(h, token);
    if (why.empty())
      return true;
    std::lock_guard<std::mutex> lock(m);
    ++stats.strangers;
    if (warned.size() < 1024 && warned.insert(who).second)
      get_logger("bulk")->warn("closed a bulk connection from {}: {} (further ones from it are not logged)", who,
                               why);
    return false;
  }

  void read_loop(int fd) {
    std::vector<char> scratch(size_t{256} << 10);
    const std::string who = peer_name(fd);
    auto in = secure(fd, true);  // a refused handshake is logged where it fails (net/tls.cpp)
    if (in && !greeted(*in, fd, who))
      in.reset();
    while (in) {
      bulk_frame_header h;
      set_receive_timeout(fd, std::chrono::seconds(0));  // between frames a peer keeps its connection idle
      if (!in->read_all(reinterpret_cast<char*>(&h), 1))
        break;
      set_receive_timeout(fd, opts.read_timeout);  // a frame once begun must keep coming
      if (!in->read_all(reinterpret_cast<char*>(&h) + 1, bulk_fixed_header - 1))
        break;
      const bool framed = is_frame_start(h);
      if (framed && !in->read_all(reinterpret_cast<char*>(h.part_size), h.parts * sizeof(uint64_t)))
        break;
      const std::string why = judge_frame_header(h, opts.max_frame);
      if (!why.empty()) {
        std::lock_guard<std::mutex> lock(m);
        ++stats.bad_frames;
        get_logger("bulk")->warn("closed a bulk connection from {}: {}", who, why);
        break;
      }
      if (!reserve(h.size, who))
        break;
      bulk_parts parts(h.parts);
      const bool whole = read_parts(*in, h, parts, scratch, who);
      release(h.size);  // delivered bytes are the receiver's inbox's to bound (bulk_inbox)
      if (!whole)
        break;  // half a frame: dropped, never delivered
      {
        std::lock_guard<std::mutex> lock(m);
        ++stats.frames_received;
        stats.bytes_received += h.size;
      }
      deliver(h.dest, h.key, std::move(parts));
    }
    in.reset();
    ::close(fd);
    std::lock_guard<std::mutex> lock(m);
    reader_fds.erase(fd);
    readers_done.notify_all();
  }

  void accept_loop() {
    accept_until_stopped(listen_fd, m, stopping, [this](int fd) {
      if (static_cast<int>(reader_fds.size()) >= opts.max_connections) {
        ::close(fd);
        return;
      }
      reader_fds.insert(fd);
      std::thread([this, fd] { read_loop(fd); }).detach();
    });
  }
};

caf::expected<std::shared_ptr<bulk_endpoint>> bulk_endpoint::start(caf::actor_system& sys, bulk_options opts) {
  auto p = std::make_unique<impl>(sys, std::move(opts));
  auto listening = listen_tcp(p->opts.host, p->opts.port, "bulk endpoint");
  if (!listening)
    return listening.error();
  std::tie(p->listen_fd, p->port) = *listening;
  std::random_device entropy;
  p->token = {(uint64_t{entropy()} << 32) | entropy(), (uint64_t{entropy()} << 32) | entropy()};
  const auto host = p->opts.host;
  const auto port = p->port;
  const auto token = p->token;
  // Hidden: a process must not wait for it when it shuts down.
  p->info = sys.spawn<caf::hidden>([host, port, token](caf::event_based_actor*) -> caf::behavior {
    return {[host, port, token](caf::get_atom) { return caf::make_message(host, port, token.hi, token.lo); }};
  });
  sys.registry().put(lookup_name, caf::actor_cast<caf::strong_actor_ptr>(p->info));
  auto* raw = p.get();
  p->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::shared_ptr<bulk_endpoint>(new bulk_endpoint(std::move(p)));
}

bulk_endpoint::bulk_endpoint(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

bulk_endpoint::~bulk_endpoint() {
  auto& p = *impl_;
  std::map<caf::node_id, std::unique_ptr<peer_link>> links;
  {
    std::lock_guard<std::mutex> lock(p.m);
    p.stopping = true;
    p.room.notify_all();
    links.swap(p.links);
    for (int fd : p.reader_fds)
      ::shutdown(fd, SHUT_RDWR);  // unblocks their reads; they close and leave
  }
  ::shutdown(p.listen_fd, SHUT_RDWR);
  p.acceptor.join();
  ::close(p.listen_fd);
  for (auto& [node, link] : links) {
    {
      std::lock_guard<std::mutex> lock(link->m);
      link->stop = true;
      if (link->fd >= 0)
        ::shutdown(link->fd, SHUT_RDWR);  // a write to a peer that stopped reading ends now
    }
    link->cv.notify_all();
    link->writer.join();
  }
  std::unique_lock<std::mutex> lock(p.m);
  p.readers_done.wait(lock, [&] { return p.reader_fds.empty(); });
  p.sys.registry().erase(lookup_name);
  caf::anon_send_exit(p.info, caf::exit_reason::user_shutdown);
}

uint16_t bulk_endpoint::port() const { return impl_->port; }

std::string bulk_endpoint::hello() const {
  bulk_hello h;
  h.token = impl_->token;
  return {reinterpret_cast<const char*>(&h), sizeof h};
}

void bulk_endpoint::attach(const caf::actor& receiver) {
  std::lock_guard<std::mutex> lock(impl_->m);
  impl_->receivers[receiver.id()] = receiver.address();
}

void bulk_endpoint::detach(caf::actor_id id) {
  std::lock_guard<std::mutex> lock(impl_->m);
  impl_->receivers.erase(id);
}

uint64_t bulk_endpoint::push(const caf::actor& dest, std::string head, std::shared_ptr<const bulk_parts> data) {
  auto& p = *impl_;
  if (data && data->size() + 1 > max_bulk_parts)
    throw std::invalid_argument("bulk_endpoint::push: more than " + std::to_string(max_bulk_parts) + " parts");
  uint64_t key = 0;
  peer_link* link = nullptr;
  std::unique_ptr<peer_link> ended;
  {
    std::lock_guard<std::mutex> lock(p.m);
    key = p.rng() | bulk_flag;
    if (dest.node() != p.sys.node() && !p.stopping) {
      auto& slot = p.links[dest.node()];
      if (slot) {
        std::lock_guard<std::mutex> link_lock(slot->m);
        if (slot->done)
          ended = std::move(slot);  // its writer gave up on the peer; a fresh one tries again
      }
      if (!slot) {
        slot = std::make_unique<peer_link>();
        auto* l = slot.get();
        l->writer = std::thread([&p, node = dest.node(), l] { p.write_loop(node, l); });
      }
      link = slot.get();
    }
  }
  if (ended)
    ended->writer.join();  // it has ended already
  for (auto& gone : p.sweep_ended())
    gone->writer.join();
  if (!link) {  // in this process: hand it over
    bulk_parts parts{std::move(head)};
    if (data)
      parts.insert(parts.end(), data->begin(), data->end());
    caf::anon_send(dest, bulk_atom::value, key, std::move(parts));
    return key;
  }
  {
    std::lock_guard<std::mutex> lock(link->m);
    link->queue.push_back({dest.id(), key, std::move(head), std::move(data)});
  }
  link->cv.notify_one();
  return key;
}

bulk_stats bulk_endpoint::stats() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->stats;
}

} // namespace swarm
