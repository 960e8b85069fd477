#pragma once
// Messages only this process can make. Their types are never registered with
// CAF (messages/types.cpp) and are marked unsafe to serialize, so no peer's
// bytes decode to one: CAF drops a remote message that names one before any
// actor sees it. An actor's own timers and the bulk plane's deliveries travel
// as these, which keeps them off the typed interfaces of messages/protocol.hpp
// and out of a stranger's reach: a forged `deadline` for stage 10^6 once
// killed the coordinator, and a forged bulk delivery could have answered
// someone else's request.
//
// An actor takes them with handle_local(): its behavior stays its public
// protocol, and what it does not match goes to the local handlers, then to a
// logged drop (a request among the rest is answered with an error).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/behavior.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/send.hpp>
#include <caf/timespan.hpp>

namespace swarm {

/// A payload's parts from the bulk connection (net/bulk.hpp), for the actor whose message names `key`.
struct bulk_delivery {
  uint64_t key = 0;
  std::vector<std::string> parts;
  /// Keeps the bytes counted in the bulk endpoint's budget until the message
  /// is gone (its receiver took it, or died): frames waiting in a busy
  /// actor's mailbox are memory a sender made this process hold.
  std::shared_ptr<const void> held;
};

/// The receiver's own timer: its claim on the bytes of `key` is late.
struct bulk_expired {
  uint64_t key = 0;
};

/// Sends `what` (a local message) to `self` after `after`. Anonymous, through
/// the untyped handle: a local message is in no interface, and a typed actor
/// may not send to an untyped one.
template <class Self, class T>
void send_later(Self* self, caf::timespan after, T what) {
  caf::delayed_anon_send(caf::actor_cast<caf::actor>(self), after, std::move(what));
}

/// Sends `what` (a local message) to `self` now, behind what its mailbox holds.
template <class Self, class T>
void send_self(Self* self, T what) {
  caf::anon_send(caf::actor_cast<caf::actor>(self), std::move(what));
}

/// Counts one more refusal; its number when it is worth a log line, else 0: a
/// flood of hostile messages must not become a flood of lines (the first 20, then every 1000th).
[[nodiscard]] uint64_t worth_logging(std::atomic<uint64_t>& count);

/// Whether the message `self` handles now comes from `allowed`; else false,
/// and a warning says that `me` refused `what` from its sender, which only its
/// `who` sends (messages of a public interface that only one peer may send).
[[nodiscard]] bool sent_by(caf::scheduled_actor* self, const caf::actor_addr& allowed, const std::string& me,
                           const char* who, const char* what);

/// Whether the message `self` handles now comes from an actor of `node` (the
/// process whose actors alone send `what`: a coordinator's averager and
/// rebalancer, the server's own node); else false, and a warning as sent_by's.
[[nodiscard]] bool sent_from(caf::scheduled_actor* self, const caf::node_id& node, const std::string& me,
                             const char* who, const char* what);

/// "an" before a vowel, else "a": for log lines that name what was refused.
[[nodiscard]] inline const char* article(const char* what) {
  return what && std::string_view{"aeiou"}.find(what[0]) != std::string_view::npos ? "an" : "a";
}

/// Messages refused by sent_by and sent_from so far in this process.
[[nodiscard]] uint64_t refused_messages();

/// Logs a message no handler took (its sender, and its content cut short) and
/// answers it with caf::sec::unexpected_message.
caf::result<caf::message> drop_unexpected(caf::scheduled_actor* self, caf::message_view& x);

/// Lets the actor take the local messages `handlers` match (one lambda per
/// type); anything else its behavior did not match goes to drop_unexpected.
template <class Self, class... Fs>
void handle_local(Self* self, Fs... handlers) {
  self->set_default_handler([local = caf::behavior{std::move(handlers)...}](
                                caf::scheduled_actor* s, caf::message_view& x) mutable -> caf::result<caf::message> {
    if (local(x.content()))
      return caf::message{};
    return drop_unexpected(s, x);
  });
}

}  // namespace swarm

/// Marks a local message type: CAF refuses to serialize it, and never learns to deserialize it.
#define SWARM_LOCAL_MESSAGE(type) CAF_ALLOW_UNSAFE_MESSAGE_TYPE(type)

SWARM_LOCAL_MESSAGE(swarm::bulk_delivery)
SWARM_LOCAL_MESSAGE(swarm::bulk_expired)
