#include "messages/tensor_codec.hpp"

#include <cstring>
#include <optional>
#include <stdexcept>

#include <torch/torch.h>

#include "base/buffer_pool.hpp"
#include "messages/codebook.hpp"
#include "messages/errors.hpp"
#include "messages/float_codec.hpp"
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

/// Appends the bytes of a host copy of `t`; into an empty `out`, in a
/// buffer from transfer_buffers() (base/buffer_pool.hpp): a payload's bytes
/// are sent and given back, so the next one's need no fresh pages.
void append(std::string& out, const torch::Tensor& t) {
  const auto c = t.to(torch::kCPU).contiguous();
  if (out.empty())
    out = transfer_buffers().take_empty(c.nbytes());
  out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

/// A tensor on `device` holding a copy of `n` elements of `type` at `p`.
torch::Tensor from_bytes(const char* p, int64_t n, torch::ScalarType type, const torch::Device& device) {
  auto host = torch::empty({n}, torch::TensorOptions().dtype(type));
  if (n > 0)
    std::memcpy(host.data_ptr(), p, host.nbytes());
  return host.to(device);
}

torch::Tensor codebook_on(const torch::Device& device) {
  const auto& code = wire_codebook();
  return from_bytes(reinterpret_cast<const char*>(code.data()), 256, torch::kFloat32, device);
}

/// The flat float32 values of `x` padded with zeros to whole blocks, as [blocks, 4096].
torch::Tensor as_blocks(const torch::Tensor& flat, int64_t blocks) {
  const int64_t pad = blocks * blockwise8_block - flat.numel();
  return torch::constant_pad_nd(flat, {0, pad}, 0).view({blocks, blockwise8_block});
}

std::string encode_blockwise8(const torch::Tensor& flat) {
  const int64_t n = flat.numel();
  const int64_t blocks = (n + blockwise8_block - 1) / blockwise8_block;
  std::string out = transfer_buffers().take_empty(encoded_bytes(proto::BLOCKWISE8, n, 4));
  const int64_t header[2] = {blocks, 256};
  out.append(reinterpret_cast<const char*>(header), sizeof header);
  const auto code = codebook_on(flat.device());
  if (n == 0) {
    append(out, code);
    return out;
  }
  torch::NoGradGuard no_grad;
  const auto x = as_blocks(flat, blocks);
  const auto absmax = x.abs().amax(1);
  // An all-zero block divides by 1 instead of 0: every value quantizes to the
  // code of 0 and decodes to 0 * absmax = 0 whatever the index.
  const auto v = x / torch::where(absmax > 0, absmax, torch::ones_like(absmax)).unsqueeze(1);
  // Largest i with code[i] <= v (code[0] = -1 <= v), then i + 1 when strictly closer.
  const auto lo = (torch::searchsorted(code, v, /*out_int32=*/false, /*right=*/true) - 1).clamp(0, 254);
  const auto hi = lo + 1;
  const auto below = code.index_select(0, lo.view(-1)).view_as(v);
  const auto above = code.index_select(0, hi.view(-1)).view_as(v);
  const auto q = torch::where((above - v) < (v - below), hi, lo).to(torch::kUInt8).view(-1).narrow(0, 0, n);
  append(out, absmax);
  append(out, code);
  append(out, q);
  return out;
}

torch::Tensor decode_blockwise8(const std::string& data, int64_t n, const torch::Device& device) {
  const int64_t blocks = (n + blockwise8_block - 1) / blockwise8_block;
  const char* p = data.data() + 16;
  const auto absmax = from_bytes(p, blocks, torch::kFloat32, device);
  const auto code = from_bytes(p + 4 * blocks, 256, torch::kFloat32, device);
  if (n == 0)
    return torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  const auto q = from_bytes(p + 4 * blocks + 1024, n, torch::kUInt8, device).to(torch::kLong);
  const auto padded = torch::constant_pad_nd(q, {0, blocks * blockwise8_block - n}, 0);
  const auto values = code.index_select(0, padded).view({blocks, blockwise8_block}) * absmax.unsqueeze(1);
  return values.view(-1).narrow(0, 0, n).contiguous();
}

/// `n` float32 values from `data`, which check_encoded() has accepted.
torch::Tensor decode_checked(const std::string& data, proto::codec c, int64_t n, const torch::Device& device) {
  switch (c) {
    case proto::FP16: return from_bytes(data.data(), n, torch::kHalf, device).to(torch::kFloat32);
    case proto::BLOCKWISE8: return decode_blockwise8(data, n, device);
    default: return from_bytes(data.data(), n, torch::kFloat32, device);
  }
}

}  // namespace

std::string encode_values(const torch::Tensor& x, proto::codec c) {
  const auto flat = x.detach().reshape({-1}).to(torch::kFloat32);
  switch (c) {
    case proto::RAW: {
      std::string out;
      append(out, flat);
      return out;
    }
    case proto::FP16: {
      std::string out;
      append(out, flat.clamp(-65504.0, 65504.0).to(torch::kHalf));
      return out;
    }
    case proto::BLOCKWISE8: return encode_blockwise8(flat);
    default: throw std::invalid_argument("encode_values: unknown codec " + std::to_string(c));
  }
}

