#pragma once
// Where the engine sends finished packets and how it learns its ports' own
// addresses. The provider implements both over shared-memory rings and the
// state page; unit tests implement them with a fake link.
#include <cstddef>
#include <cstdint>

namespace ibemu::engine {

class PacketSink {
 public:
  virtual ~PacketSink() = default;
  /// Delivers one finished IBA packet toward (dlid, dest_qp). Dropping is
  /// allowed (the RC transport retransmits); this never blocks for long.
  /// Returns false when the packet was discarded (no such destination, or it
  /// stayed unable to take it).
  virtual bool transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
                        size_t len) noexcept = 0;
  /// Whether packets must carry computed ICRC/VCRC. A link inside one host's
  /// memory says no: nothing there can corrupt a packet (wire::fill_crcs
  /// completes them when they leave the host or are captured).
  virtual bool wants_crcs() const noexcept { return true; }
};

struct PortAddress {
  uint16_t lid = 0;
  uint8_t lmc = 0;
  uint8_t active_mtu = 5;
  uint64_t subnet_prefix = 0;
  uint64_t port_guid = 0;
  bool active = false;
};

class PortTable {
 public:
  virtual ~PortTable() = default;
  virtual PortAddress port(uint8_t port_num) const noexcept = 0;
};

}  // namespace ibemu::engine
