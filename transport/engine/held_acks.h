#pragma once
// Acknowledgements the link refused, kept until it takes them.
//
// A hardware responder never loses its own ACK: the packet waits in the HCA
// for link credits. The emulated link is made of rings that a busy peer can
// leave full, and a sender gives up on a ring after a while. A lost data
// packet is recovered by the requester's retransmission, but a lost ACK for
// the last message is not when the responder's program has already seen the
// completion and destroyed its QP: the duplicate that would have been
// acknowledged again finds no QP, and the requester ends with a retry error
// although everything arrived. So the QP holds a refused ACK or NAK and
// offers it again from the timer scan and once more when it is destroyed.
//
// One packet per destination suffices: ACKs are cumulative and a NAK
// acknowledges everything before its PSN, so a newer response to the same
// requester supersedes the held one; a copy that arrives late anyway is
// recognised as a duplicate by the completer (IBA 9.7.5.1.1).
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/engine/timing.h"

namespace ibemu::engine {

class HeldAcks {
 public:
  /// Longer than any ACK packet (LRH, GRH, BTH, AETH, CRCs).
  static constexpr size_t kMaxPacket = 96;
  /// How often a held ACK is offered again, and how long before it is given
  /// up (a requester silent that long has failed or gone anyway).
  static constexpr Nanos kRetryNs = 1'000'000;
  static constexpr Nanos kLifetimeNs = 10'000'000'000;

  /// A response reached (dlid, dest_qp): anything held for it is older.
  void delivered(uint16_t dlid, uint32_t dest_qp) noexcept;
  /// The link refused this ACK/NAK: keep it in place of an older one.
  void hold(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len, Nanos now) noexcept;
  /// Offers every held packet to `send(dlid, dest_qp, bytes, len) -> bool`;
  /// drops those taken and those held past kLifetimeNs. Returns when to try
  /// again, or 0 when nothing is held.
  template <typename Send>
  Nanos offer(Nanos now, Send&& send) noexcept {
    std::erase_if(held_, [&](const Held& h) {
      return send(h.dlid, h.dest_qp, h.bytes.data(), h.len) || now - h.since > kLifetimeNs;
    });
    return held_.empty() ? 0 : now + kRetryNs;
  }
  bool empty() const noexcept { return held_.empty(); }
  void clear() noexcept { held_.clear(); }

 private:
  struct Held {
    uint16_t dlid;
    uint32_t dest_qp;
    Nanos since;
    size_t len;
    std::array<uint8_t, kMaxPacket> bytes;
  };
  std::vector<Held> held_;
};

}  // namespace ibemu::engine
