#include "base/error.hpp"

namespace swarm {

const char* to_string(errc code) {
  switch (code) {
    case errc::OK: return "OK";
    case errc::BAD_REQUEST: return "BAD_REQUEST";
    case errc::WRONG_SHAPE: return "WRONG_SHAPE";
    case errc::UNKNOWN_STAGE: return "UNKNOWN_STAGE";
    case errc::NON_FINITE: return "NON_FINITE";
    case errc::TIMEOUT: return "TIMEOUT";
    case errc::PEER_GONE: return "PEER_GONE";
    case errc::NO_SERVER: return "NO_SERVER";
    case errc::BAD_CONFIG: return "BAD_CONFIG";
    case errc::INTERNAL: return "INTERNAL";
    case errc::LEAVING: return "LEAVING";
  }
  return "?";
}

bool is_retryable(errc code) {
  switch (code) {
    case errc::TIMEOUT:
    case errc::PEER_GONE:
    case errc::NO_SERVER:
    case errc::LEAVING:
    case errc::INTERNAL:  // a failure inside one peer says nothing about the others
      return true;
    default: return false;
  }
}

std::string describe(const error& err) {
  if (!err)
    return "OK";
  return std::string{to_string(err.code())} + (err.what().empty() ? "" : ": " + err.what());
}

}  // namespace swarm
