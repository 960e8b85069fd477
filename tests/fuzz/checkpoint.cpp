// A checkpoint file as read back from disk (models/checkpoint.hpp): torn,
// corrupt or foreign bytes are refused; what passes carries the payload its
// header promised. Also the trainer's position file.
#include "fuzz.hpp"
#include "models/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  const auto named_step = in.take<int64_t>();
  const auto bytes = in.rest();
  if (auto ckpt = swarm::parse_checkpoint(bytes, named_step)) {
    SWARM_FUZZ_EXPECT(ckpt->header.step == named_step);
    SWARM_FUZZ_EXPECT(ckpt->payload.size() + 64 == bytes.size());
  }
  if (auto pos = swarm::decode_position(bytes))
    SWARM_FUZZ_EXPECT(swarm::decode_position(swarm::encode_position(*pos)));
  return 0;
}
