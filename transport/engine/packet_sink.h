#pragma once
// Where the engine sends finished packets and how it learns its ports' own
// addresses. The provider implements both over shared-memory rings and the
// state page; unit tests implement them with a fake link.
#include <array>
#include <cstddef>
#include <cstdint>

namespace ibemu::engine {

/// What became of a packet handed to the link.
enum class TxResult {
  kSent,       // on the wire (a fault injected on the way may still lose it)
  kQueued,     // the destination has no room yet: the link keeps it, in order,
               // and sends it when there is (a lossless link's credits)
  kNoRoute,    // no such destination: the fabric drops it
  kDiscarded,  // the link gave it up (a receiver that takes nothing); the
               // link counted it
};

class PacketSink {
 public:
  virtual ~PacketSink() = default;
  /// Hands one finished IBA packet to the link toward (dlid, dest_qp). Never
  /// waits: a packet the destination has no room for is queued.
  virtual TxResult transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet,
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
  /// The P_Key table (IBA 10.9); by default the default partition's
  /// full-member key alone.
  std::array<uint16_t, 16> pkeys{0xffff};
  uint8_t num_pkeys = 1;
  /// The P_Key at `index`, or 0 (no partition) past the table.
  uint16_t pkey(uint16_t index) const { return index < num_pkeys ? pkeys[index] : 0; }
};

/// IBA 10.9.3: two P_Keys match when they name one partition (the low 15
/// bits, never 0) and at least one of them is a full member (bit 15).
inline bool pkeys_match(uint16_t a, uint16_t b) {
  return (a & 0x7fff) != 0 && (a & 0x7fff) == (b & 0x7fff) && ((a | b) & 0x8000) != 0;
}

class PortTable {
 public:
  virtual ~PortTable() = default;
  virtual PortAddress port(uint8_t port_num) const noexcept = 0;
  /// Changes whenever some port's P_Key table changes (an SM set it).
  virtual uint32_t pkey_generation() const noexcept { return 0; }
};

}  // namespace ibemu::engine
