#include "emulator-daemon/cm_port_space.h"

#include <algorithm>

namespace ibemu {

namespace {
bool wildcard(const std::string& ip) { return ip == "0.0.0.0" || ip == "::"; }
}  // namespace

bool CmPortSpace::taken(int ps, const std::string& ip, uint16_t port) const {
  return std::any_of(bindings_.begin(), bindings_.end(), [&](const CmPortBinding& b) {
    return b.ps == ps && b.port == port && (wildcard(b.ip) || wildcard(ip) || b.ip == ip);
  });
}

uint16_t CmPortSpace::bind(uint64_t session, int ps, const std::string& ip, uint16_t port) {
  if (port == 0) {
    const int range = kEphemeralLast - kEphemeralFirst + 1;
    for (int tries = 0; tries < range && port == 0; ++tries) {
      uint16_t candidate = next_ephemeral_;
      next_ephemeral_ = candidate == kEphemeralLast ? kEphemeralFirst : candidate + 1;
      if (!taken(ps, ip, candidate)) port = candidate;
    }
    if (port == 0) return 0;
  } else if (taken(ps, ip, port)) {
    return 0;
  }
  bindings_.push_back({session, ps, ip, port});
  return port;
}

bool CmPortSpace::unbind(uint64_t session, int ps, const std::string& ip, uint16_t port) {
  auto it = std::find_if(bindings_.begin(), bindings_.end(), [&](const CmPortBinding& b) {
    return b.session == session && b.ps == ps && b.ip == ip && b.port == port;
  });
  if (it == bindings_.end()) return false;
  bindings_.erase(it);
  return true;
}

size_t CmPortSpace::held_by(uint64_t session) const {
  return size_t(std::count_if(bindings_.begin(), bindings_.end(),
                              [session](const CmPortBinding& b) { return b.session == session; }));
}

void CmPortSpace::release_all(uint64_t session) {
  bindings_.erase(std::remove_if(bindings_.begin(), bindings_.end(),
                                 [&](const CmPortBinding& b) { return b.session == session; }),
                  bindings_.end());
}

}  // namespace ibemu
