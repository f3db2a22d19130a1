#include "transport/engine/held_acks.h"

#include <algorithm>
#include <cstring>

namespace ibemu::engine {

void HeldAcks::delivered(uint16_t dlid, uint32_t dest_qp) noexcept {
  if (held_.empty()) return;
  std::erase_if(held_, [&](const Held& h) { return h.dlid == dlid && h.dest_qp == dest_qp; });
}

void HeldAcks::hold(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len,
                    Nanos now) noexcept {
  if (len > kMaxPacket) return;
  auto it = std::find_if(held_.begin(), held_.end(),
                         [&](const Held& h) { return h.dlid == dlid && h.dest_qp == dest_qp; });
  if (it == held_.end()) it = held_.insert(held_.end(), Held{dlid, dest_qp, now, 0, {}});
  it->since = now;
  it->len = len;
  std::memcpy(it->bytes.data(), packet, len);
}

}  // namespace ibemu::engine
