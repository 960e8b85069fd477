// The bulk endpoint's receiving side (net/bulk.hpp): a reader thread per
// accepted connection, which holds a stranger to its hello and every member
// to the budget of bytes being received.
#include <algorithm>
#include <cerrno>

#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>

#include "base/buffer_pool.hpp"
#include "base/log.hpp"
#include "net/bulk_impl.hpp"
#include "net/tcp.hpp"

namespace swarm {

std::shared_ptr<const void> bulk_endpoint::impl::hold(uint64_t n) {
  return {nullptr, [weak = weak_self, n](const void*) {
            if (auto p = weak.lock())
              p->release(n);
          }};
}

void bulk_endpoint::impl::deliver(caf::actor_id dest, uint64_t key, bulk_parts parts,
                                  std::shared_ptr<const void> held) {
  caf::actor target;
  {
    std::lock_guard<std::mutex> lock(m);
    if (auto it = receivers.find(dest); it != receivers.end())
      target = caf::actor_cast<caf::actor>(it->second);
    if (!target)
      ++stats.undeliverable;
  }
  if (target)
    caf::anon_send(target, bulk_delivery{key, std::move(parts), std::move(held)});
}

bool bulk_endpoint::impl::reserve(uint64_t n, const std::string& who) {
  std::unique_lock<std::mutex> lock(m);
  if (pending + n > opts.max_pending) {
    ++stats.frames_waited;
    get_logger("bulk")->warn("a frame of {} bytes from {} waits: frames being received hold {} of {} bytes", n, who,
                             pending, opts.max_pending);
    if (!room.wait_for(lock, opts.read_timeout, [&] { return stopping || pending + n <= opts.max_pending; }) ||
        stopping) {
      ++stats.stalled;
      get_logger("bulk")->warn("closed a bulk connection from {}: no room for its frame of {} bytes within {} s", who,
                               n, opts.read_timeout.count());
      return false;
    }
  }
  pending += n;
  stats.peak_pending = std::max(stats.peak_pending, pending);
  return true;
}

void bulk_endpoint::impl::release(uint64_t n) {
  {
    std::lock_guard<std::mutex> lock(m);
    pending -= n;
  }
  room.notify_all();
}

bool bulk_endpoint::impl::read_parts(tls_link& in, const bulk_frame_header& h, bulk_parts& parts,
                                     const std::string& who) {
  for (size_t i = 0; i < h.parts; ++i) {
    auto& bytes = parts[i];
    try {
      // A kept buffer when one fits (base/buffer_pool.hpp), read into
      // directly: no page to fault in or zero. A fresh one is zeroed by
      // take(), which costs what the copy out of a scratch buffer used to.
      bytes = transfer_buffers().take(h.part_size[i]);
    } catch (const std::bad_alloc&) {
      return false;
    }
    errno = 0;  // a peer that hangs up leaves it alone
    if (!in.read_all(bytes.data(), bytes.size())) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        std::lock_guard<std::mutex> lock(m);
        ++stats.stalled;
        get_logger("bulk")->warn("closed a bulk connection from {}: nothing came for {} s in the middle of a frame",
                                 who, opts.read_timeout.count());
      }
      return false;
    }
  }
  return true;
}

bool bulk_endpoint::impl::greeted(tls_link& in, const std::string& who,
                                  std::chrono::steady_clock::time_point deadline) {
  bulk_hello h;
  h.magic = 0;
  errno = 0;
  std::string why;
  if (!in.read_all_by(reinterpret_cast<char*>(&h), sizeof h, deadline))
    why = errno == ETIMEDOUT ? "no hello within " + std::to_string(opts.connect_timeout.count()) + " s"
                             : "it closed before its hello";
  else
    why = judge_hello(h, token);
  if (why.empty())
    return true;
  std::lock_guard<std::mutex> lock(m);
  ++stats.strangers;
  if (warned.size() < 1024 && warned.insert(who).second)
    get_logger("bulk")->warn("closed a bulk connection from {}: {} (further ones from it are not logged)", who, why);
  return false;
}

void bulk_endpoint::impl::read_loop(int fd, const std::string& who) {
  // One deadline for the TLS handshake and the hello together: a stranger
  // trickling a byte at a time holds its slot no longer than a silent one.
  const auto deadline = std::chrono::steady_clock::now() + opts.connect_timeout;
  auto in = secure(fd, true, deadline);  // a refused handshake is logged where it fails (net/tls.cpp)
  if (in && !greeted(*in, who, deadline))
    in.reset();
  {
    std::lock_guard<std::mutex> lock(m);
    strangers.done(fd);
  }
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
    if (!read_parts(*in, h, parts, who)) {
      release(h.size);
      break;  // half a frame: dropped, never delivered
    }
    {
      std::lock_guard<std::mutex> lock(m);
      ++stats.frames_received;
      stats.bytes_received += h.size;
    }
    // Counted until its actor takes it; from then on its inbox bounds it (bulk_inbox).
    deliver(h.dest, h.key, std::move(parts), hold(h.size));
  }
  in.reset();
  std::lock_guard<std::mutex> lock(m);
  // Forgotten before it is closed, under the lock the acceptor admits with:
  // closed first, its number could come back from accept() and be admitted
  // (a no-op insert) just before this erase made the new connection untracked
  // (uncounted, and never shut down when the endpoint stops).
  reader_fds.erase(fd);
  ::close(fd);
  readers_done.notify_all();
}

void bulk_endpoint::impl::accept_loop() {
  accept_until_stopped(listen_fd, m, stopping, [this](int fd) {
    const std::string who = peer_name(fd);
    const auto door = static_cast<int>(reader_fds.size()) < opts.max_connections
                          ? strangers.arrive(fd, who, std::chrono::steady_clock::now())
                          : greeting_slots::outcome{};
    if (!door.admitted || door.evict >= 0) {
      ++stats.crowded;
      if (warned.size() < 1024 && warned.insert(who).second)
        get_logger("bulk")->warn(
            "{} a bulk connection from {}: too many connections wait for their hello (further "
            "ones from it are not logged)",
            door.admitted ? "cut the longest-waiting stranger for" : "refused", who);
    }
    if (door.evict >= 0)
      ::shutdown(door.evict, SHUT_RDWR);  // its reader fails its hello, forgets and closes it
    if (!door.admitted) {
      ::close(fd);
      return;
    }
    reader_fds.insert(fd);
    std::thread([this, fd, who] { read_loop(fd, who); }).detach();
  });
}

}  // namespace swarm
