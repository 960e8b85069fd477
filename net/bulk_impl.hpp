#pragma once
// The bulk endpoint's insides (net/bulk.hpp), shared by its sending side
// (net/bulk.cpp: lookup, connect, a writer thread per peer process) and its
// receiving side (net/bulk_reader.cpp: hello, budget, a reader thread per
// connection). Nothing outside those two files includes it.

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/node_id.hpp>

#include "net/bulk.hpp"
#include "net/bulk_frame.hpp"
#include "net/greeting_slots.hpp"
#include "net/tls.hpp"

namespace swarm {

/// A frame queued for a peer process.
struct bulk_job {
  caf::actor_id dest = 0;
  uint64_t key = 0;
  std::string head;
  std::shared_ptr<const bulk_parts> data;
};

/// One peer process: its queue and the writer thread that owns its connection.
struct peer_link {
  std::mutex m;
  std::condition_variable cv;
  std::deque<bulk_job> queue;
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
  std::weak_ptr<impl> weak_self;  ///< for holds on the budget that outlive the endpoint (hold())
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
  greeting_slots strangers;      ///< connections before their hello (net/greeting_slots.hpp)
  std::set<std::string> warned;  ///< hosts whose missing or wrong hello was logged: once each
  std::condition_variable readers_done;
  std::mt19937_64 rng{std::random_device{}()};
  bulk_stats stats;
  uint64_t pending = 0;  ///< bytes of frames being received (reserved at their header)
  std::condition_variable room;

  std::chrono::steady_clock::time_point last_sweep{};

  impl(caf::actor_system& s, bulk_options o)
      : sys(s), opts(std::move(o)),
        strangers(opts.max_connections - opts.member_slots, opts.max_strangers_per_address) {}

  /// Links whose writer ended (its peer hung up or could not be reached), taken
  /// out of `links` for the caller to join; looked for at most once a second.
  std::vector<std::unique_ptr<peer_link>> sweep_ended();

  /// Hands `parts` to `dest`; `held` keeps their bytes in the budget until the message is gone.
  void deliver(caf::actor_id dest, uint64_t key, bulk_parts parts, std::shared_ptr<const void> held);

  /// A hold on `n` bytes of the budget: released when the last copy goes, if the endpoint still exists.
  std::shared_ptr<const void> hold(uint64_t n);

  /// The node's lookup entry, or null after opts.connect_timeout or once the
  /// link is stopped. What middleman::remote_lookup does, but that one waits
  /// 5 minutes for a node that died, holding the writer, every frame queued
  /// behind it and the process's exit (which joins the writer).
  caf::strong_actor_ptr lookup(const caf::node_id& node, peer_link& link);

  /// Asks the peer node where its bulk endpoint listens and the token its
  /// hello must name (through CAF), then connects.
  int connect_peer(const caf::node_id& node, peer_link& link, bulk_hello& hello);

  static bool write_frame(tls_link& out, const bulk_job& j, bulk_frame_header& h);

  /// The connection on `fd` as a stream: plain, or after a TLS handshake
  /// done by `deadline` (null when it fails).
  std::unique_ptr<tls_link> secure(int fd, bool server, std::chrono::steady_clock::time_point deadline) const;

  /// Sends the link's frames in order until stopped, or until the peer cannot
  /// be reached or its connection breaks: then the frames queued for it are
  /// dropped (their receivers' claims time out, like a dead peer's) and the
  /// thread ends, so a dead peer holds neither a thread nor memory.
  void write_loop(const caf::node_id node, peer_link* link);

  /// Room for a frame of `n` bytes within opts.max_pending, waiting up to
  /// opts.read_timeout for frames being received to finish; false (said in
  /// the log) when none came or the endpoint stops.
  bool reserve(uint64_t n, const std::string& who);

  void release(uint64_t n);

  /// A frame's parts read from `in` into `parts`; false when the connection
  /// broke or stalled mid-frame (said in the log), the half frame dropped.
  bool read_parts(tls_link& in, const bulk_frame_header& h, bulk_parts& parts, const std::string& who);

  /// Closes a connection that has not shown this endpoint's token by
  /// `deadline`: false, said in the log once per peer address.
  bool greeted(tls_link& in, const std::string& who, std::chrono::steady_clock::time_point deadline);

  void read_loop(int fd, const std::string& who);

  void accept_loop();
};

}  // namespace swarm
