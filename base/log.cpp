#include "base/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace swarm {

void setup_logging(const std::string& process_tag, const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%H:%M:%S.%e %^%L%$ [" + process_tag + " %n] %v");
}

std::shared_ptr<spdlog::logger> get_logger(const std::string& name) {
  if (auto existing = spdlog::get(name))
    return existing;
  try {
    return spdlog::stderr_color_mt(name);
  } catch (const spdlog::spdlog_ex&) {
    return spdlog::get(name);  // another thread created it first
  }
}

}  // namespace swarm
