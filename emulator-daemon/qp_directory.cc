#include "emulator-daemon/qp_directory.h"

namespace ibemu {

std::optional<uint32_t> QpDirectory::allocate(int device, SessionId owner) {
  if (device < 0) return std::nullopt;
  if (next_.size() <= static_cast<size_t>(device)) next_.resize(device + 1, kFirstQpn);
  uint32_t& next = next_[device];
  for (uint32_t tries = 0; tries <= kMaxQpn - kFirstQpn; ++tries) {
    uint32_t qpn = next;
    next = next == kMaxQpn ? kFirstQpn : next + 1;
    if (owners_.emplace(Key{device, qpn}, owner).second) return qpn;
  }
  return std::nullopt;
}

bool QpDirectory::release(int device, uint32_t qpn, SessionId owner) {
  auto it = owners_.find(Key{device, qpn});
  if (it == owners_.end() || it->second != owner) return false;
  owners_.erase(it);
  return true;
}

size_t QpDirectory::release_all(SessionId owner) {
  return std::erase_if(owners_, [owner](const auto& kv) { return kv.second == owner; });
}

std::optional<SessionId> QpDirectory::owner(int device, uint32_t qpn) const {
  auto it = owners_.find(Key{device, qpn});
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

size_t QpDirectory::count(SessionId owner) const {
  size_t n = 0;
  for (auto& [key, o] : owners_) n += o == owner;
  return n;
}

}  // namespace ibemu