caf::expected<torch::Tensor> decode_values(const std::string& data, proto::codec c, int64_t n,
                                           const torch::Device& device, const std::string& name) {
  if (auto err = check_encoded(data, c, n, 4, true, name))
    return err;
  try {
    return decode_checked(data, c, n, device);
  } catch (const std::exception& e) {
    return make_error(errc::INTERNAL, name + ": cannot decode: " + e.what());
  }
}

proto::tensor encode_tensor(const torch::Tensor& t, proto::codec c) {
  const auto dtype = to_proto(t.scalar_type());
  // Only our own code encodes, so an unsupported dtype is a bug, not bad input.
  if (!dtype)
    throw std::invalid_argument(std::string{"encode_tensor: unsupported dtype "} + c10::toString(t.scalar_type()));
  proto::tensor out;
  for (int64_t d : t.sizes())
    out.add_shape(d);
  out.set_dtype(*dtype);
  if (!t.is_floating_point() || c == proto::RAW) {
    // Little-endian hosts only (x86-64, aarch64): the element bytes are the wire bytes.
    out.set_codec(proto::RAW);
    append(*out.mutable_data(), t.detach());
    return out;
  }
  out.set_codec(c);
  out.set_data(encode_values(t, c));
  return out;
}

namespace {

/// check_tensor(), then `t`'s dtype as torch's: what both decoders start with.
caf::expected<torch::ScalarType> checked_dtype(const proto::tensor& t, const char* name) {
  if (auto err = check_tensor(t, name))
    return err;
  const auto dtype = to_torch(t.dtype());
  if (!dtype)  // check_tensor knows every dtype we do; kept so the two cannot drift silently
    return make_error(errc::BAD_REQUEST, std::string{name} + ": unsupported dtype " + std::to_string(t.dtype()));
  return *dtype;
}

}  // namespace

caf::expected<torch::Tensor> decode_tensor(const proto::tensor& t, const char* name, const torch::Device& device) {
  const auto dtype = checked_dtype(t, name);
  if (!dtype)
    return dtype.error();
  try {
    const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    const int64_t n = numel(t);
    if (t.codec() == proto::RAW)  // a fresh tensor rather than from_blob: the result must outlive the message
      return from_bytes(t.data().data(), n, *dtype, device).view(shape);
    return decode_checked(t.data(), t.codec(), n, device).to(*dtype).view(shape);
  } catch (const std::exception& e) {
    return make_error(errc::INTERNAL, std::string{name} + ": cannot allocate: " + e.what());
  }
}

caf::expected<torch::Tensor> decode_tensor(proto::tensor&& t, const char* name, const torch::Device& device) {
  if (t.codec() != proto::RAW || !device.is_cpu() || t.data().empty()) {
    auto out = decode_tensor(static_cast<const proto::tensor&>(t), name, device);
    transfer_buffers().give(std::move(*t.mutable_data()));
    return out;
  }
  const auto dtype = checked_dtype(t, name);
  if (!dtype)
    return dtype.error();
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  // The tensor lives in the message's buffer, which goes back to the pool when
  // the tensor dies. malloc aligns it to 16 bytes, enough for every dtype.
  auto held = std::make_unique<std::string>(std::move(*t.mutable_data()));
  void* p = held->data();
  try {
    auto out = torch::from_blob(
        p, shape,
        [buffer = held.get()](void*) {
          transfer_buffers().give(std::move(*buffer));
          delete buffer;
        },
        torch::TensorOptions().dtype(*dtype));
    held.release();  // the deleter owns it now
    return out;
  } catch (const std::exception& e) {
    return make_error(errc::INTERNAL, std::string{name} + ": cannot wrap: " + e.what());
  }
}

std::string encode_floats(const float* p, int64_t n, proto::codec c) {
  if (c == proto::RAW)
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * sizeof(float));
  // from_blob only reads here: encode_values copies before anything else happens.
  return encode_values(torch::from_blob(const_cast<float*>(p), {n}, torch::kFloat32), c);
}

caf::expected<std::vector<float>> decode_floats(const std::string& data, proto::codec c, int64_t n,
                                                const std::string& name) {
  auto t = decode_values(data, c, n, torch::kCPU, name);
  if (!t)
    return t.error();
  const auto* v = t->data_ptr<float>();
  return std::vector<float>(v, v + n);
}

void round_trip_floats(float* p, int64_t n, proto::codec c) {
  if (c == proto::RAW || n == 0)
    return;
  auto back = decode_floats(encode_floats(p, n, c), c, n, "round trip");
  if (back)  // our own encoding always decodes
    std::memcpy(p, back->data(), static_cast<size_t>(n) * sizeof(float));
}

}  // namespace swarm
