#include "models/tensor_codec.hpp"

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "messages/errors.hpp"
#include "messages/wire.hpp"

namespace swarm {

namespace {

std::optional<proto::dtype> to_proto(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return proto::FLOAT32;
    case torch::kFloat16: return proto::FLOAT16;
    case torch::kBFloat16: return proto::BFLOAT16;
    case torch::kFloat64: return proto::FLOAT64;
    case torch::kInt64: return proto::INT64;
    case torch::kInt32: return proto::INT32;
    case torch::kInt16: return proto::INT16;
    case torch::kInt8: return proto::INT8;
    case torch::kUInt8: return proto::UINT8;
    case torch::kBool: return proto::BOOL;
    default: return std::nullopt;
  }
}

std::optional<torch::ScalarType> to_torch(proto::dtype t) {
  switch (t) {
    case proto::FLOAT32: return torch::kFloat32;
    case proto::FLOAT16: return torch::kFloat16;
    case proto::BFLOAT16: return torch::kBFloat16;
    case proto::FLOAT64: return torch::kFloat64;
    case proto::INT64: return torch::kInt64;
    case proto::INT32: return torch::kInt32;
    case proto::INT16: return torch::kInt16;
    case proto::INT8: return torch::kInt8;
    case proto::UINT8: return torch::kUInt8;
    case proto::BOOL: return torch::kBool;
    default: return std::nullopt;
  }
}

} // namespace

proto::tensor encode_tensor(const torch::Tensor& t) {
  const auto dtype = to_proto(t.scalar_type());
  // Only our own code encodes, so an unsupported dtype is a bug, not bad input.
  if (!dtype)
    throw std::invalid_argument(std::string{"encode_tensor: unsupported dtype "} + c10::toString(t.scalar_type()));
  // Little-endian hosts only (x86-64, aarch64): the element bytes are the wire bytes.
  const auto c = t.detach().to(torch::kCPU).contiguous();
  proto::tensor out;
  for (int64_t d : c.sizes())
    out.add_shape(d);
  out.set_dtype(*dtype);
  out.set_codec(proto::RAW);
  out.set_data(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return out;
}

caf::expected<torch::Tensor> decode_tensor(const proto::tensor& t, const char* name) {
  if (auto err = check_tensor(t, name))
    return err;
  const auto dtype = to_torch(t.dtype());
  if (!dtype)  // check_tensor knows every dtype we do; kept so the two cannot drift silently
    return make_error(errc::BAD_REQUEST, std::string{name} + ": unsupported dtype " + std::to_string(t.dtype()));
  try {
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    // A fresh tensor rather than from_blob: the result must outlive the message.
    auto out = torch::empty(shape, torch::TensorOptions().dtype(*dtype));
    if (!t.data().empty())
      std::memcpy(out.data_ptr(), t.data().data(), t.data().size());
    return out;
  } catch (const std::exception& e) {
    return make_error(errc::INTERNAL, std::string{name} + ": cannot allocate: " + e.what());
  }
}

} // namespace swarm
