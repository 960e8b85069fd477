// Roles in certificates (net/peer_roles.hpp) and the watch on each TLS
// connection's decrypted BASP stream (net/basp_watch.hpp).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include <caf/binary_serializer.hpp>
#include <caf/node_id.hpp>

#include "net/basp_watch.hpp"
#include "net/peer_roles.hpp"

namespace {

using namespace swarm;

caf::node_id node_of(uint32_t pid, unsigned char host) {
  caf::node_id::default_data::host_id_type id{};
  id.fill(host);
  return caf::make_node_id(pid, id);
}

std::string serialized(const caf::node_id& node) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  REQUIRE_FALSE(sink(node));
  return {buf.begin(), buf.end()};
}

/// One BASP frame: operation `op`, then `payload`.
std::string frame(unsigned op, const std::string& payload) {
  std::string f(basp_header_size, '\0');
  f[0] = static_cast<char>(op);
  const auto n = static_cast<uint32_t>(payload.size());
  f[4] = static_cast<char>(n >> 24), f[5] = static_cast<char>(n >> 16), f[6] = static_cast<char>(n >> 8);
  f[7] = static_cast<char>(n);
  return f + payload;
}

/// Feeds `bytes` to `w` in pieces of `step` (CAF reads a header, then a payload).
std::string feed(basp_watch& w, const std::string& bytes, size_t step, bool relays, int* named = nullptr) {
  std::string why;
  for (size_t at = 0; at < bytes.size() && why.empty(); at += step)
    why = w.feed(bytes.data() + at, std::min(step, bytes.size() - at), [&](const caf::node_id&) {
      if (named)
        ++*named;
      return basp_watch::verdict{{}, relays};
    });
  return why;
}

}  // namespace

TEST_CASE("the TLS stream watch learns the peer's node and refuses messages naming another source", "[roles]") {
  const auto peer = node_of(11, 0xab), other = node_of(12, 0xcd);
  const std::string hello = frame(1, serialized(peer));  // a client handshake: the peer's node
  const std::string own = frame(3, serialized(peer) + serialized(other) + "message");
  const std::string forged = frame(3, serialized(other) + serialized(peer) + "message");
  const std::string direct = frame(2, "anything");  // its source is the connection's node
  for (size_t step : {size_t{1}, size_t{7}, size_t{32}, size_t{4096}}) {
    INFO("fed " << step << " bytes at a time");
    basp_watch w{true};
    int named = 0;
    CHECK(feed(w, hello + direct + own + frame(6, ""), step, false, &named).empty());
    CHECK(named == 1);
    CHECK(w.node() == peer);
    CHECK(feed(w, forged, step, false) == "a routed message naming another node as its source");
    CHECK_FALSE(feed(w, own, step, false).empty());  // refused once, refused for good
  }
  // Monitor (4) and down (5) messages name their source too: a forged down
  // message would make this node believe another node's actor died.
  for (unsigned op : {4u, 5u}) {
    basp_watch w{true};
    CHECK(feed(w, hello + frame(op, serialized(peer) + serialized(other)), 5, false).empty());
    CHECK_FALSE(feed(w, frame(op, serialized(other) + serialized(peer)), 5, false).empty());
  }
  // A coordinator relays other nodes' messages (CAF routes through it).
  basp_watch relay{true};
  CHECK(feed(relay, hello + forged, 3, true).empty());
  // The dialing side reads a server handshake first; its node leads the payload.
  basp_watch dialed{false};
  CHECK(feed(dialed, frame(0, serialized(peer) + "app ids, actor, interfaces") + own, 9, false).empty());
  CHECK(dialed.node() == peer);
  // Handshakes CAF would choke on, or of the wrong kind, end the connection.
  basp_watch empty{true}, wrong{true}, garbage{true};
  CHECK_FALSE(feed(empty, frame(1, ""), 32, false).empty());
  CHECK_FALSE(feed(wrong, frame(0, serialized(peer)), 32, false).empty());  // a server handshake from a dialer
  CHECK_FALSE(feed(garbage, frame(1, "\xff\xff\xff"), 32, false).empty());
}

TEST_CASE("a node id is held by the certificate that named it first while its connection lives", "[roles]") {
  const auto node = node_of(21, 0x11);
  CHECK(claim_node(node, "cert-a", role_server).empty());
  CHECK(claim_node(node, "cert-a", role_server).empty());  // a second link of the same node
  CHECK(roles_of(node) == std::optional<role_set>{role_server});
  CHECK_FALSE(claim_node(node, "cert-b", role_coordinator).empty());  // another member taking its id
  CHECK(roles_of(node) == std::optional<role_set>{role_server});
  release_node(node);
  release_node(node);
  CHECK_FALSE(roles_of(node));
  CHECK(claim_node(node, "cert-b", role_trainer).empty());  // free again
  release_node(node);
}

TEST_CASE("certificates name their roles as scripts/make_certs.sh wrote them", "[roles]") {
  const std::string dir = "/tmp/swarm-test-roles-" + std::to_string(::getpid());
  const std::string script = "bash " SWARM_SOURCE_DIR "/scripts/make_certs.sh ";
  REQUIRE(std::system(("rm -rf " + dir + " && " + script + "ca " + dir + " >/dev/null && " + script + "node " + dir +
                       " t trainer,status >/dev/null && " + script + "node " + dir + " a all >/dev/null && " + script +
                       "node " + dir + " none >/dev/null")
                          .c_str()) == 0);
  CHECK(roles_of_certificate_file(dir + "/t.crt") == std::optional<role_set>{role_trainer | role_status});
  CHECK(roles_of_certificate_file(dir + "/a.crt") == std::optional<role_set>{role_any});
  CHECK(roles_of_certificate_file(dir + "/none.crt") == std::optional<role_set>{0});
  CHECK_FALSE(roles_of_certificate_file(dir + "/missing.crt"));
  CHECK(describe_roles(role_trainer | role_status) == "trainer, status");
  CHECK(describe_roles(0) == "no role");
  std::system(("rm -rf " + dir).c_str());
}
