#pragma once
// What one request costs a stage server, for any model config, from a
// calibration measured on a real machine (`swarm --role calibrate`). Pure: no
// torch, no CAF, so the simulator (sim/) uses it without linking either.
//
// Compute: a request's core-seconds are its multiply-adds (models/shape/partition's
// per-token counts) times the calibrated seconds per multiply-add, plus a
// fixed per-request overhead and the wire codec's time per activation value.
// For the calibrated config itself the measured seconds are used as they are.
// Bytes: activations and their gradients travel at the calibrated bytes per
// value of the config's compression; token ids and targets as int64.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace swarm {

/// Values per absmax block of the blockwise8 codec: messages/wire's
/// blockwise8_block, which test_core checks this equals (the cost model sits
/// below messages and cannot include it).
constexpr int64_t blockwise8_block_values = 4096;

/// A model as the cost model sees it: the binary's own model config (its
/// width, depth, context, vocabulary, microbatch), cut into `stages`, with its
/// activations travelling as `compression`.
struct model_shape {
  model_config model;
  int stages = 2;
  std::string compression = "blockwise8";  ///< activations on the wire: none, fp16, blockwise8

  /// Same cost: the fields above that set it (not lr, seed, heads, ...).
  bool operator==(const model_shape& o) const;
};

/// The largest payload a swarm of this shape sends in one piece, bytes: a
/// stage's state (parameters and two AdamW moments in float32, the largest
/// stage), or a backward request's activations and their gradients
/// uncompressed with the targets; a quarter more and 1 MiB for encodings. A
/// bulk frame above it is no peer's (net/bulk.hpp max_frame).
[[nodiscard]] uint64_t largest_payload_bytes(const model_shape& shape);

/// Measured on one machine, one torch thread (a server's setting).
struct calibration {
  model_shape shape;                ///< the config measured
  std::vector<double> forward_s;    ///< per stage: one forward request of a microbatch (last: with loss and backward)
  std::vector<double> backward_s;   ///< per stage: one stateless backward request (last stage: 0, it has none)
  double seconds_per_madd = 1e-10;  ///< fit over every stage and direction: core-seconds per multiply-add
  double request_overhead_s = 0;    ///< fit: fixed core-seconds per request
  double codec_s_per_value = 0;     ///< encode + decode of one activation value with shape.compression
  double bytes_per_value = 1;       ///< wire bytes per activation value with shape.compression
  double step_s_per_parameter = 0;  ///< one optimizer step (AdamW) per parameter
  double state_s_per_byte = 0;      ///< exporting and importing a stage's state (a join's copy), per byte
  // Measured on running clusters (scripts/calibrate.sh), in core-seconds.
  /// Per stage (one value: every stage): a server's CPU per request over the
  /// model and codec above (messages, actors, averaging, and the one-process
  /// measurement's own error). Empty: 1.
  std::vector<double> cluster_scale;
  /// The same measured in a lightly loaded cluster: per stage (or one value),
  /// at light_load; empty: cluster_scale at any load. A request costs less CPU
  /// when fewer processes contend for the cores.
  std::vector<double> light_scale;
  double cluster_load = 1;               ///< busy fraction of the machine's cores where cluster_scale was measured
  double light_load = 0;                 ///< the same for light_scale
  double trainer_s_per_request = 0;      ///< per request, in the trainer (its codec, messages)
  double coordinator_s_per_request = 0;  ///< per request, in the coordinator (the servers' reports)
  double server_idle_cores = 0;  ///< cores a live server process burns whatever it serves (scheduler, heartbeats)
  std::string machine;           ///< what it was measured on (free text)
};

/// One stage's requests.
struct stage_cost {
  double forward_s = 0;           ///< core-seconds of a forward request (last stage: forward, loss and backward)
  double backward_s = 0;          ///< core-seconds of a backward request (0 on the last stage)
  double forward_in_bytes = 0;    ///< request payload: token ids, or activations (+ targets on the last stage)
  double forward_out_bytes = 0;   ///< reply: activations (last stage: the gradient of its inputs)
  double backward_in_bytes = 0;   ///< inputs again + gradient of the outputs
  double backward_out_bytes = 0;  ///< gradient of the inputs (stage 0: none)
  int64_t parameters = 0;         ///< elements
  double state_bytes = 0;         ///< parameters + AdamW moments, float32: what a joining server downloads
  double state_s = 0;             ///< core-seconds of exporting and importing that state
  double step_s = 0;              ///< core-seconds of one optimizer step
  double madds_per_sample = 0;    ///< models/shape/partition stage_costs: the rebalancer's cost unit
};

/// Multiply-adds of one sample's forward through `stage` (blocks, and the head on the last).
[[nodiscard]] double forward_madds(const model_shape& shape, int stage);

/// Parameters of `stage` as models/stage_module.cpp builds it (embeddings, blocks, boundary layers, final norm
/// and head), counted from its family's descriptor.
[[nodiscard]] int64_t stage_parameters(const model_shape& shape, int stage);

/// Bytes per value of a compression without a measurement: none 4, fp16 2,
/// blockwise8 a byte and a float absmax per block of blockwise8_block_values.
[[nodiscard]] double nominal_bytes_per_value(const std::string& compression);

/// Bytes per activation value on the wire for a compression: the calibration's
/// measured one for its own compression, else nominal_bytes_per_value.
[[nodiscard]] double wire_bytes_per_value(const std::string& compression, const calibration& cal);

/// Every stage of `shape`; empty when the shape cannot be cut (see partition_blocks).
[[nodiscard]] std::vector<stage_cost> request_costs(const model_shape& shape, const calibration& cal);

/// Multiply-adds one request runs: a stateless backward recomputes the forward
/// and costs twice a forward more; the last stage's forward includes its backward.
[[nodiscard]] double request_madds(const model_shape& shape, int stage, bool backward);

/// One measured request: its multiply-adds and seconds.
struct cost_point {
  double madds = 0;
  double seconds = 0;
};

/// Fits seconds_per_madd and request_overhead_s to the points (least squares;
/// through the origin when the overhead would come out negative).
void fit_calibration(calibration& cal, const std::vector<cost_point>& points);

/// Core-seconds of one microbatch through every stage of cal.shape (every
/// request's model and codec), as request_costs counts them.
[[nodiscard]] double microbatch_seconds(const calibration& cal);
/// Model and codec core-seconds of one microbatch on each stage (sums to microbatch_seconds).
[[nodiscard]] std::vector<double> stage_microbatch_seconds(const calibration& cal);
/// cal.cluster_scale of `stage` (its one value for every stage; 1 when unset).
[[nodiscard]] double cluster_scale(const calibration& cal, int stage);
/// The scale of `stage` on a machine whose cores are `load` busy (0..1):
/// linear between light_scale at light_load and cluster_scale at
/// cluster_load, the nearer one's outside them; cluster_scale without light_scale.
[[nodiscard]] double cluster_scale(const calibration& cal, int stage, double load);

/// key = value text (comments with #), read back by read_calibration.
[[nodiscard]] std::string format_calibration(const calibration& cal);

/// Reads a calibration file; nullopt with `error` set ("FILE:LINE: why") when
/// it is missing, malformed or inconsistent.
[[nodiscard]] std::optional<calibration> read_calibration(const std::string& path, std::string* error);

}  // namespace swarm
