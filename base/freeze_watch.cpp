#include "base/freeze_watch.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace swarm {

namespace {

using clock_type = std::chrono::steady_clock;

std::atomic<clock_type::rep> thawed_at{0};  ///< time_since_epoch().count() of the last thaw
std::atomic<clock_type::rep> ticked_at{0};  ///< of the watch's last tick
std::atomic<clock_type::rep> gap_ticks{0};
std::once_flag started;

clock_type::time_point at(const std::atomic<clock_type::rep>& t) {
  return clock_type::time_point{clock_type::duration{t.load()}};
}

} // namespace

void watch_freezes(clock_type::duration gap) {
  std::call_once(started, [gap] {
    gap_ticks = gap.count();
    ticked_at = clock_type::now().time_since_epoch().count();
    std::thread([gap] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const auto now = clock_type::now();
        if (now - at(ticked_at) >= gap)
          thawed_at = now.time_since_epoch().count();
        ticked_at = now.time_since_epoch().count();
      }
    }).detach();
  });
}

std::optional<clock_type::time_point> thawed_after(clock_type::time_point t) {
  if (gap_ticks.load() == 0)
    return std::nullopt;
  // Right after a thaw the other threads may run before the watch's next tick.
  const auto now = clock_type::now();
  if (now - at(ticked_at) >= clock_type::duration{gap_ticks.load()})
    return now;
  if (at(thawed_at) > t)
    return at(thawed_at);
  return std::nullopt;
}

} // namespace swarm
