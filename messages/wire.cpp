#include "messages/wire.hpp"

#include <limits>

namespace swarm {

size_t element_size(proto::dtype t) {
  switch (t) {
    case proto::FLOAT64:
    case proto::INT64:
      return 8;
    case proto::FLOAT32:
    case proto::INT32:
      return 4;
    case proto::FLOAT16:
    case proto::BFLOAT16:
    case proto::INT16:
      return 2;
    case proto::INT8:
    case proto::UINT8:
    case proto::BOOL:
      return 1;
    default:
      return 0;
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

caf::error check_tensor(const proto::tensor& t, const char* name) {
  const size_t esize = element_size(t.dtype());
  if (esize == 0)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": unknown dtype " + std::to_string(t.dtype()));
  if (t.codec() != proto::RAW)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": unknown codec " + std::to_string(t.codec()));
  const int64_t n = numel(t);
  if (n < 0 || static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / esize)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": invalid shape " + shape_string(t));
  if (t.data().size() != static_cast<uint64_t>(n) * esize)
    return make_error(errc::BAD_REQUEST, std::string{name} + ": " + std::to_string(t.data().size()) +
                                             " data bytes for shape " + shape_string(t) + " needs " +
                                             std::to_string(static_cast<uint64_t>(n) * esize));
  return caf::none;
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

} // namespace

caf::error check_request(const proto::forward_request& req, int num_stages) {
  if (auto err = check_stage(req.stage(), num_stages))
    return err;
  if (!req.has_inputs())
    return make_error(errc::BAD_REQUEST, "forward_request without inputs");
  if (auto err = check_tensor(req.inputs(), "inputs"))
    return err;
  const bool last = static_cast<int>(req.stage()) == num_stages - 1;
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

caf::error check_registration(const proto::register_server& reg, int num_stages, uint64_t config_hash) {
  if (static_cast<int>(reg.num_stages()) != num_stages || reg.config_hash() != config_hash)
    return make_error(errc::BAD_CONFIG, "server " + reg.server_id() + " runs " + std::to_string(reg.num_stages()) +
                                            " stages with model hash " + std::to_string(reg.config_hash()) +
                                            ", this swarm " + std::to_string(num_stages) + " stages with hash " +
                                            std::to_string(config_hash) + ": start it with the same config");
  if (auto err = check_stage(reg.stage(), num_stages))
    return err;
  if (reg.server_id().empty() || reg.host().empty() || reg.port() == 0 || reg.port() > 65535)
    return make_error(errc::BAD_REQUEST, "register_server needs server_id, host and a port in [1, 65535]");
  return caf::none;
}

} // namespace swarm
