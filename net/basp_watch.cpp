#include "net/basp_watch.hpp"

#include <algorithm>

#include <caf/binary_deserializer.hpp>

namespace swarm {

namespace {

/// A node id takes ~30 bytes serialized (a URI-based one more); a handshake
/// payload is read up to this much for it.
constexpr size_t node_prefix = 512;

}  // namespace

size_t basp_watch::step(const char* p, size_t n) {
  if (have_header_ < basp_header_size) {
    const size_t take = std::min(n, basp_header_size - have_header_);
    std::copy(p, p + take, header_ + have_header_);
    have_header_ += take;
    if (have_header_ < basp_header_size)
      return take;
    payload_left_ = basp_payload_size(header_);
    prefix_.clear();
    const unsigned op = header_[0];
    // Ops 3-5 (routed, monitor, down) begin with their source node.
    prefix_want_ = first_               ? std::min<size_t>(payload_left_, node_prefix)
                   : op >= 3 && op <= 5 ? std::min(static_cast<size_t>(payload_left_), node_bytes_.size())
                                        : 0;
    if (payload_left_ == 0)
      have_header_ = 0;
    ready_ = first_ && prefix_want_ == 0;  // a handshake without a payload: refused at once
    return take;
  }
  const size_t take = std::min<size_t>(n, payload_left_);
  if (prefix_.size() < prefix_want_) {
    prefix_.append(p, std::min(take, prefix_want_ - prefix_.size()));
    // Judged once its prefix is whole: before the frame's last byte reaches CAF.
    ready_ = prefix_.size() == prefix_want_;
  }
  payload_left_ -= static_cast<uint32_t>(take);
  if (payload_left_ == 0)
    have_header_ = 0;
  return take;
}

void basp_watch::judge_source() {
  if (relays_ || prefix_.compare(0, node_bytes_.size(), node_bytes_) == 0)
    return;
  const unsigned op = header_[0];
  refused_ = std::string{op == 3   ? "a routed message"
                         : op == 4 ? "a monitor message"
                                   : "a down message"} +
             " naming another node as its source";
}

bool basp_watch::parse_node() {
  const unsigned op = header_[0];
  constexpr unsigned server_handshake = 0, client_handshake = 1;
  if (op != (accepting_ ? client_handshake : server_handshake) || prefix_.empty())
    return false;
  caf::binary_deserializer source{nullptr, prefix_.data(), prefix_.size()};
  if (source(node_) || node_ == caf::node_id{})
    return false;
  node_bytes_ = prefix_.substr(0, prefix_.size() - source.remaining());
  return true;
}

}  // namespace swarm
