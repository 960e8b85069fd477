#include "net/bulk.hpp"

#include <algorithm>
#include <cstring>
#include <tuple>

#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>

#include "base/buffer_pool.hpp"
#include "base/log.hpp"
#include "messages/errors.hpp"
#include "net/bulk_impl.hpp"
#include "net/tcp.hpp"

namespace swarm {

namespace {

const auto lookup_name = caf::atom("swarmbulk");

}  // namespace

std::vector<std::unique_ptr<peer_link>> bulk_endpoint::impl::sweep_ended() {
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

caf::strong_actor_ptr bulk_endpoint::impl::lookup(const caf::node_id& node, peer_link& link) {
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

int bulk_endpoint::impl::connect_peer(const caf::node_id& node, peer_link& link, bulk_hello& hello) {
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

bool bulk_endpoint::impl::write_frame(tls_link& out, const bulk_job& j, bulk_frame_header& h) {
  if (!out.write_all(reinterpret_cast<const char*>(&h), header_bytes(h), true) ||
      !out.write_all(j.head.data(), j.head.size(), j.data && !j.data->empty()))
    return false;
  if (j.data)
    for (size_t i = 0; i < j.data->size(); ++i)
      if (!out.write_all((*j.data)[i].data(), (*j.data)[i].size(), i + 1 < j.data->size()))
        return false;
  return true;
}

std::unique_ptr<tls_link> bulk_endpoint::impl::secure(int fd, bool server,
                                                      std::chrono::steady_clock::time_point deadline) const {
  if (fd < 0)
    return nullptr;
  if (!opts.tls)
    return std::make_unique<tls_link>(fd);
  return tls_link::handshake(*opts.tls, fd, server, deadline);
}

void bulk_endpoint::impl::write_loop(const caf::node_id node, peer_link* link) {
  int fd = -1;
  std::unique_ptr<tls_link> out;
  for (;;) {
    bulk_job j;
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
      out = secure(fd, false, std::chrono::steady_clock::now() + opts.connect_timeout);
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
    transfer_buffers().give(std::move(j.head));  // the frame's own; its shared parts are their holders' (shared_parts)
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

caf::expected<std::shared_ptr<bulk_endpoint>> bulk_endpoint::start(caf::actor_system& sys, bulk_options opts) {
  auto p = std::make_shared<impl>(sys, std::move(opts));
  p->weak_self = p;
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

bulk_endpoint::bulk_endpoint(std::shared_ptr<impl> p) : impl_(std::move(p)) {}

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

std::shared_ptr<const bulk_parts> shared_parts(bulk_parts parts) {
  return {new bulk_parts(std::move(parts)), [](const bulk_parts* p) {
            for (auto& part : *const_cast<bulk_parts*>(p))  // the last holder: nobody sees them any more
              transfer_buffers().give(std::move(part));
            delete p;
          }};
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
    caf::anon_send(dest, bulk_delivery{key, std::move(parts)});
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

}  // namespace swarm
