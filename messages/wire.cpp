#include "messages/wire.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace swarm {

size_t element_size(proto::dtype t) {
  switch (t) {
    case proto::FLOAT64:
    case proto::INT64: return 8;
    case proto::FLOAT32:
    case proto::INT32: return 4;
    case proto::FLOAT16:
    case proto::BFLOAT16:
    case proto::INT16: return 2;
    case proto::INT8:
    case proto::UINT8:
    case proto::BOOL: return 1;
    default: return 0;
  }
}

int64_t numel(const proto::tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d < 0)
      return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return -1;
    n *= d;
  }
  return n;
}

std::string shape_string(const proto::tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.shape_size(); ++i)
    s += (i ? ", " : "") + std::to_string(t.shape(i));
  return s + "]";
}

proto::codec codec_of(const std::string& name) {
  if (name == "fp16")
    return proto::FP16;
  if (name == "blockwise8")
    return proto::BLOCKWISE8;
  return proto::RAW;
}

uint64_t encoded_bytes(proto::codec c, int64_t n, size_t element_size) {
  const auto count = static_cast<uint64_t>(n);
  switch (c) {
    case proto::RAW: return count * element_size;
    case proto::FP16: return count * 2;
    case proto::BLOCKWISE8: {
      const auto blocks = (count + blockwise8_block - 1) / blockwise8_block;
      return 16 + 4 * blocks + 4 * 256 + count;
    }
    default: return 0;
  }
}

caf::error check_encoded(const std::string& data, proto::codec c, int64_t n, size_t element_size, bool floating,
                         const std::string& name) {
  if (!proto::codec_IsValid(c))
    return make_error(errc::BAD_REQUEST, name + ": unknown codec " + std::to_string(c));
  if (c != proto::RAW && !floating)
    return make_error(errc::BAD_REQUEST,
                      name + ": codec " + proto::codec_Name(c) + " applies to floating-point data only");
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / 8)
    return make_error(errc::BAD_REQUEST, name + ": invalid element count " + std::to_string(n));
  const uint64_t want = encoded_bytes(c, n, element_size);
  if (data.size() != want)
    return make_error(errc::BAD_REQUEST, name + ": " + std::to_string(data.size()) + " data bytes for " +
                                             std::to_string(n) + " elements in " + proto::codec_Name(c) + " needs " +
                                             std::to_string(want));
  if (c != proto::BLOCKWISE8)
    return caf::none;
  int64_t header[2];
  std::memcpy(header, data.data(), sizeof header);
  const int64_t blocks = (n + blockwise8_block - 1) / blockwise8_block;
  if (header[0] != blocks || header[1] != 256)
    return make_error(errc::BAD_REQUEST, name + ": BLOCKWISE8 header says " + std::to_string(header[0]) +
                                             " blocks and " + std::to_string(header[1]) + " codes, expected " +
                                             std::to_string(blocks) + " and 256");
  std::vector<float> floats(static_cast<size_t>(blocks) + 256);
  std::memcpy(floats.data(), data.data() + sizeof header, floats.size() * sizeof(float));
  for (size_t i = 0; i < floats.size(); ++i) {
    const bool absmax = i < static_cast<size_t>(blocks);
    const float v = floats[i];
    if (!std::isfinite(v) || (absmax ? v < 0 : std::fabs(v) > 1))
      return make_error(errc::BAD_REQUEST, name + ": BLOCKWISE8 " +
                                               (absmax ? "block maximum " + std::to_string(i)
                                                       : "code " + std::to_string(i - static_cast<size_t>(blocks))) +
                                               " is " + std::to_string(v) +
                                               (absmax ? " (needs finite, >= 0)" : " (needs [-1, 1])"));
  }
  return caf::none;
}

namespace {

/// The data fields of the tensors set in `msg`, in field order.
std::vector<std::string*> tensor_data_fields(google::protobuf::Message& msg) {
  std::vector<std::string*> out;
  const auto* d = msg.GetDescriptor();
  const auto* r = msg.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && !f->is_repeated() &&
        f->message_type() == proto::tensor::descriptor() && r->HasField(msg, f))
      out.push_back(static_cast<proto::tensor*>(r->MutableMessage(&msg, f))->mutable_data());
  }
  return out;
}

}  // namespace

std::vector<std::string> take_tensor_data(google::protobuf::Message& msg) {
  std::vector<std::string> out;
  for (auto* data : tensor_data_fields(msg)) {
    out.push_back(std::move(*data));
    data->clear();
  }
  return out;
}

std::vector<std::string> encode_parts(google::protobuf::Message& msg) {
  auto data = take_tensor_data(msg);
  data.insert(data.begin(), msg.SerializeAsString());
  return data;
}

int64_t parts_size(const std::vector<std::string>& parts) {
  int64_t n = 0;
  for (const auto& p : parts)
    n += static_cast<int64_t>(p.size());
  return n;
}

