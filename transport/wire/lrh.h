// Local Route Header, 8 bytes (IBA 7.7).
//
//   byte 0: VL[7:4] LVer[3:0]     byte 1: SL[7:4] Rsv2[3:2] LNH[1:0]
//   bytes 2-3: DLID               bytes 4-5: Rsv5[15:11] PktLen[10:0]
//   bytes 6-7: SLID
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Lrh {
  static constexpr size_t kSize = 8;
  uint8_t raw[kSize]{};

  static Lrh from(const uint8_t* p) noexcept {
    Lrh h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint8_t vl() const noexcept { return raw[0] >> 4; }
  void set_vl(uint8_t v) noexcept { raw[0] = static_cast<uint8_t>((v << 4) | (raw[0] & 0x0f)); }
  uint8_t lver() const noexcept { return raw[0] & 0x0f; }
  void set_lver(uint8_t v) noexcept { raw[0] = static_cast<uint8_t>((raw[0] & 0xf0) | (v & 0x0f)); }
  uint8_t sl() const noexcept { return raw[1] >> 4; }
  void set_sl(uint8_t v) noexcept { raw[1] = static_cast<uint8_t>((v << 4) | (raw[1] & 0x0f)); }
  /// Link Next Header (IBA 7.7): 3 = IBA global (GRH follows), 2 = IBA local (BTH follows).
  uint8_t lnh() const noexcept { return raw[1] & 0x03; }
  void set_lnh(uint8_t v) noexcept { raw[1] = static_cast<uint8_t>((raw[1] & 0xfc) | (v & 0x03)); }
  uint16_t dlid() const noexcept { return load_be16(raw + 2); }
  void set_dlid(uint16_t v) noexcept { store_be16(raw + 2, v); }
  /// Packet length in 4-byte words from the first byte of the LRH through the
  /// ICRC, excluding the VCRC (IBA 7.7). 11 bits.
  uint16_t pkt_len() const noexcept { return load_be16(raw + 4) & 0x07ff; }
  void set_pkt_len(uint16_t v) noexcept {
    store_be16(raw + 4, static_cast<uint16_t>((load_be16(raw + 4) & 0xf800) | (v & 0x07ff)));
  }
  uint16_t slid() const noexcept { return load_be16(raw + 6); }
  void set_slid(uint16_t v) noexcept { store_be16(raw + 6, v); }
};

static_assert(sizeof(Lrh) == Lrh::kSize);
static_assert(std::is_trivially_copyable_v<Lrh>);

/// IBA 4.1.2 / 7.11: LIDs 0xC000-0xFFFE name multicast groups (0xFFFF is
/// the permissive LID).
inline constexpr bool is_multicast_lid(uint16_t lid) { return lid >= 0xc000 && lid != 0xffff; }

/// The destination QP of every multicast packet (IBA 9.6.1.5, C9-54).
inline constexpr uint32_t kMulticastQpn = 0xffffff;

}  // namespace ibemu::wire
