#include "net/chunks.hpp"

#include <algorithm>
#include <cstdint>

#include "base/log.hpp"
#include "messages/errors.hpp"

namespace swarm {

cut_payload cut(std::string payload, size_t chunk_bytes, uint64_t& next_id) {
  cut_payload p;
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  if (payload.size() <= chunk_bytes) {
    p.tail = std::move(payload);
    return p;
  }
  p.transfer_id = ++next_id;
  // Equal pieces rather than full ones plus a runt: a tiny last message behind a
  // large one waits on TCP's delayed acknowledgement (measured: +40 ms per payload).
  const size_t pieces = (payload.size() + chunk_bytes - 1) / chunk_bytes;
  const size_t piece = (payload.size() + pieces - 1) / pieces;
  size_t pos = 0;
  while (payload.size() - pos > piece) {
    p.lead.emplace_back(payload, pos, piece);
    pos += piece;
  }
  p.tail.assign(payload, pos, std::string::npos);
  return p;
}

chunk_limits chunk_limits::unbounded() {
  chunk_limits l;
  l.sender_bytes = l.total_bytes = UINT64_MAX;
  l.sender_transfers = l.total_transfers = SIZE_MAX;
  l.stale = std::chrono::hours(24 * 365 * 100);  // not seconds::max(): it overflows in nanoseconds
  return l;
}

caf::error chunk_assembler::add(const caf::actor_addr& from, uint64_t transfer_id, const std::string& piece,
                                clock::time_point now) {
  drop_stale(now);
  auto it = partial_.find({from, transfer_id});
  auto& s = senders_[from];
  if (it == partial_.end()) {
    if (s.transfers >= limits_.sender_transfers || partial_.size() >= limits_.total_transfers) {
      ++refused_;
      if (s.transfers == 0)
        senders_.erase(from);
      return make_error(errc::BAD_REQUEST, "too many unfinished chunked payloads; a piece of transfer " +
                                               std::to_string(transfer_id) + " refused");
    }
    it = partial_.emplace(id{from, transfer_id}, partial{}).first;
    ++s.transfers;
  }
  auto& p = it->second;
  p.last = now;
  if (p.refused)
    return refuse(p, from, transfer_id, "its earlier pieces were refused");
  if (s.bytes + piece.size() > limits_.sender_bytes)
    return refuse(p, from, transfer_id, "over " + std::to_string(limits_.sender_bytes) + " bytes from one sender");
  if (total_bytes_ + piece.size() > limits_.total_bytes)
    return refuse(p, from, transfer_id, "over " + std::to_string(limits_.total_bytes) + " bytes from all senders");
  p.bytes += piece;
  s.bytes += piece.size();
  total_bytes_ += piece.size();
  return caf::none;
}

caf::error chunk_assembler::refuse(partial& p, const caf::actor_addr& from, uint64_t transfer_id,
                                   const std::string& why) {
  auto& s = senders_[from];
  s.bytes -= p.bytes.size();
  total_bytes_ -= p.bytes.size();
  std::string().swap(p.bytes);
  p.refused = true;
  const uint64_t n = ++refused_;
  if (n <= 20 || n % 1000 == 0)  // a flood of pieces must not become a flood of lines
    get_logger("chunks")->warn("refused a piece of chunked transfer {} from {}: {} [{} refused here]", transfer_id,
                               to_string(from), why, n);
  return make_error(errc::BAD_REQUEST, "chunked transfer " + std::to_string(transfer_id) + " refused: " + why);
}

caf::expected<std::string> chunk_assembler::finish(const caf::actor_addr& from, uint64_t transfer_id,
                                                   std::string tail) {
  if (transfer_id == 0)
    return tail;
  auto it = partial_.find({from, transfer_id});
  if (it == partial_.end())
    return make_error(errc::BAD_REQUEST,
                      "transfer " + std::to_string(transfer_id) + " finished before any chunk arrived");
  if (it->second.refused) {
    erase(it);
    return make_error(errc::BAD_REQUEST, "transfer " + std::to_string(transfer_id) +
                                             " was refused: its pieces went beyond what this receiver holds");
  }
  uncount(it);
  std::string whole = std::move(it->second.bytes);
  partial_.erase(it);
  whole += tail;
  return whole;
}

void chunk_assembler::forget(const caf::actor_addr& from) {
  for (auto it = partial_.begin(); it != partial_.end();)
    if (it->first.first == from)
      erase(it++);
    else
      ++it;
}

void chunk_assembler::uncount(std::map<id, partial>::iterator it) {
  auto s = senders_.find(it->first.first);
  const uint64_t size = it->second.bytes.size();
  total_bytes_ -= size;
  if (s != senders_.end()) {
    s->second.bytes -= size;
    if (--s->second.transfers == 0)
      senders_.erase(s);
  }
}

void chunk_assembler::erase(std::map<id, partial>::iterator it) {
  uncount(it);
  partial_.erase(it);
}

void chunk_assembler::drop_stale(clock::time_point now) {
  // Looked at once a second at most: a sender that died without a down
  // event (or a stranger that never finishes) must not hold its bytes for ever.
  if (now - last_sweep_ < std::chrono::seconds(1))
    return;
  last_sweep_ = now;
  for (auto it = partial_.begin(); it != partial_.end();)
    if (now - it->second.last > limits_.stale)
      erase(it++);
    else
      ++it;
}

}  // namespace swarm
