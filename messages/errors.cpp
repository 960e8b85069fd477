#include "messages/errors.hpp"

#include <caf/message.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>

namespace swarm {

caf::error make_error(errc code, std::string what) {
  return caf::error{static_cast<uint8_t>(code), error_category, caf::make_message(std::move(what))};
}

caf::error to_caf(const error& err) {
  if (!err)
    return caf::none;
  return make_error(err.code(), err.what());
}

errc code_of(const caf::error& err) {
  if (!err)
    return errc::OK;
  if (err.category() == error_category)
    return err.code() < errc_count ? static_cast<errc>(err.code()) : errc::INTERNAL;
  if (err.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(err.code())) {
      case caf::sec::request_timeout: return errc::TIMEOUT;
      case caf::sec::request_receiver_down:
      case caf::sec::no_route_to_receiving_node:
      case caf::sec::cannot_connect_to_node:
      case caf::sec::cannot_forward_to_invalid_actor:
      case caf::sec::disconnect_during_handshake:
      case caf::sec::connection_timeout:
      case caf::sec::remote_linking_failed: return errc::PEER_GONE;
      default: break;
    }
  }
  // Exit reasons arrive when a monitored or requested peer dies.
  if (err.category() == caf::atom("exit"))
    return errc::PEER_GONE;
  return errc::INTERNAL;
}

bool stopped_on_purpose(const caf::error& reason) {
  return reason == caf::exit_reason::user_shutdown || reason == caf::exit_reason::normal;
}

bool is_retryable(const caf::error& err) { return is_retryable(code_of(err)); }

std::string describe(const caf::error& err) {
  if (!err)
    return "OK";
  std::string what;
  if (err.context().match_elements<std::string>())
    what = err.context().get_as<std::string>(0);
  if (err.category() == error_category)
    return describe(error{code_of(err), what});
  return caf::to_string(err);
}

void register_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    return describe(caf::error{code, error_category, ctx});
  });
}

}  // namespace swarm
