#pragma once
// The project's own errors, for every layer: a code that says whether a retry
// elsewhere can help, and a sentence for people. No CAF or protobuf here, so
// the model and the policies return errors without linking either; the actors
// carry the same codes as CAF errors (messages/errors.hpp), and the codes keep
// the numbers of proto::status (messages/swarm.proto), which a test checks.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace swarm {

enum class errc : uint8_t {
  OK = 0,             ///< not an error
  BAD_REQUEST = 1,    ///< payload could not be parsed, or a field is missing or out of range
  WRONG_SHAPE = 2,    ///< a tensor's shape or dtype does not fit this stage or model
  UNKNOWN_STAGE = 3,  ///< stage index outside [0, num_stages) or not the stage served here
  NON_FINITE = 4,     ///< a tensor holds NaN or Inf; rejected so parameters stay clean
  TIMEOUT = 5,        ///< the peer did not answer before the request's deadline (retryable)
  PEER_GONE = 6,      ///< the peer died or its connection dropped (retryable)
  NO_SERVER = 7,      ///< no live server for the stage within the deadline (retryable)
  BAD_CONFIG = 8,     ///< peers disagree on the model or cluster configuration
  INTERNAL = 9,       ///< a bug or an exception inside the peer (retryable: it says nothing of other peers)
  LEAVING = 10,       ///< the server moves to another stage and takes no more requests of this one (retryable)
};
constexpr int errc_count = 11;

/// "WRONG_SHAPE"; "?" for a number outside the enum.
[[nodiscard]] const char* to_string(errc code);

/// Whether the same work may be retried on another peer (timeouts, dead peers,
/// no server, a failure inside one peer) as opposed to a fault of the request.
[[nodiscard]] bool is_retryable(errc code);

/// An error as a value: OK (false) or a code with what happened.
class error {
public:
  error() = default;
  error(errc code, std::string what) : code_(code), what_(std::move(what)) {}

  [[nodiscard]] errc code() const { return code_; }
  [[nodiscard]] const std::string& what() const { return what_; }
  explicit operator bool() const { return code_ != errc::OK; }

private:
  errc code_ = errc::OK;
  std::string what_;
};

/// "WRONG_SHAPE: inputs [8, 64] expected [8, 64, 128]"; "OK" for no error.
[[nodiscard]] std::string describe(const error& err);

/// A value, or the error that kept it from being made.
template <class T>
class result {
public:
  result(T value) : v_(std::move(value)) {}         // NOLINT: implicit, as a return value
  result(swarm::error err) : v_(std::move(err)) {}  // NOLINT

  explicit operator bool() const { return v_.index() == 0; }
  [[nodiscard]] T& operator*() { return std::get<0>(v_); }
  [[nodiscard]] const T& operator*() const { return std::get<0>(v_); }
  [[nodiscard]] T* operator->() { return &std::get<0>(v_); }
  [[nodiscard]] const T* operator->() const { return &std::get<0>(v_); }
  [[nodiscard]] const swarm::error& error() const { return std::get<1>(v_); }

private:
  std::variant<T, swarm::error> v_;
};

}  // namespace swarm
