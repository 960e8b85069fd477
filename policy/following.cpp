#include "policy/following.hpp"

namespace swarm::policy {

follow follow_leader(int64_t named, int64_t joined) {
  if (named == 0 || named == joined)
    return follow::stay;
  return named > joined ? follow::rejoin : follow::confirm;
}

}  // namespace swarm::policy
