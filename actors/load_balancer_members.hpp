#pragma once
// The load balancer's two halves and what each asks of the other: requests
// (actors/load_balancer.cpp: choosing, sending, retrying) and membership
// (actors/load_balancer_members.cpp: the servers as they come and go).

#include <map>
#include <optional>
#include <string>

#include "actors/load_balancer.hpp"

namespace swarm::balancing {

using self_ptr = caf::stateful_actor<load_balancer_state>*;
using request = load_balancer_state::request;
using clock_type = load_balancer_state::clock;

// Membership:
/// A membership_update from the coordinator: JOINs are dialed, LEAVEs and DOWNs removed.
void on_membership(self_ptr self, const encoded<proto::membership_update>& bytes);
/// Asks `coordinator` for the stage's servers, now and as they come and go.
void subscribe(self_ptr self, const coordinator_actor& coordinator);
/// Dials again the servers whose connection failed and whose wait is over.
void retry_unreachable(self_ptr self);
/// The server moves to another stage (or `why`): not chosen again here unless
/// it comes back (a JOIN); its connection stays for the replies it still owes.
void leave_server(self_ptr self, const std::string& server_id, const char* why = "left for another stage");
/// The server is gone: re-send everything pending there at once.
void remove_server(self_ptr self, std::string server_id, const std::string& why);

// Requests:
/// Takes the request pending under `key` out of `pending` (in flight by
/// attempt, or asking a door by ask); nullopt when it is no longer there.
[[nodiscard]] std::optional<request> take(std::map<uint64_t, request>& pending, uint64_t key);
/// The router's clock: steady seconds (passed in, never read inside the policy).
[[nodiscard]] double now_s();
/// One attempt of `req` failed at its server with `err`; decide what happens next.
void on_attempt_failed(self_ptr self, request req, const caf::error& err, const char* reason);
/// Sends `req` to the best server, or queues it until there is one.
void dispatch(self_ptr self, request req);
/// Dispatches again every queued request.
void flush_waiting(self_ptr self);

// Verified work (actors/load_balancer_verify.cpp):
/// `req`, a forward, was answered with `whole`: sampled at --verify-fraction,
/// it is sent again to another server of the stage to compare.
void maybe_verify(self_ptr self, const request& req, const bulk_parts& whole);
/// Whether `server` answered the verification `req` belongs to already.
[[nodiscard]] bool asked_already(self_ptr self, const request& req, const std::string& server);
/// A verification's request ended: its answer, or why there is none.
void on_verify_answer(self_ptr self, const request& req, caf::expected<bulk_parts> whole);

}  // namespace swarm::balancing
