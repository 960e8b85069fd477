#pragma once
// What a TLS connection's BASP stream says, read as CAF receives it. Inside
// TLS the guard (net/basp_guard.hpp) sees only records, so net/tls.cpp hands
// the decrypted bytes of each of CAF's connections to one of these before CAF
// gets them. It learns the peer's node id from the handshake (peer roles are
// kept per node id: net/peer_roles.hpp) and refuses a routed, monitor or down
// message naming another node as its source: CAF 0.17 believes that field,
// so a member could otherwise speak as another node (the coordinator, or the
// receiver itself) or make the receiver believe another node's actor died.
// Only a coordinator's connection relays other nodes' messages (CAF routes
// through the node a handle came from, which is the coordinator).

#include <cstddef>
#include <cstdint>
#include <string>

#include <caf/node_id.hpp>

#include "net/basp_guard.hpp"

namespace swarm {

class basp_watch {
public:
  /// `accepting`: the peer dialed (its first frame is a client handshake),
  /// else a server handshake comes first.
  explicit basp_watch(bool accepting) : accepting_(accepting) {}

  /// What a frame's handshake named: called once, with the node; returns why
  /// the connection is refused, or empty. Its answer also says whether the peer
  /// may relay other nodes' messages.
  struct verdict {
    std::string refused;
    bool relays = false;
  };

  /// The next `n` bytes of the stream. Empty while they may pass; else why the
  /// connection must close (then every later call says so too). `on_node` is
  /// called once, when the handshake's node id is known.
  template <class OnNode>
  std::string feed(const char* p, size_t n, OnNode&& on_node) {
    while (refused_.empty() && n > 0) {
      const size_t took = step(p, n);
      p += took, n -= took;
      if (refused_.empty() && ready_) {
        ready_ = false;
        judge(on_node);
      }
    }
    return refused_;
  }

  [[nodiscard]] bool named_node() const { return node_ != caf::node_id{}; }
  [[nodiscard]] const caf::node_id& node() const { return node_; }

private:
  /// Takes bytes of the current frame; sets ready_ when its prefix is complete.
  size_t step(const char* p, size_t n);
  template <class OnNode>
  void judge(OnNode& on_node) {
    if (first_) {
      first_ = false;
      if (!parse_node()) {
        refused_ = "a handshake without a node id";
        return;
      }
      const verdict v = on_node(node_);
      refused_ = v.refused;
      relays_ = v.relays;
      return;
    }
    judge_source();
  }
  void judge_source();
  bool parse_node();

  bool accepting_;
  bool first_ = true, relays_ = false, ready_ = false;
  unsigned char header_[basp_header_size] = {};
  size_t have_header_ = 0;
  uint32_t payload_left_ = 0;
  size_t prefix_want_ = 0;
  std::string prefix_;      ///< the current frame's payload, up to prefix_want_
  std::string node_bytes_;  ///< the peer's node id, serialized as its handshake has it
  caf::node_id node_;
  std::string refused_;
};

}  // namespace swarm
