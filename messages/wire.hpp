#pragma once
// Encoding, decoding and boundary validation of the wire schema. A payload that
// passed these checks is well-formed; whether its shapes fit the model is checked
// by the stage worker, which knows the model.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/errors.hpp"
#include "messages/protocol.hpp"
#include "swarm.pb.h"

namespace swarm {

template <class Proto>
[[nodiscard]] std::string encode(const Proto& msg) {
  return msg.SerializeAsString();
}

/// Parses `bytes` as `Proto`; a BAD_REQUEST error naming `what` when malformed.
template <class Proto>
[[nodiscard]] caf::expected<Proto> decode(const std::string& bytes, const char* what) {
  Proto msg;
  if (!msg.ParseFromString(bytes))
    return make_error(errc::BAD_REQUEST,
                      std::string{"malformed "} + what + " (" + std::to_string(bytes.size()) + " bytes)");
  return msg;
}

/// `msg` as the protocol's typed payload (messages/protocol.hpp).
template <class Proto>
[[nodiscard]] encoded<Proto> wrap(const Proto& msg) {
  return {msg.SerializeAsString()};
}

/// Parses a typed payload; a BAD_REQUEST error naming its message when malformed.
template <class Proto>
[[nodiscard]] caf::expected<Proto> decode(const encoded<Proto>& m) {
  return decode<Proto>(m.bytes, Proto::descriptor()->name().c_str());
}

/// The data of every tensor set in `msg` (its tensor fields, in field order),
/// moved out. On the bulk plane they travel beside the message's encoding, so
/// a tensor's bytes are never copied into a serialized message nor parsed out
/// of one (net/bulk.hpp).
[[nodiscard]] std::vector<std::string> take_tensor_data(google::protobuf::Message& msg);

/// {msg encoded without its tensors' bytes, those bytes...}: what a bulk frame carries.
[[nodiscard]] std::vector<std::string> encode_parts(google::protobuf::Message& msg);

/// Bytes in all `parts`.
[[nodiscard]] int64_t parts_size(const std::vector<std::string>& parts);

/// Parses parts[0] into `msg` and moves parts[1..] back into its tensors, in
/// take_tensor_data's order; a single part is a whole encoding. BAD_REQUEST
/// naming `what` when malformed or when the parts do not match its tensors.
[[nodiscard]] caf::error put_tensor_data(std::vector<std::string> parts, google::protobuf::Message& msg,
                                         const char* what);

/// put_tensor_data into a fresh Msg.
template <class Proto>
[[nodiscard]] caf::expected<Proto> decode_parts(std::vector<std::string> parts, const char* what) {
  Proto msg;
  if (auto err = put_tensor_data(std::move(parts), msg, what))
    return err;
  return msg;
}

/// Bytes per element of `t`; 0 for DTYPE_INVALID or an unknown value.
[[nodiscard]] size_t element_size(proto::dtype t);

/// Elements of `t`'s shape, or -1 when a dimension is negative or the product overflows.
[[nodiscard]] int64_t numel(const proto::tensor& t);

/// "[8, 64, 128]".
[[nodiscard]] std::string shape_string(const proto::tensor& t);

/// The codec of a --compression / --averaging-compression value (none, fp16,
/// blockwise8); RAW for anything else (config validation refuses it first).
[[nodiscard]] proto::codec codec_of(const std::string& name);

/// Values per block of the BLOCKWISE8 codec (one float32 absmax each).
constexpr int64_t blockwise8_block = 4096;

/// Bytes of `n` elements of `element_size` bytes encoded with `c`; 0 for an unknown codec.
[[nodiscard]] uint64_t encoded_bytes(proto::codec c, int64_t n, size_t element_size);

/// Checks `n` elements of a floating-point type (or any type with RAW) encoded
/// with `c` in `data` before anyone trusts it: the length, and for BLOCKWISE8
/// the header, finite non-negative block maxima and a codebook within [-1, 1]
/// (so decoding can neither overflow nor produce NaN). BAD_REQUEST naming `name`.
[[nodiscard]] caf::error check_encoded(const std::string& data, proto::codec c, int64_t n, size_t element_size,
                                       bool floating, const std::string& name);

/// Checks dtype, codec, dimensions and that the data fits the shape (check_encoded).
[[nodiscard]] caf::error check_tensor(const proto::tensor& t, const char* name);

/// An int64 tensor of `shape` holding `values` (row-major).
[[nodiscard]] proto::tensor make_int64_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape);

/// Boundary checks of requests: stage in range, tensors present and well-formed.
[[nodiscard]] caf::error check_request(const proto::forward_request& req, int num_stages);
[[nodiscard]] caf::error check_request(const proto::backward_request& req, int num_stages);

/// Registration of a server with a coordinator of `num_stages` stages and model hash `config_hash`.
[[nodiscard]] caf::error check_registration(const proto::register_server& reg, int num_stages, uint64_t config_hash,
                                            const std::string& tokenizer = {});

/// The refusal of a peer whose model hash differs: `who` ("server s1", "trainer"),
/// naming both tokenizers when they differ (peers older than the field send none).
[[nodiscard]] caf::error model_mismatch(const std::string& who, const std::string& theirs_tokenizer,
                                        const std::string& our_tokenizer, const std::string& detail = {});

}  // namespace swarm
