// The two link-layer CRCs of an IBA packet (IBA 7.8).
//
// ICRC (IBA 7.8.1): CRC-32 with the Ethernet polynomial 0x04C11DB7, computed
// the Ethernet way (bits of each byte taken least significant first, register
// preset to all ones, result complemented), i.e. exactly zlib's crc32(). It
// covers the packet from the first byte of the LRH through the last pad byte,
// with the fields that switches and routers may change replaced by ones:
//   - local packets (LNH = IBA local): LRH:VL and BTH:Resv8a;
//   - global packets (LNH = IBA global): the whole LRH (a router rebuilds it),
//     GRH:TClass, GRH:FlowLabel, GRH:HopLmt and BTH:Resv8a.
// VCRC (IBA 7.8.2): CRC-16 with polynomial 0x100B over LRH..ICRC, computed
// the same way (reflected, preset to ones, complemented).
// Both are stored least significant byte first.
//
// These conventions were checked bit for bit against captures of real HCA
// traffic (local and global packets); tests/unit/wire_crc_test.cc carries
// packets from such a capture.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

inline constexpr size_t kIcrcSize = 4;
inline constexpr size_t kVcrcSize = 2;

/// ICRC of `pkt[0, len_without_crcs)`: LRH[, GRH], BTH, extension headers,
/// payload and pad. `has_grh` selects the global-packet variant mask.
uint32_t compute_icrc(const uint8_t* pkt, size_t len_without_crcs, bool has_grh) noexcept;

/// VCRC of `pkt[0, len_including_icrc)`: everything from the LRH through the ICRC.
uint16_t compute_vcrc(const uint8_t* pkt, size_t len_including_icrc) noexcept;

inline void store_icrc(uint8_t* p, uint32_t icrc) noexcept { store_le32(p, icrc); }
inline uint32_t load_icrc(const uint8_t* p) noexcept { return load_le32(p); }
inline void store_vcrc(uint8_t* p, uint16_t vcrc) noexcept { store_le16(p, vcrc); }
inline uint16_t load_vcrc(const uint8_t* p) noexcept { return load_le16(p); }

}  // namespace ibemu::wire
