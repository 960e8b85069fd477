#pragma once
// A stage server's admission: how many requests it has promised to take.
//
// Routers spread requests by measured rates, but each of a stage's routers
// (one per trainer) decides alone, so requests meet at some servers while
// others of the stage idle: swarm-sim's 240-peer pipeline left 12.5 points of
// the best assignment idle that way, and 25 on the g4dn trace. A router
// therefore asks first ("reserve", a few bytes) and sends the request's
// tensors only where a grant came back; a server grants while fewer than
// `max_outstanding` granted requests are unanswered, counting those still on
// their way, which its queue cannot show. A router refused by `busy_retries`
// servers in a row sends without asking (routing_config), so a stage whose
// servers are all busy still takes every request.
//
// Pure: no CAF, no clock. `now` is seconds on the caller's monotonic clock.
// Not thread-safe: one per server, used from its actor.

#include <cstdint>
#include <map>
#include <optional>

namespace swarm::policy {

/// Knobs of a server's admission; one field per line with its unit.
struct admission_config {
  /// Granted requests a server holds at once, on their way or queued or
  /// computing (0: no reservations; routers send at once as before).
  int64_t max_outstanding = 4;
  /// Seconds after which a grant whose request never came (its router died,
  /// or sent it elsewhere) no longer counts.
  double hold_s = 60;
};

class admission {
public:
  explicit admission(admission_config cfg = {}) : cfg_(cfg) {}

  /// A router asks to send one request: its ticket (never 0), or nullopt
  /// when `max_outstanding` grants are held (busy). Lapses grants older than
  /// hold_s first. With max_outstanding 0 every ask is granted.
  [[nodiscard]] std::optional<uint64_t> grant(double now);

  /// The request of `ticket` is over here (answered, refused, dropped): its
  /// grant no longer counts. Unknown or lapsed tickets, and 0, are ignored.
  void done(uint64_t ticket);

  /// Grants held at `now` (lapsed ones not counted).
  [[nodiscard]] int64_t held(double now) const;

private:
  void lapse(double now);

  admission_config cfg_;
  std::map<uint64_t, double> granted_;  // ticket -> when granted (tickets rise with time)
  uint64_t next_ticket_ = 0;
};

}  // namespace swarm::policy
