// What a user types (config/config.hpp): a config file's text, or flags, as
// the first byte picks. Anything is refused with a message or accepted as a
// config that validates; nothing throws or crashes.
#include <unistd.h>

#include <fstream>
#include <vector>

#include "config/config.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  swarm::fuzz::reader in(data, size);
  const bool as_file = in.take<uint8_t>() & 1;
  const auto text = in.rest();
  std::vector<std::string> args{"swarm", "--role", "local"};
  const std::string path = "/tmp/swarm-fuzz-config-" + std::to_string(::getpid());
  if (as_file) {
    std::ofstream(path, std::ios::binary) << text;
    args.insert(args.end(), {"--config", path});
  } else {
    for (size_t at = 0; at <= text.size();) {  // NUL-separated flags
      const auto end = std::min(text.find('\0', at), text.size());
      args.push_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  std::vector<const char*> argv;
  for (const auto& a : args)
    argv.push_back(a.c_str());
  const auto parsed = swarm::parse_config(static_cast<int>(argv.size()), argv.data());
  SWARM_FUZZ_EXPECT(parsed.config || !parsed.message.empty());
  if (parsed.config)
    SWARM_FUZZ_EXPECT(swarm::validate(*parsed.config).empty());
  if (as_file)
    std::remove(path.c_str());
  return 0;
}
