#include "sim/ledger.hpp"

#include <algorithm>
#include <cmath>

#include "sim/world.hpp"

namespace swarm::sim {

namespace {

double speed_of(const peer& p) { return p.speed / p.slowdown; }

}  // namespace

void ledger::open(double from, double to, int stages) {
  *this = ledger{};
  from_ = from;
  to_ = to;
  stages_.assign(static_cast<size_t>(stages), stage_books{});
}

double ledger::clip(double a, double b) const { return std::max(0.0, std::min(b, to_) - std::max(a, from_)); }

void ledger::touch(int stage, double now) {
  auto& s = stages_[static_cast<size_t>(stage)];
  const double dt = clip(s.since, now);
  // An idle server while others of its stage have requests waiting is the
  // routing's; with none waiting anywhere on the stage, its links busy with a
  // round are the averaging's, else the stage simply had nothing to do.
  (s.queue > 0 ? idle_queued_ : idle_starved_) += s.idle_speed * dt;
  (s.queue > 0 ? idle_queued_ : idle_round_) += s.round_speed * dt;
  s.since = now;
}

void ledger::idle_sums(const peer& p, double sign) {
  auto& s = stages_[static_cast<size_t>(p.idle_stage)];
  (p.in_round > 0 ? s.round_speed : s.idle_speed) += sign * speed_of(p);
}

void ledger::set_phase(peer& p, phase ph, double now) {
  const double v = speed_of(p), dt = clip(p.phase_since, now);
  switch (p.ph) {
    case phase::starting: starting_ += v * dt; break;
    case phase::copying: copying_ += v * dt; break;
    case phase::busy:  // computed() booked a finished request; one cut short by a death is lost
      if (ph == phase::off)
        killed_computing_ += v * dt;
      break;
    case phase::idle:
      touch(p.idle_stage, now);
      idle_sums(p, -1);
      p.idle_stage = -1;
      break;
    case phase::off: break;
  }
  p.ph = ph;
  p.phase_since = now;
  if (ph == phase::idle) {
    p.idle_stage = p.stage;
    touch(p.idle_stage, now);
    idle_sums(p, +1);
  }
}

void ledger::round(peer& p, int delta, double now) {
  if (p.ph == phase::idle) {
    touch(p.idle_stage, now);
    idle_sums(p, -1);
  }
  p.in_round = std::max(0, p.in_round + delta);
  if (p.ph == phase::idle)
    idle_sums(p, +1);
}

void ledger::queued(int stage, int delta, double now) {
  touch(stage, now);
  stages_[static_cast<size_t>(stage)].queue += delta;
}

void ledger::computed(const peer& p, double t0, double now, work_books* books, uint64_t attempt) {
  const double v = speed_of(p), in = v * clip(t0, now), pre = v * (now - t0) - in;
  busy_ += in;
  if (books != nullptr && books->attempt == attempt) {
    books->attempt_in += in;
    books->attempt_pre += pre;
  } else {
    overshoot_ += in;
  }
}

void ledger::verified(const peer& p, double t0, double now) {
  const double in = speed_of(p) * clip(t0, now);
  busy_ += in;
  verification_ += in;
}

void ledger::attempt_over(work_books& b, attempt_end how) {
  switch (how) {
    case attempt_end::accepted:
      b.microbatch_in += b.attempt_in;
      b.microbatch_pre += b.attempt_pre;
      break;
    case attempt_end::down: lost_down_ += b.attempt_in; break;  // its reply died with its server
    case attempt_end::timed_out:
    case attempt_end::leaving: overshoot_ += b.attempt_in; break;
  }
  b.attempt = 0;
  b.attempt_in = b.attempt_pre = 0;
}

void ledger::microbatch_over(work_books& b, bool completed, double now) {
  if (completed && now >= from_) {
    useful_ += b.microbatch_in;
    useful_pre_ += b.microbatch_pre;
  } else if (!completed) {
    dropped_ += b.microbatch_in;
  }
  b.microbatch_in = b.microbatch_pre = 0;
}

ledger::report ledger::close(std::vector<peer>& peers, const std::vector<const work_books*>& workers, double completed,
                             double best_samples, double fluid_samples, double per_sample, double now) {
  double computing = 0;  // requests being computed at the end: in flight, not lost
  for (auto& p : peers) {
    if (p.ph == phase::busy) {
      computing += speed_of(p) * clip(p.phase_since, now);
      set_phase(p, phase::idle, now);
    }
    set_phase(p, phase::off, now);
  }
  for (size_t s = 0; s < stages_.size(); ++s)
    touch(static_cast<int>(s), now);
  double booked = 0;  // finished compute of microbatches still on their way at the end
  for (const auto* b : workers)
    booked += b->microbatch_in + b->attempt_in;
  const double in_flight = computing + booked;
  // Compute the completed samples got beyond the yardstick's cost: on `local`
  // the shared cores make requests slower than the yardstick, which gives
  // every server a core; on wan a state import beside a request shares its
  // machine's core.
  const double slower = useful_ + useful_pre_ - completed * per_sample;
  report r;
  const double scale = best_samples > 0 && per_sample > 0 ? 100.0 / (best_samples * per_sample) : 0.0;
  const auto add = [&](const char* key, const char* label, double core_s) {
    r.parts.push_back({key, label, core_s * scale});
    r.sum_points += core_s * scale;
  };
  add("gap_startup", "start-up (process start, before placement)", starting_);
  add("gap_state_copies", "state copies (joins, moves)", copying_);
  add("gap_idle_routing", "idle while requests waited at other servers of its stage (routing)", idle_queued_);
  add("gap_idle_averaging", "idle, nothing waiting at its stage, its links in an averaging round", idle_round_);
  add("gap_idle_no_requests", "idle, nothing waiting at its stage (queued behind a bottleneck elsewhere)",
      idle_starved_);
  add("gap_best_spare", "less what the best assignment leaves idle itself (its stages' imbalance)",
      -(fluid_samples - best_samples) * per_sample);
  add("gap_lost_to_failures", "work lost to failures (cut by a death, reply lost, microbatch dropped)",
      killed_computing_ + lost_down_ + dropped_);
  add("gap_overshoot", "computed for a trainer that had given up (timed out: routing overshoot)", overshoot_);
  add("gap_verification", "second opinions of verified work (--verify-fraction)", verification_);
  add("gap_window_ends", "work in flight at the window's ends (end less start)", in_flight - useful_pre_);
  add("gap_slower_than_yardstick", "requests slower than their model (cores shared: local platform, state imports)",
      slower);
  r.gap_points = best_samples > 0 ? 100.0 * (best_samples - completed) / best_samples : 0.0;
  // Every finished request's compute has exactly one fate: a check on the books themselves.
  const double fates = useful_ + dropped_ + overshoot_ + lost_down_ + verification_ + booked;
  if (std::abs(fates - busy_) > 1e-6 * std::max(1.0, busy_))
    r.parts.push_back({"gap_unbooked", "compute without a fate (a bug in the books)", (busy_ - fates) * scale});
  return r;
}

}  // namespace swarm::sim
