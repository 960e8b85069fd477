#include "messages/local.hpp"

#include <atomic>

#include <caf/sec.hpp>
#include <caf/type_erased_tuple.hpp>

#include "base/log.hpp"

namespace swarm {

uint64_t worth_logging(std::atomic<uint64_t>& count) {
  const uint64_t n = ++count;
  return n <= 20 || n % 1000 == 0 ? n : 0;
}

namespace {

std::atomic<uint64_t> refused{0};

void log_refusal(caf::scheduled_actor* self, const std::string& me, const char* who, const char* what) {
  if (const uint64_t n = worth_logging(refused))
    get_logger("actors")->warn("{}: refused {} {} from {}: only its {} sends those [{} refused in this process]", me,
                               article(what), what, caf::to_string(self->current_sender()), who, n);
}

}  // namespace

bool sent_by(caf::scheduled_actor* self, const caf::actor_addr& allowed, const std::string& me, const char* who,
             const char* what) {
  const auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (sender && sender == allowed)
    return true;
  log_refusal(self, me, who, what);
  return false;
}

bool sent_from(caf::scheduled_actor* self, const caf::node_id& node, const std::string& me, const char* who,
               const char* what) {
  const auto& sender = self->current_sender();
  if (sender && sender->node() == node)
    return true;
  log_refusal(self, me, who, what);
  return false;
}

uint64_t refused_messages() { return refused.load(); }

caf::result<caf::message> drop_unexpected(caf::scheduled_actor* self, caf::message_view& x) {
  static std::atomic<uint64_t> dropped{0};
  if (const uint64_t n = worth_logging(dropped)) {
    constexpr size_t shown = 60;  // per element: a payload may be megabytes
    std::string what;
    const auto& content = x.content();
    for (size_t i = 0; i < content.size(); ++i) {
      auto e = content.stringify(i);
      if (e.size() > shown)
        e = e.substr(0, shown) + "...";
      what += (i == 0 ? "" : ", ") + e;
    }
    get_logger("actors")->warn("{} dropped a message it does not take from {}: ({}) [{} dropped in this process]",
                               self->name(), caf::to_string(self->current_sender()), what, n);
  }
  return caf::sec::unexpected_message;
}

}  // namespace swarm