caf::error put_tensor_data(std::vector<std::string> parts, google::protobuf::Message& msg, const char* what) {
  if (parts.empty() || !msg.ParseFromString(parts[0]))
    return make_error(errc::BAD_REQUEST, std::string{"malformed "} + what + " (" +
                                             std::to_string(parts.empty() ? 0 : parts[0].size()) + " bytes)");
  if (parts.size() == 1)
    return caf::none;
  const auto fields = tensor_data_fields(msg);
  const bool empty = std::all_of(fields.begin(), fields.end(), [](const std::string* d) { return d->empty(); });
  if (fields.size() != parts.size() - 1 || !empty)
    return make_error(errc::BAD_REQUEST, std::string{"malformed "} + what + ": " + std::to_string(parts.size() - 1) +
                                             " tensor payloads for " + std::to_string(fields.size()) +
                                             (empty ? " tensors" : " tensors that carry data already"));
  for (size_t i = 0; i < fields.size(); ++i)
    *fields[i] = std::move(parts[i + 1]);
  return caf::none;
}

caf::error check_tensor(const proto::tensor& t, const char* name) {
  const size_t esize = element_size(t.dtype());
  if (esize == 0)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": unknown dtype " + std::to_string(t.dtype()));
  const int64_t n = numel(t);
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / esize)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": invalid shape " + shape_string(t));
  const bool floating = t.dtype() == proto::FLOAT32 || t.dtype() == proto::FLOAT16 || t.dtype() == proto::BFLOAT16 ||
                        t.dtype() == proto::FLOAT64;
  return check_encoded(t.data(), t.codec(), n, esize, floating, std::string{name} + " " + shape_string(t));
}

proto::tensor make_int64_tensor(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  proto::tensor t;
  for (int64_t d : shape)
    t.add_shape(d);
  t.set_dtype(proto::INT64);
  t.set_codec(proto::RAW);
  // Little-endian hosts only (x86-64, aarch64): the element bytes are the wire bytes.
  t.set_data(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t));
  return t;
}

namespace {

caf::error check_stage(uint32_t stage, int num_stages) {
  if (static_cast<int64_t>(stage) >= num_stages)
    return make_error(errc::UNKNOWN_STAGE,
                      "stage " + std::to_string(stage) + " out of range [0, " + std::to_string(num_stages) + ")");
  return caf::none;
}

}  // namespace

caf::error check_request(const proto::forward_request& req, int num_stages) {
  if (auto err = check_stage(req.stage(), num_stages))
    return err;
  if (!req.has_inputs())
    return make_error(errc::BAD_REQUEST, "forward_request without inputs");
  if (auto err = check_tensor(req.inputs(), "inputs"))
    return err;
  const bool last = static_cast<int>(req.stage()) == num_stages - 1;
  if (req.logits()) {  // generation: forward only, nothing to compare with
    if (req.has_targets() || req.eval())
      return make_error(errc::BAD_REQUEST, "forward_request for logits carries targets or eval");
    if (!last)
      return make_error(errc::BAD_REQUEST, "forward_request for logits to a stage that is not the last");
    return caf::none;
  }
  if (last != req.has_targets())
    return make_error(errc::BAD_REQUEST, last ? "forward_request to the last stage needs targets"
                                              : "forward_request carries targets but stage is not the last");
  if (last)
    return check_tensor(req.targets(), "targets");
  return caf::none;
}

caf::error check_request(const proto::backward_request& req, int num_stages) {
  if (auto err = check_stage(req.stage(), num_stages))
    return err;
  if (static_cast<int>(req.stage()) == num_stages - 1)
    return make_error(errc::BAD_REQUEST, "backward_request to the last stage (its forward already ran backward)");
  if (!req.has_inputs() || !req.has_output_grad())
    return make_error(errc::BAD_REQUEST, "backward_request needs inputs and output_grad");
  if (auto err = check_tensor(req.inputs(), "inputs"))
    return err;
  return check_tensor(req.output_grad(), "output_grad");
}

caf::error model_mismatch(const std::string& who, const std::string& theirs_tokenizer, const std::string& our_tokenizer,
                          const std::string& detail) {
  std::string text = who + "'s model hash differs from the swarm's" + detail;
  if (!theirs_tokenizer.empty() && !our_tokenizer.empty() && theirs_tokenizer != our_tokenizer)
    text += ": its tokenizer is " + theirs_tokenizer + ", the swarm's " + our_tokenizer +
            " (start it with the same --tokenizer file)";
  else
    text += ": start it with the same config (the model keys and the --tokenizer file)";
  return make_error(errc::BAD_CONFIG, text);
}

caf::error check_registration(const proto::register_server& reg, int num_stages, uint64_t config_hash,
                              const std::string& tokenizer) {
  if (static_cast<int>(reg.num_stages()) != num_stages || reg.config_hash() != config_hash)
    return model_mismatch("server " + reg.server_id(), reg.tokenizer(), tokenizer,
                          " (" + std::to_string(reg.num_stages()) + " stages, hash " +
                              std::to_string(reg.config_hash()) + "; this swarm " + std::to_string(num_stages) +
                              " stages, hash " + std::to_string(config_hash) + ")");
  if (auto err = check_stage(reg.stage(), num_stages))
    return err;
  if (reg.server_id().empty() || reg.host().empty() || reg.port() == 0 || reg.port() > 65535)
    return make_error(errc::BAD_REQUEST, "register_server needs server_id, host and a port in [1, 65535]");
  return caf::none;
}

}  // namespace swarm
