#pragma once
// Who lied, when servers of a stage answered the same request differently
// (issue #47, verified work): pure, over the distances between their outputs,
// so the attribution is tested without actors. Floating point differs between
// honest servers (thread counts, BLAS kernels, bf16, 8-bit activations), so
// outputs agree within a tolerance, not bit for bit.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace swarm::policy {

/// How far apart two servers' outputs of one request are: ||a - b|| /
/// max(||a||, ||b||), in [0, 2]; 0 for two zero vectors. NaN when either holds
/// NaN or Inf (a broken answer agrees with nothing).
[[nodiscard]] double relative_distance(const float* a, const float* b, size_t n);

/// Outputs (relative_distance) of two honest servers agree within this;
/// `bf16`: either ran --precision bf16. Measured by test_model "[verify]" on
/// config small's stage 0 here (2026-12-07): 1 vs 2 threads 0 in fp32 and in
/// bf16, fp32 vs bf16 0.0011, noise of the same scale 1.40. Hence 1e-4 for
/// fp32 (CPU kernels; a GPU's TF32 would need more) and 0.05 with bf16: 47x
/// the measured gap, 28x below noise.
[[nodiscard]] double verify_tolerance(bool bf16);

/// The relative error (relative_distance from the original) one wire
/// encoding (--compression: none | fp16 | blockwise8) adds to a stage's
/// outputs, rounded up from test_model "[verify]": fp16 measured 2.1e-4,
/// blockwise8 0.011 (config small's stage 0, 2026-12-07).
[[nodiscard]] double codec_error(const std::string& compression);

/// What two honest answers, each computed and then encoded with
/// `compression`, may differ by: verify_tolerance(bf16) + 2 codec_error. Two
/// servers computing bit for bit alike encode alike (distance 0); the term is
/// for those that do not (another CPU's kernels, bf16), whose values can round
/// to neighbouring codes.
[[nodiscard]] double verify_tolerance(bool bf16, const std::string& compression);

/// Servers whose outputs (of one request) `distance[i][j]` apart say who is
/// wrong: those outside the one largest group of servers that agree pairwise
/// (distance <= tolerance), when that group is a strict majority. Empty when
/// everyone agrees, or nobody can be told wrong (two that disagree, three
/// that all disagree, a group that is no majority, two largest groups).
/// `distance` is square and symmetric; NaN counts as disagreement.
[[nodiscard]] std::vector<size_t> charged(const std::vector<std::vector<double>>& distance, double tolerance);

/// Probation (--verify-probation N): every forward a server new to a trainer
/// answers is verified until it has agreed with another server N times; then
/// --verify-fraction. The first steps of a run are where a liar's answers do
/// lasting harm: a noise server on config/small, banned at p = 0.05 after 107
/// microbatches (13 steps), left the loss 23.9% above a clean run 86 steps
/// later; on probation it was banned before the first step, and the loss was
/// the clean run's (scripts/bench_lies.sh, 2026-12-08). Each trainer keeps
/// its own count, so with T trainers and S servers it costs about N x T x S
/// forwards (swarm-sim, 1,000 peers and 128 trainers: 50% extra forwards in
/// the first hour).
[[nodiscard]] inline bool on_probation(int agreed, int probation) { return agreed < probation; }

/// Strikes against servers, as charged; `limit` strikes ban one. Honest
/// answers in between do not wipe a strike: a server that lies only
/// sometimes is banned all the same, later.
class strike_book {
public:
  explicit strike_book(int limit) : limit_(limit < 1 ? 1 : limit) {}
  /// One more strike against `server`; true when it reaches the limit now (once).
  bool charge(const std::string& server);
  [[nodiscard]] int strikes(const std::string& server) const;
  [[nodiscard]] bool banned(const std::string& server) const { return strikes(server) >= limit_; }

private:
  int limit_;
  std::map<std::string, int> strikes_;
};

/// What a trainer's verification of forwards (issue #47) did, all its stages
/// together: its step events, report and run summary show them.
struct verify_counters {
  std::atomic<int64_t> forward_samples{0};  ///< samples of every forward the trainer sent (first attempts)
  std::atomic<int64_t> requests{0};         ///< forwards re-sent to a second or third server
  std::atomic<int64_t> samples{0};          ///< their samples
  std::atomic<int64_t> agreed{0};           ///< verifications whose two answers agreed
  std::atomic<int64_t> disagreed{0};        ///< ... that did not (a third server asked)
  std::atomic<int64_t> inconclusive{0};     ///< no second server, an error, or answers of different steps
  std::atomic<int64_t> strikes{0};          ///< charges against servers
  std::atomic<int64_t> bans{0};             ///< servers banned for them
};

}  // namespace swarm::policy
