#include "base/freeze_watch.hpp"

#include <algorithm>
#include <array>
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

/// Fine enough to say whether a stall began before or after a reply left.
constexpr auto period = std::chrono::milliseconds(20);
constexpr auto least_kept = std::chrono::milliseconds(30);

/// The last stalls, oldest overwritten first: between the ticks `from` and `to`
/// the process ran for `length` less than it should have.
struct stall {
  clock_type::time_point from, to;
  clock_type::duration length{};
};
std::mutex stalls_mutex;
std::array<stall, 256> stalls;
size_t next_stall = 0;

clock_type::time_point at(const std::atomic<clock_type::rep>& t) {
  return clock_type::time_point{clock_type::duration{t.load()}};
}

}  // namespace

void watch_freezes(clock_type::duration gap) {
  std::call_once(started, [gap] {
    gap_ticks = gap.count();
    ticked_at = clock_type::now().time_since_epoch().count();
    std::thread([gap] {
      for (;;) {
        std::this_thread::sleep_for(period);
        const auto now = clock_type::now();
        if (now - at(ticked_at) >= gap)
          thawed_at = now.time_since_epoch().count();
        if (const auto late = now - at(ticked_at) - period; late >= least_kept) {
          std::lock_guard<std::mutex> lock{stalls_mutex};
          stalls[next_stall] = {at(ticked_at), now, late};
          next_stall = (next_stall + 1) % stalls.size();
        }
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

clock_type::duration longest_stall_between(clock_type::time_point from, clock_type::time_point to) {
  if (gap_ticks.load() == 0)
    return {};
  const auto last = at(ticked_at);
  // One that lasts now, the watch not having ticked since.
  auto longest =
      last < to ? std::max(clock_type::duration{}, clock_type::now() - last - period) : clock_type::duration{};
  std::lock_guard<std::mutex> lock{stalls_mutex};
  for (const auto& s : stalls)
    if (s.from < to && s.to > from)
      longest = std::max(longest, s.length);
  return longest;
}

}  // namespace swarm
