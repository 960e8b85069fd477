#include "policy/butterfly.hpp"

#include <algorithm>
#include <cmath>

namespace swarm::policy {

butterfly_round::butterfly_round(int rank, int members, std::vector<float> grad, int64_t samples,
                                 int64_t piece_elements, round_trip_fn round_trip, aggregation how)
    : me_(rank), n_(members), grad_(std::move(grad)), samples_(samples),
      piece_elements_(std::max<int64_t>(1, piece_elements)), round_trip_(std::move(round_trip)), how_(how),
      outlying_(static_cast<size_t>(std::max(members, 0)), 0.0),
      shards_(partition_shards(static_cast<int64_t>(grad_.size()), members)), state_(static_cast<size_t>(members)),
      gone_(static_cast<size_t>(members), false) {
  for (int k = 0; k < n_; ++k) {
    auto& s = state_[static_cast<size_t>(k)];
    s.parts.assign(static_cast<size_t>(n_), empty_part(k));
    s.reduced_by.assign(static_cast<size_t>(n_), empty_part(k));
    s.done = shards_[static_cast<size_t>(k)].size() == 0;  // nothing to average (fewer elements than members)
  }
}

int64_t butterfly_round::pieces_of(int k) const {
  return (shards_[static_cast<size_t>(k)].size() + piece_elements_ - 1) / piece_elements_;
}

butterfly_round::part butterfly_round::empty_part(int k) const {
  part p;  // values are allocated by the first piece: most (rank, shard) pairs never get one
  p.got.assign(static_cast<size_t>(pieces_of(k)), false);
  p.missing = pieces_of(k);
  return p;
}

int butterfly_round::owner_of(int k) const {
  if (!gone_[static_cast<size_t>(k)])
    return k;
  for (int r = 0; r < n_; ++r)
    if (!gone_[static_cast<size_t>(r)])
      return r;
  return me_;  // unreachable: this member is never gone to itself
}

int butterfly_round::gone_count() const { return static_cast<int>(std::count(gone_.begin(), gone_.end(), true)); }

bool butterfly_round::complete() const { return complete_; }

std::vector<int> butterfly_round::waiting_on() const {
  std::vector<bool> waits(static_cast<size_t>(n_), false);
  for (int k = 0; k < n_; ++k) {
    const auto& s = state_[static_cast<size_t>(k)];
    if (s.done)
      continue;
    const int owner = owner_of(k);
    if (owner != me_) {
      waits[static_cast<size_t>(owner)] = true;
      continue;
    }
    for (int r = 0; r < n_; ++r)
      if (r != me_ && !gone_[static_cast<size_t>(r)] && s.parts[static_cast<size_t>(r)].missing > 0)
        waits[static_cast<size_t>(r)] = true;
  }
  std::vector<int> out;
  for (int r = 0; r < n_; ++r)
    if (waits[static_cast<size_t>(r)])
      out.push_back(r);
  return out;
}

void butterfly_round::send_shard(int k, int to, bool reduced, std::vector<piece>& out) {
  const auto& sh = shards_[static_cast<size_t>(k)];
  const float* src = reduced ? state_[static_cast<size_t>(k)].reduced.data() : grad_.data() + sh.begin;
  for (int64_t off = 0; off < sh.size(); off += piece_elements_) {
    const int64_t len = std::min(piece_elements_, sh.size() - off);
    piece p;
    p.from = me_;
    p.to = to;
    p.reduced = reduced;
    p.shard = k;
    p.offset = off;
    p.shard_size = sh.size();
    p.samples = samples_;
    p.values.assign(src + off, src + off + len);
    bytes_sent_ += 4 * len;
    out.push_back(std::move(p));
  }
}

std::vector<piece> butterfly_round::start() {
  std::vector<piece> out;
  for (int k = 0; k < n_; ++k)
    if (k != me_)
      send_shard(k, k, false, out);
  try_reduce(me_, out);
  finish_if_complete();
  return out;
}

bool butterfly_round::store(part& into, const piece& p) {
  const auto idx = static_cast<size_t>(p.offset / piece_elements_);
  if (into.got[idx])
    return false;
  into.got[idx] = true;
  --into.missing;
  if (into.values.empty())
    into.values.assign(static_cast<size_t>(shards_[static_cast<size_t>(p.shard)].size()), 0.0f);
  into.samples = p.samples;
  std::copy(p.values.begin(), p.values.end(), into.values.begin() + p.offset);
  return true;
}

std::vector<piece> butterfly_round::receive(const piece& p, std::string* error) {
  std::vector<piece> out;
  auto fail = [&](const char* why) {
    if (error)
      *error = why;
    return out;
  };
  if (p.from < 0 || p.from >= n_ || p.from == me_)
    return fail("sender rank out of range");
  if (p.shard < 0 || p.shard >= n_)
    return fail("shard index out of range");
  const auto& sh = shards_[static_cast<size_t>(p.shard)];
  if (p.shard_size != sh.size())
    return fail("shard size differs from this member's partition (different model?)");
  const int64_t len = static_cast<int64_t>(p.values.size());
  if (p.offset < 0 || p.offset % piece_elements_ != 0 || p.offset >= sh.size() ||
      len != std::min(piece_elements_, sh.size() - p.offset))
    return fail("piece offset or length does not fit the shard");
  if (p.samples < 0)
    return fail("negative sample count");
  for (float v : p.values)
    if (!std::isfinite(v))
      return fail("non-finite values");
  if (gone_[static_cast<size_t>(p.from)])
    return out;  // excluded: whatever it still sends is not trusted to agree with the survivors
  bytes_received_ += 4 * len;
  auto& s = state_[static_cast<size_t>(p.shard)];
  if (p.reduced) {
    auto& by = s.reduced_by[static_cast<size_t>(p.from)];
    if (store(by, p) && by.missing == 0 && !s.done) {
      s.reduced = by.values;
      s.done = true;
    }
  } else {
    store(s.parts[static_cast<size_t>(p.from)], p);
  }
  if (owner_of(p.shard) == me_)
    try_reduce(p.shard, out);
  finish_if_complete();
  return out;
}

void butterfly_round::try_reduce(int k, std::vector<piece>& out) {
  auto& s = state_[static_cast<size_t>(k)];
  if (!s.done) {
    // Every live member's part must be in: one of them may hold the REDUCED
    // values of a dead owner instead, and those must win (see the header).
    const auto& sh = shards_[static_cast<size_t>(k)];
    std::vector<weighted_part> parts;
    std::vector<int> ranks;  // of each part
    for (int r = 0; r < n_; ++r) {
      const auto& p = s.parts[static_cast<size_t>(r)];
      if (r == me_)
        parts.push_back({grad_.data() + sh.begin, static_cast<double>(samples_)});
      else if (p.missing == 0)
        parts.push_back({p.values.data(), static_cast<double>(p.samples)});
      else if (!gone_[static_cast<size_t>(r)])
        return;  // still waiting for a live member
      else
        continue;
      ranks.push_back(r);
    }
    s.reduced.assign(static_cast<size_t>(sh.size()), 0.0f);
    std::vector<double> out;
    const bool any = how_.clip ? clipped_mean(parts, sh.size(), how_, s.reduced.data(), &out)
                               : weighted_mean(parts, sh.size(), s.reduced.data());
    if (!any)
      std::fill(s.reduced.begin(), s.reduced.end(), 0.0f);  // nobody had samples
    for (size_t i = 0; i < out.size() && i < ranks.size(); ++i)
      outlying_[static_cast<size_t>(ranks[i])] = std::max(outlying_[static_cast<size_t>(ranks[i])], out[i]);
    if (round_trip_)  // piece by piece, as send_shard cuts it
      for (int64_t off = 0; off < sh.size(); off += piece_elements_)
        round_trip_(s.reduced.data() + off, std::min(piece_elements_, sh.size() - off));
    s.done = true;
  }
  if (s.broadcast)
    return;
  s.broadcast = true;
  for (int r = 0; r < n_; ++r)
    if (r != me_ && !gone_[static_cast<size_t>(r)])
      send_shard(k, r, true, out);
}

std::vector<piece> butterfly_round::gone(int r) {
  std::vector<piece> out;
  if (r < 0 || r >= n_ || r == me_ || gone_[static_cast<size_t>(r)])
    return out;
  gone_[static_cast<size_t>(r)] = true;
  for (int k = 0; k < n_; ++k) {
    auto& s = state_[static_cast<size_t>(k)];
    const int owner = owner_of(k);
    if (owner == me_) {
      if (k != me_ && s.repair_sent_to != me_) {
        // A shard newly mine: (re)broadcast even if done, some may lack it.
        s.repair_sent_to = me_;
        s.broadcast = false;
        if (!s.done)
          ++reassigned_;
      }
      try_reduce(k, out);
    } else if (owner != k && s.repair_sent_to != owner) {
      if (!s.done && s.repair_sent_to < 0)
        ++reassigned_;
      s.repair_sent_to = owner;
      send_shard(k, owner, s.done, out);
    }
  }
  finish_if_complete();
  return out;
}

void butterfly_round::finish_if_complete() {
  if (complete_)
    return;
  for (const auto& s : state_)
    if (!s.done)
      return;
  result_.clear();
  result_.reserve(grad_.size());
  for (const auto& s : state_)
    result_.insert(result_.end(), s.reduced.begin(), s.reduced.end());
  complete_ = true;
}

}  // namespace swarm::policy
