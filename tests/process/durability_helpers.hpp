#pragma once
// What the durability tests share: a fresh folder per test, unfinished writes left
// in one, and config/tiny's model hash as its processes compute it.

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#include "config/config.hpp"
#include "process_util.hpp"

namespace swarm::test::durability_helpers {

inline std::string fresh_dir(const std::string& tag) {
  const auto dir = "/tmp/swarm-test-" + tag + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

/// Files in `dir` (recursively) whose name marks an unfinished write.
inline int partial_files(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

/// The model config hash of config/tiny (with `lr` when given), as its processes compute it.
inline uint64_t tiny_hash(const char* lr = nullptr) {
  const char* argv[] = {"swarm", "--role", "local", "--config", tiny.c_str(), "--lr", lr};
  return swarm::parse_config(lr ? 7 : 5, argv).config->model.hash();
}

}  // namespace swarm::test::durability_helpers
