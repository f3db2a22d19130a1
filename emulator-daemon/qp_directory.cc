#include "emulator-daemon/qp_directory.h"

namespace ibemu {

std::optional<uint32_t> QpDirectory::allocate(int device, SessionId owner) {
  if (device < 0) return std::nullopt;
  if (next_.size() <= static_cast<size_t>(device)) next_.resize(device + 1, kFirstQpn);
  uint32_t& next = next_[device];
  for (uint32_t tries = 0; tries <= kMaxQpn - kFirstQpn; ++tries) {
    uint32_t qpn = next;
    next = next == kMaxQpn ? kFirstQpn : next + 1;
    if (const Block* b = block_holding(device, qpn)) {
      next = b->end > kMaxQpn ? kFirstQpn : b->end;
      tries += b->end - qpn - 1;
      continue;
    }
    if (owners_.emplace(Key{device, qpn}, owner).second) return qpn;
  }
  return std::nullopt;
}

bool QpDirectory::reserve(int device, uint32_t first, uint32_t count, SessionId owner) {
  if (device < 0 || count == 0 || first < kFirstQpn || first > kMaxQpn ||
      count > kMaxQpn - first + 1)
    return false;
  const uint32_t end = first + count;
  for (const Block& b : blocks_)
    if (b.device == device && first < b.end && b.first < end) return false;
  auto in_use = owners_.lower_bound(Key{device, first});
  if (in_use != owners_.end() && in_use->first < Key{device, end}) return false;
  blocks_.push_back({device, first, end, owner});
  return true;
}

const QpDirectory::Block* QpDirectory::block_holding(int device, uint32_t qpn) const {
  for (const Block& b : blocks_)
    if (b.device == device && qpn >= b.first && qpn < b.end) return &b;
  return nullptr;
}

bool QpDirectory::release(int device, uint32_t qpn, SessionId owner) {
  auto it = owners_.find(Key{device, qpn});
  if (it == owners_.end() || it->second != owner) return false;
  owners_.erase(it);
  return true;
}

size_t QpDirectory::release_all(SessionId owner) {
  std::erase_if(blocks_, [owner](const Block& b) { return b.owner == owner; });
  return std::erase_if(owners_, [owner](const auto& kv) { return kv.second == owner; });
}

std::optional<SessionId> QpDirectory::owner(int device, uint32_t qpn) const {
  auto it = owners_.find(Key{device, qpn});
  if (it != owners_.end()) return it->second;
  if (const Block* b = block_holding(device, qpn)) return b->owner;
  return std::nullopt;
}

size_t QpDirectory::count(SessionId owner) const {
  size_t n = 0;
  for (auto& [key, o] : owners_) n += o == owner;
  return n;
}

}  // namespace ibemu
