#pragma once
// What the config tests share: swarm's and swarm-sim's command line parsers
// called as main calls them, on a list of arguments.

#include <string>
#include <vector>

#include "config/config.hpp"
#include "sim/scenario.hpp"

namespace swarm::testing::config_helpers {

inline parse_result parse(std::vector<std::string> args) {
  args.insert(args.begin(), "swarm");
  std::vector<const char*> argv;
  for (auto& a : args)
    argv.push_back(a.c_str());
  return parse_config(static_cast<int>(argv.size()), argv.data());
}

inline swarm::sim::parse_result parse_sim(std::vector<std::string> args) {
  args.insert(args.begin(), "swarm-sim");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  return swarm::sim::parse_scenario(static_cast<int>(argv.size()), argv.data());
}

}  // namespace swarm::testing::config_helpers
