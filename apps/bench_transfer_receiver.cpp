// swarm_bench_transfer's child process: the receivers, a CAF actor and a raw
// TCP reader (apps/bench_transfer.hpp), and what both processes share.
#include "apps/bench_transfer.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/all.hpp>

#include "base/buffer_pool.hpp"
#include "net/bulk.hpp"
#include "net/chunks.hpp"
#include "net/tcp.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/types.hpp"
#include "messages/wire.hpp"

namespace swarm::bench {

namespace {

/// Decodes a request (whole or in parts) and its tensor, checked, as a
/// server does before it computes (actors/stage_calls.cpp).
caf::expected<int64_t> check_payload(bulk_parts parts) {
  auto req = decode_parts<proto::forward_request>(std::move(parts), "forward_request");
  if (!req)
    return req.error();
  auto inputs = decode_tensor(std::move(*req->mutable_inputs()), "inputs");
  if (!inputs)
    return inputs.error();
  return inputs->numel();
}

struct receiver_state {
  chunk_assembler chunks;
  bulk_inbox inbox;
  std::shared_ptr<bulk_endpoint> bulk;
  std::shared_ptr<const bulk_parts> reply_payload;  ///< transport-only replies: sent again without copying
  int64_t pieces = 0;
};

/// Reassembles (chunks or bulk), decodes and checks each tensor; replies with
/// its element count. fetch: sends a tensor of that many bytes back, bulk.
caf::behavior receiver(caf::stateful_actor<receiver_state>* self, std::shared_ptr<bulk_endpoint> bulk) {
  self->state.bulk = std::move(bulk);
  self->state.bulk->attach(caf::actor_cast<caf::actor>(self));
  return {
      [self](chunk_atom, uint64_t id, const std::string& piece) {
        (void)self->state.chunks.add(caf::actor_cast<caf::actor_addr>(self->current_sender()), id, piece,
                                     bulk_inbox::clock::now());
      },
      [self](bulk_delivery& d) { self->state.inbox.arrived(d.key, std::move(d.parts), bulk_inbox::clock::now()); },
      [self](transfer_atom, uint64_t id, std::string& tail) -> caf::result<int64_t> {
        if (is_bulk(id)) {
          auto rp = self->make_response_promise<int64_t>();
          self->state.inbox.claim(
              id,
              [rp](caf::expected<bulk_parts> whole) mutable {
                if (!whole) {
                  rp.deliver(whole.error());
                  return;
                }
                auto n = check_payload(std::move(*whole));
                if (n)
                  rp.deliver(*n);
                else
                  rp.deliver(n.error());
              },
              bulk_inbox::clock::now());
          return rp;
        }
        auto whole =
            self->state.chunks.finish(caf::actor_cast<caf::actor_addr>(self->current_sender()), id, std::move(tail));
        if (!whole)
          return whole.error();
        auto n = check_payload(bulk_parts{std::move(*whole)});
        if (!n)
          return n.error();
        return *n;
      },
      // A piece: one-way; `last` asks for an acknowledgement of all so far.
      [self](piece_atom, uint64_t key, bool last) -> caf::result<int64_t> {
        auto rp = self->make_response_promise<int64_t>();
        self->state.inbox.claim(
            key,
            [self, rp, last](caf::expected<bulk_parts> whole) mutable {
              if (whole) {
                ++self->state.pieces;
                give_back(*whole);
              }
              if (last)
                rp.deliver(self->state.pieces);
            },
            bulk_inbox::clock::now());
        return rp;
      },
      [](cpu_atom) { return cpu_seconds(); },
      // Transport only: the payload's bytes reached this actor; no decoding.
      [self](bytes_atom, uint64_t key, uint64_t expected) -> caf::result<uint64_t> {
        auto rp = self->make_response_promise<uint64_t>();
        self->state.inbox.claim(
            key,
            [rp, expected](caf::expected<bulk_parts> whole) mutable {
              if (whole && parts_size(*whole) == static_cast<int64_t>(expected)) {
                rp.deliver(uint64_t{expected});
                give_back(*whole);
              } else
                rp.deliver(make_error(errc::BAD_REQUEST, "wrong size"));
            },
            bulk_inbox::clock::now());
        return rp;
      },
      [self](fetch_atom, uint64_t bytes, bool raw) -> caf::result<uint64_t> {
        auto& cached = self->state.reply_payload;
        if (!cached || cached->front().size() != bytes)
          cached = std::make_shared<const bulk_parts>(bulk_parts{std::string(bytes, 'r')});
        return self->state.bulk->push(caf::actor_cast<caf::actor>(self->current_sender()), std::string{}, cached);
      },
  };
}

/// Raw TCP: length-prefixed payloads, one-byte acknowledgements.
void tcp_receiver(int listen_fd) {
  const int fd = ::accept(listen_fd, nullptr, nullptr);
  std::vector<char> buf;
  for (;;) {
    uint64_t n = 0;
    try {
      read_all(fd, reinterpret_cast<char*>(&n), sizeof n);
    } catch (...) {
      return;
    }
    buf.resize(n);
    read_all(fd, buf.data(), n);
    send_all(fd, "k", 1);
  }
}

}  // namespace

void give_back(bulk_parts& parts) {
  for (auto& p : parts)
    transfer_buffers().give(std::move(p));
}

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

proto::forward_request make_request(size_t bytes) {
  proto::forward_request req;
  auto& t = *req.mutable_inputs();
  t.add_shape(static_cast<int64_t>(bytes / 4));
  t.set_dtype(proto::FLOAT32);
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; i += 4096)
    data[i] = static_cast<char>(i);
  t.set_data(std::move(data));
  return req;
}

void configure(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  register_types(cfg);
  cfg.set("logger.console", caf::atom("none"));
}

void send_all(int fd, const char* p, size_t n) {
  if (!write_all(fd, p, n))
    throw std::runtime_error("tcp write failed");
}

void read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const auto r = ::read(fd, p, n);
    if (r <= 0)
      throw std::runtime_error("tcp read failed");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

[[noreturn]] void run_receivers(int listen_fd, int port_pipe) {
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto bulk = bulk_endpoint::start(sys);
  if (!bulk)
    std::_Exit(1);
  auto recv = sys.spawn(receiver, *bulk);
  auto port = sys.middleman().publish(recv, 0, "127.0.0.1");
  const uint16_t p = port ? *port : 0;
  if (::write(port_pipe, &p, sizeof p) != static_cast<ssize_t>(sizeof p))
    std::_Exit(1);
  tcp_receiver(listen_fd);
  caf::anon_send_exit(recv, caf::exit_reason::user_shutdown);
  std::_Exit(0);
}

}  // namespace swarm::bench
