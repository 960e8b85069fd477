#pragma once
// One member's side of a butterfly all-reduce round with failures (SWARM
// section 5), as a pure state machine: messages in, messages out, no CAF, no
// clock. The stage server feeds it what arrives and sends what it returns;
// tests run whole groups of them in one thread and drop members at will.
//
//   start():  my part of every other member's shard goes to its owner (PART)
//   owner:    once every live member's part of its shard is in, the weighted
//             mean goes to every live member (REDUCED)
//   member:   complete once every shard's REDUCED is in; result() is the mean
//
// Failures: gone(r) says rank r died or was excluded; its later messages are
// ignored. A shard whose owner is gone moves to the lowest live rank. Every
// member sends that new owner what it has of the shard: the REDUCED values if
// it already got them from the old owner (which may have reached some members
// before dying), else its PART. The new owner waits for all live members; one
// REDUCED wins (so everyone ends with the values some already hold), otherwise
// it reduces the parts itself. Members therefore end bit-identical as long as
// they agree on who is gone, which a death (every member sees the down event,
// after the dead member's last message) or the averager's exclusion ensures.
// The parts of a member that went gone halfway are dropped; finished ones count.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "policy/allreduce.hpp"

namespace swarm::policy {

/// One message of the round; values are a contiguous piece of one shard.
struct piece {
  int from = 0;
  int to = 0;
  bool reduced = false;  ///< false: PART (sender's mean gradient); true: REDUCED
  int shard = 0;
  int64_t offset = 0;      ///< first element within the shard; a multiple of piece_elements
  int64_t shard_size = 0;  ///< the sender's idea of the shard's size (checked)
  int64_t samples = 0;     ///< PART: the sender's weight
  std::vector<float> values;
};

/// A lossy wire encoding as seen by its receivers: replaces `n` values in place
/// by what decoding their encoding gives (messages/float_codec.hpp).
using round_trip_fn = std::function<void(float* values, int64_t n)>;

class butterfly_round {
public:
  /// `grad`: this member's mean gradient over `samples` samples; pieces carry at
  /// most `piece_elements` values (every member of a round must use the same).
  /// `round_trip`, when the REDUCED pieces travel compressed: an owner keeps
  /// each piece of its reduced shard as its receivers will decode it, so every
  /// member ends with the same vector.
  /// `how`: weighted mean, or CenteredClip (every member of a round must use the same).
  butterfly_round(int rank, int members, std::vector<float> grad, int64_t samples, int64_t piece_elements,
                  round_trip_fn round_trip = {}, aggregation how = {});

  /// The PARTs to send first; may complete the round at once (one member).
  [[nodiscard]] std::vector<piece> start();
  /// Feeds one piece from another member; an empty string when accepted (or
  /// ignored because its sender is gone), else why it is malformed.
  [[nodiscard]] std::vector<piece> receive(const piece& p, std::string* error = nullptr);
  /// Rank `r` died or was excluded.
  [[nodiscard]] std::vector<piece> gone(int r);

  [[nodiscard]] bool complete() const;
  /// Live ranks this member still waits for: the parts of shards it owns, the
  /// reduced values of shards it does not. Empty once complete.
  [[nodiscard]] std::vector<int> waiting_on() const;
  /// The averaged vector; valid once complete().
  [[nodiscard]] const std::vector<float>& result() const { return result_; }
  /// Moves the averaged vector out (repairs need only the shards, kept apart).
  [[nodiscard]] std::vector<float> take_result() { return std::move(result_); }
  /// This member's own gradient, as handed in (kept: it repairs others' shards).
  [[nodiscard]] const std::vector<float>& input() const { return grad_; }
  [[nodiscard]] int rank() const { return me_; }
  [[nodiscard]] int members() const { return n_; }
  [[nodiscard]] bool is_gone(int r) const { return gone_[static_cast<size_t>(r)]; }
  [[nodiscard]] int gone_count() const;
  /// Value bytes this member sent and received so far (4 per element).
  [[nodiscard]] int64_t bytes_sent() const { return bytes_sent_; }
  [[nodiscard]] int64_t bytes_received() const { return bytes_received_; }
  /// Shards whose owner went gone before this member had them.
  [[nodiscard]] int reassigned() const { return reassigned_; }
  /// Per rank, the most its parts lay out in the shards this member reduced
  /// (clipped_mean's outlying score: about 1 honest, above outlier_ratio far
  /// off); all 0 with the mean.
  [[nodiscard]] const std::vector<double>& outlying() const { return outlying_; }

private:
  struct part {
    int64_t samples = 0;
    std::vector<float> values;  ///< empty until the first piece arrives
    std::vector<bool> got;      ///< per piece
    int64_t missing = 0;        ///< pieces not yet received
  };
  struct shard_state {
    std::vector<part> parts;       ///< PART per rank; my own is taken from grad_ when needed
    std::vector<part> reduced_by;  ///< REDUCED per sender, kept apart so a dead sender's half never mixes in
    std::vector<float> reduced;    ///< the shard's result, once done
    bool done = false;
    bool broadcast = false;   ///< I sent REDUCED of it to every live member
    int repair_sent_to = -1;  ///< owner I last sent my repair material to
  };

  [[nodiscard]] int owner_of(int k) const;
  [[nodiscard]] int64_t pieces_of(int k) const;
  [[nodiscard]] part empty_part(int k) const;
  bool store(part& into, const piece& p);
  void send_shard(int k, int to, bool reduced, std::vector<piece>& out);
  void try_reduce(int k, std::vector<piece>& out);
  void finish_if_complete();

  int me_, n_;
  std::vector<float> grad_;
  int64_t samples_, piece_elements_;
  round_trip_fn round_trip_;
  aggregation how_;
  std::vector<double> outlying_;
  std::vector<shard> shards_;
  std::vector<shard_state> state_;
  std::vector<bool> gone_;
  std::vector<float> result_;
  bool complete_ = false;
  int64_t bytes_sent_ = 0, bytes_received_ = 0;
  int reassigned_ = 0;
};

}  // namespace swarm::policy
