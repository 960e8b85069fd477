#pragma once
// Roles in certificates. With TLS a node's certificate names what it may act
// as (scripts/make_certs.sh: one extended key usage per role, chosen by the CA
// when it signs), and every node refuses a message its sender's role does not
// send: a trainer's certificate cannot register a server, order a move or
// claim a round's outcome, though it chains to the cluster's CA.
//
// CAF delivers a remote message with its sender's node id only, so the roles
// are kept per node: the TLS layer (net/tls.cpp) reads each connection's BASP
// handshake as it decrypts it and notes the node id it names with the roles
// of the certificate that connection presented. A node id already held by a
// live connection with another certificate is refused: one member cannot take
// over another's id. Without TLS nothing is enforced (plain ports listen on
// loopback: the machine's users are trusted).

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include <caf/error.hpp>
#include <caf/node_id.hpp>
#include <caf/scheduled_actor.hpp>

using X509 = struct x509_st;

namespace swarm {

/// What a certificate lets its node act as; a set of bits.
enum peer_role : uint8_t {
  role_coordinator = 1,
  role_server = 2,
  role_trainer = 4,
  role_status = 8,
  role_any = role_coordinator | role_server | role_trainer | role_status,
};
using role_set = uint8_t;

/// "server, trainer"; "no role" for an empty set.
[[nodiscard]] std::string describe_roles(role_set roles);

/// The roles a certificate names (its extended key usages); 0 when none.
[[nodiscard]] role_set roles_of_certificate(X509* cert);

/// The roles of the PEM certificate in `file`; nullopt when unreadable.
[[nodiscard]] std::optional<role_set> roles_of_certificate_file(const std::string& file);

/// Roles are checked from now on (a node with TLS, before its first connection).
void enforce_roles();
[[nodiscard]] bool roles_enforced();

/// A connection presenting the certificate `fingerprint` with `roles` named
/// `node` in its handshake: empty when noted (held until release_node), else
/// why it is refused (another live connection holds that node id with another
/// certificate).
[[nodiscard]] std::string claim_node(const caf::node_id& node, const std::string& fingerprint, role_set roles);
/// That connection closed.
void release_node(const caf::node_id& node);
/// The roles `node` connected with; nullopt when no live connection names it.
[[nodiscard]] std::optional<role_set> roles_of(const caf::node_id& node);

/// Whether the message `self` handles now comes from an actor allowed to send
/// it: roles not enforced, sent from this process, or its node's certificate
/// names one of `allowed`. Else false, counted (refused_by_role) and logged
/// (rate-limited) as `me` refusing `what`. `relayed_ok`: a sender without a
/// connection of its own here is taken too. Its message came through a
/// coordinator (the only relay net/basp_watch.hpp lets through), which saw
/// its node's own connection; for messages gated otherwise as well (a
/// round's pieces: only from the members the coordinator named).
[[nodiscard]] bool sent_as(caf::scheduled_actor* self, role_set allowed, const std::string& me, const char* what,
                           bool relayed_ok = false);

/// What a refused request is answered with (BAD_REQUEST: not retryable).
[[nodiscard]] caf::error refused_for_role(const char* what);

/// Messages refused for their sender's role so far in this process.
[[nodiscard]] uint64_t refused_by_role();

}  // namespace swarm
