// The stage server's held microbatch ("Exactly once" in actors/stage_server.hpp):
// its gradients added once its reply surely left in time, else withheld.
#include "actors/stage_server.hpp"

#include <caf/all.hpp>

#include "base/freeze_watch.hpp"
#include "base/log.hpp"

namespace swarm {

using self_ptr = stage_actor::stateful_pointer<stage_server_state>;
using clock_type = std::chrono::steady_clock;

void settle_held(self_ptr self) {
  auto& st = self->state;
  auto& h = st.serving.held;
  if (!h)
    return;
  const double stall = h->sent ? std::chrono::duration<double>(
                                     longest_stall_between(h->sent_at, h->sent_at + serving_state::reply_leaves_within))
                                     .count()
                               : 0;
  const bool keep = h->sent && stall < h->slack_s;
  const int64_t samples = st.worker->settle_held(keep);
  if (keep) {
    st.counters->committed_samples += samples;
  } else {
    st.counters->withheld_samples += samples;
    st.serving.committed.erase(h->key);  // a retry that comes back here must count
    auto log = get_logger("stage_server");
    if (h->sent && h->slack_s <= 0)
      log->warn(
          "stage {}: held back the gradients of {} ({} samples): its reply left {:.2f} s after the trainer's "
          "deadline, so the trainer retried it elsewhere",
          st.worker->span().stage, h->key, samples, -h->slack_s);
    else if (h->sent)
      log->warn(
          "stage {}: held back the gradients of {} ({} samples): its reply left {:.2f} s before the trainer's "
          "deadline, but this process stood still {:.2f} s while it was leaving, so the trainer may have retried "
          "it elsewhere",
          st.worker->span().stage, h->key, samples, h->slack_s, stall);
    else
      log->warn("stage {}: held back the gradients of {} ({} samples): its reply was never sent",
                st.worker->span().stage, h->key, samples);
  }
  h.reset();
}

void release_deferred(self_ptr self) {
  auto waiting = std::move(self->state.serving.deferred);
  self->state.serving.deferred.clear();
  for (auto& job : waiting)
    job();  // each runs now, or waits again for a round that began meanwhile (none can: this thread is busy)
}

std::optional<reply_check> settle_held_for_round(self_ptr self) {
  auto& st = self->state;
  auto& h = st.serving.held;
  if (!h || !h->sent || h->slack_s <= 0 || clock_type::now() >= h->sent_at + serving_state::reply_leaves_within) {
    settle_held(self);  // decided already: the window is over, or the reply left too late anyway
    return std::nullopt;
  }
  reply_check check{h->sent_at, h->sent_at + serving_state::reply_leaves_within, h->slack_s,
                    st.worker->settle_held(true)};
  st.counters->committed_samples += check.samples;
  h.reset();
  return check;
}

}  // namespace swarm
