// A tensor from a peer (messages/tensor_codec.hpp): any encoded proto::tensor
// through decode_tensor. What it accepts has the announced shape and dtype,
// and BLOCKWISE8 values are finite.
#include <torch/torch.h>

#include "fuzz.hpp"
#include "messages/tensor_codec.hpp"
#include "messages/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::proto::tensor t;
  if (!t.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  auto x = swarm::decode_tensor(t, "inputs");
  if (!x)
    return 0;
  SWARM_FUZZ_EXPECT(x->numel() == swarm::numel(t));
  SWARM_FUZZ_EXPECT(x->dim() == t.shape_size());
  if (t.codec() == swarm::proto::BLOCKWISE8)
    SWARM_FUZZ_EXPECT(torch::isfinite(*x).all().item<bool>());
  return 0;
}
