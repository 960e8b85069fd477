#include "net/peer_roles.hpp"

#include <cstdio>
#include <map>
#include <mutex>

#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <caf/actor_addr.hpp>
#include <caf/actor_control_block.hpp>

#include "base/log.hpp"
#include "messages/errors.hpp"
#include "messages/local.hpp"

namespace swarm {

namespace {

/// The roles' extended key usages, in peer_role's bit order; scripts/make_certs.sh
/// writes the same (a UUID arc, 2.25.<uuid>, needs no registration).
constexpr const char* role_oids[] = {
    "2.25.298418825308453232274976990090434074157.1",  // coordinator
    "2.25.298418825308453232274976990090434074157.2",  // server
    "2.25.298418825308453232274976990090434074157.3",  // trainer
    "2.25.298418825308453232274976990090434074157.4",  // status
};
constexpr const char* role_names[] = {"coordinator", "server", "trainer", "status"};

std::atomic<bool> enforced{false};
std::atomic<uint64_t> refusals{0};

struct holder {
  std::string fingerprint;
  role_set roles = 0;
  int connections = 0;
};

struct node_book {
  std::mutex m;
  std::map<caf::node_id, holder> nodes;
};

node_book& book() {
  static node_book b;
  return b;
}

}  // namespace

std::string describe_roles(role_set roles) {
  std::string out;
  for (size_t i = 0; i < std::size(role_names); ++i)
    if (roles & (1u << i))
      out += (out.empty() ? "" : ", ") + std::string{role_names[i]};
  return out.empty() ? "no role" : out;
}

role_set roles_of_certificate(X509* cert) {
  if (!cert)
    return 0;
  auto* usages = static_cast<EXTENDED_KEY_USAGE*>(X509_get_ext_d2i(cert, NID_ext_key_usage, nullptr, nullptr));
  if (!usages)
    return 0;
  static const auto wanted = [] {
    std::vector<ASN1_OBJECT*> objs;
    for (const char* oid : role_oids)
      objs.push_back(OBJ_txt2obj(oid, 1));  // kept for the process's life
    return objs;
  }();
  role_set roles = 0;
  for (int i = 0; i < sk_ASN1_OBJECT_num(usages); ++i) {
    const ASN1_OBJECT* usage = sk_ASN1_OBJECT_value(usages, i);
    for (size_t r = 0; r < wanted.size(); ++r)
      if (wanted[r] && OBJ_cmp(usage, wanted[r]) == 0)
        roles |= static_cast<role_set>(1u << r);
  }
  sk_ASN1_OBJECT_pop_free(usages, ASN1_OBJECT_free);
  return roles;
}

std::optional<role_set> roles_of_certificate_file(const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "r");
  if (!f)
    return std::nullopt;
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (!cert)
    return std::nullopt;
  const role_set roles = roles_of_certificate(cert);
  X509_free(cert);
  return roles;
}

void enforce_roles() { enforced = true; }
bool roles_enforced() { return enforced.load(); }

std::string claim_node(const caf::node_id& node, const std::string& fingerprint, role_set roles) {
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  auto& h = b.nodes[node];
  if (h.connections > 0 && h.fingerprint != fingerprint)
    return "its handshake names node " + caf::to_string(node) + ", which a connection with another certificate holds";
  h.fingerprint = fingerprint;
  h.roles = roles;
  ++h.connections;
  return {};
}

void release_node(const caf::node_id& node) {
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  if (auto i = b.nodes.find(node); i != b.nodes.end() && --i->second.connections <= 0)
    b.nodes.erase(i);
}

std::optional<role_set> roles_of(const caf::node_id& node) {
  auto& b = book();
  std::lock_guard<std::mutex> lock(b.m);
  if (auto i = b.nodes.find(node); i != b.nodes.end())
    return i->second.roles;
  return std::nullopt;
}

bool sent_as(caf::scheduled_actor* self, role_set allowed, const std::string& me, const char* what, bool relayed_ok) {
  if (!roles_enforced())
    return true;
  const auto& sender = self->current_sender();
  if (sender && sender->node() == self->node())
    return true;
  const auto roles = sender ? roles_of(sender->node()) : std::nullopt;
  if (roles ? (*roles & allowed) != 0 : relayed_ok && sender)
    return true;
  if (const uint64_t n = worth_logging(refusals))
    get_logger("actors")->warn(
        "{}: refused {} {} from {}: its certificate names {}, not {} [{} refused for their "
        "sender's role in this process]",
        me, article(what), what, caf::to_string(sender), roles ? describe_roles(*roles) : "no known role",
        describe_roles(allowed), n);
  return false;
}

caf::error refused_for_role(const char* what) {
  return make_error(errc::BAD_REQUEST, std::string{what} +
                                           " refused: the sender's certificate does not name the role "
                                           "that sends it (scripts/make_certs.sh ROLES)");
}

uint64_t refused_by_role() { return refusals.load(); }

}  // namespace swarm
