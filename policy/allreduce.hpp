#pragma once
// Pure pieces of the stage-wide butterfly all-reduce (SWARM section 5): how the
// flat gradient vector is cut into one shard per peer, and how a shard owner
// reduces the peers' parts of its shard, weighted by their sample counts.
// No CAF, no torch: plain floats, so the arithmetic is tested exactly.

#include <cstdint>
#include <optional>
#include <vector>

namespace swarm::policy {

/// Elements [begin, end) of the flat vector.
struct shard {
  int64_t begin = 0;
  int64_t end = 0;
  [[nodiscard]] int64_t size() const { return end - begin; }
  bool operator==(const shard& o) const { return begin == o.begin && end == o.end; }
};

/// Cuts `total` elements into `peers` contiguous shards, in rank order, whose
/// sizes differ by at most one (the first total % peers get the extra element).
/// Empty when peers < 1 or total < 0; shards may be empty when total < peers.
[[nodiscard]] std::vector<shard> partition_shards(int64_t total, int peers);

/// One peer's part of a shard: its mean gradient over `samples` samples.
struct weighted_part {
  const float* values = nullptr;  ///< shard.size() floats
  double samples = 0;             ///< weight; a peer with none contributes nothing
};

/// Writes sum_i samples_i * values_i / sum_i samples_i into `out` (n floats).
/// False, with `out` untouched, when no part has samples (nothing to average).
[[nodiscard]] bool weighted_mean(const std::vector<weighted_part>& parts, int64_t n, float* out);

/// CenteredClip (Karimireddy, He and Jaggi 2021; BTARD runs it in each shard
/// owner): from the weighted mean v, `iterations` times
///   v <- v + sum_i w_i (x_i - v) min(1, tau / ||x_i - v||) / sum_i w_i,
/// so one part (a lying or broken peer's) moves the result by at most
/// tau w_i / sum_i w_i per iteration, however far off it is; it equals
/// weighted_mean when every part lies within `tau` of that mean. Writes v into
/// `out`; `clipped`, when given, gets each part's clip of the last iteration,
/// 1 - min(1, tau / ||x_i - v||) (0: used whole; near 1: far outside). False,
/// `out` untouched, when no part has samples or tau <= 0.
/// `start`, when given (n floats), replaces the weighted mean as where it begins.
[[nodiscard]] bool centered_clip(const std::vector<weighted_part>& parts, int64_t n, double tau, int iterations,
                                 float* out, std::vector<double>* clipped = nullptr, const float* start = nullptr);

/// How a shard's owner combines the members' parts (--aggregation, issue #47).
struct aggregation {
  bool clip = false;    ///< false: weighted_mean; true: clipped_mean
  double radius = 1.0;  ///< clipped_mean's tau, in medians of the parts' distances from its start
  int iterations = 3;
};

/// CenteredClip as a stage's all-reduce runs it: from the coordinate-wise
/// median of the finite parts with samples (robust however far off a minority
/// is; the weighted mean is not), with tau = radius x the median of the
/// parts' distances from that start, so it needs no scale of the gradients.
/// When at least half the parts equal the start exactly, the start. Writes
/// `out`; `outlying`, when given, gets each part's distance from the start
/// times sqrt(samples) (an honest part's noise shrinks so with its samples)
/// over the median part's: about 1 for honest parts, far above for a liar's
/// (infinite for a non-finite part; 0 without samples). False when no part
/// has samples.
[[nodiscard]] bool clipped_mean(const std::vector<weighted_part>& parts, int64_t n, const aggregation& how, float* out,
                                std::vector<double>* outlying = nullptr);

/// A part whose clipped_mean outlying score exceeds this lies outside the
/// stage's honest spread: its member is named to the averager (issue #47).
/// Measured on config/small under chaos: honest parts' scores stay below
/// (docs/deploy.md); a flipped, scaled-by-10 gradient scores about 10.
constexpr double outlier_ratio = 4.0;

/// Bytes each peer sends (and receives) in an ideal butterfly all-reduce of
/// `bytes`: its parts of the others' shards out, their reduced shards back in.
[[nodiscard]] inline double ideal_allreduce_bytes(double bytes, int peers) {
  return peers < 2 ? 0.0 : 2.0 * (peers - 1) / peers * bytes;
}

}  // namespace swarm::policy
