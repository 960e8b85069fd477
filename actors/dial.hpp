#pragma once
// Dialing a peer process before talking to it, for any actor (a stage server
// reloading, a round peer starting a round).
//
// Why dial: without automatic connections, CAF routes a message to a node it
// learnt of through the coordinator via the coordinator; that route dies with
// the coordinator, the peer's proxy stays, and every message on it is dropped
// without a word (soak: rounds stuck after a coordinator restart).
// Tried again: in CI a dial between two servers starting at once timed out
// once (connection_timeout), and that stage's first round then never ended.

#include <chrono>
#include <functional>
#include <set>
#include <string>

#include <caf/all.hpp>

#include "base/log.hpp"
#include "config/config.hpp"
#include "net/tls.hpp"

namespace swarm {

/// Dials `endpoint` ("host:port") unless CAF already holds a direct link to it
/// (the middleman answers from its cache then), and calls `k` either way once
/// answered; a failed dial is tried `tries` times in all. `who` prefixes the log line.
template <class Self>
void dial_then(Self* self, std::string who, const std::string& endpoint, std::function<void()> k, int tries = 3) {
  const auto hp = split_host_port(endpoint);
  if (!hp) {
    k();
    return;
  }
  self->request(dialer(self->system()), std::chrono::seconds(5), caf::connect_atom::value, hp->first, hp->second)
      .then([k](const caf::node_id&, caf::strong_actor_ptr&, const std::set<std::string>&) mutable { k(); },
            [self, who, endpoint, k, tries](caf::error& err) mutable {
              get_logger("stage_server")
                  ->warn("{}: cannot dial peer {}: {}{}", who, endpoint, self->system().render(err),
                         tries > 1 ? "; dialing again" : "; giving up");
              if (tries > 1)
                dial_then(self, std::move(who), endpoint, std::move(k), tries - 1);
              else
                k();
            });
}

}  // namespace swarm
