// A message from a peer as the actors receive it (messages/wire.hpp): a bulk
// frame's parts (head + tensor bytes) or one encoding, decoded as the first
// byte picks and run through the boundary check its handler runs.
#include <torch/torch.h>

#include "fuzz.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

namespace {

/// Parts cut from the input: each a u16 length and that many bytes.
std::vector<std::string> parts_of(swarm::fuzz::reader& in) {
  std::vector<std::string> parts;
  while (in.left() > 0 && parts.size() < 8)
    parts.push_back(in.bytes(in.take<uint16_t>()));
  return parts;
}

template <class Req>
void request(std::vector<std::string> parts, const char* what) {
  auto req = swarm::decode_parts<Req>(std::move(parts), what);
  if (!req || swarm::check_request(*req, 4))
    return;
  // A request that passed its checks holds tensors that decode.
  SWARM_FUZZ_EXPECT(swarm::decode_tensor(req->inputs(), "inputs"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  const auto kind = in.take<uint8_t>() % 4;
  switch (kind) {
    case 0: request<swarm::proto::forward_request>(parts_of(in), "forward_request"); break;
    case 1: request<swarm::proto::backward_request>(parts_of(in), "backward_request"); break;
    case 2:
      if (auto rep = swarm::decode_parts<swarm::proto::forward_reply>(parts_of(in), "forward_reply"))
        for (const auto* t : {&rep->outputs(), &rep->input_grad()})
          (void)swarm::decode_tensor(*t, "reply");
      break;
    default:
      if (auto reg = swarm::decode<swarm::proto::register_server>(in.rest(), "register_server"))
        (void)swarm::check_registration(*reg, 4, 42);
  }
  return 0;
}
