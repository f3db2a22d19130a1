// Base Transport Header, 12 bytes (IBA 9.2).
//
//   byte 0: OpCode     byte 1: SE[7] M[6] PadCnt[5:4] TVer[3:0]
//   bytes 2-3: P_Key   byte 4: Resv8a = FECN[7] BECN[6] Resv6[5:0]
//   bytes 5-7: DestQP  byte 8: AckReq[7] Resv7[6:0]   bytes 9-11: PSN
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Bth {
  static constexpr size_t kSize = 12;
  uint8_t raw[kSize]{};

  static Bth from(const uint8_t* p) noexcept {
    Bth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint8_t opcode() const noexcept { return raw[0]; }
  void set_opcode(uint8_t v) noexcept { raw[0] = v; }
  /// Solicited Event (IBA 9.2).
  bool se() const noexcept { return raw[1] & 0x80; }
  void set_se(bool v) noexcept { set_bit(raw[1], 0x80, v); }
  /// MigReq (IBA 9.2): the requester's path migration state.
  bool mig_req() const noexcept { return raw[1] & 0x40; }
  void set_mig_req(bool v) noexcept { set_bit(raw[1], 0x40, v); }
  /// Pad bytes appended to the payload to reach a 4-byte multiple (IBA 9.2).
  uint8_t pad_cnt() const noexcept { return (raw[1] >> 4) & 0x03; }
  void set_pad_cnt(uint8_t v) noexcept {
    raw[1] = static_cast<uint8_t>((raw[1] & 0xcf) | ((v & 0x03) << 4));
  }
  /// Transport header version (IBA 9.2); 0 is the only defined value.
  uint8_t tver() const noexcept { return raw[1] & 0x0f; }
  void set_tver(uint8_t v) noexcept { raw[1] = static_cast<uint8_t>((raw[1] & 0xf0) | (v & 0x0f)); }
  uint16_t pkey() const noexcept { return load_be16(raw + 2); }
  void set_pkey(uint16_t v) noexcept { store_be16(raw + 2, v); }
  /// The whole Resv8a byte, a variant field for the ICRC (IBA 7.8.1).
  uint8_t resv8a() const noexcept { return raw[4]; }
  void set_resv8a(uint8_t v) noexcept { raw[4] = v; }
  /// Congestion notification bits carved out of Resv8a (IBA Annex A10).
  bool fecn() const noexcept { return raw[4] & 0x80; }
  void set_fecn(bool v) noexcept { set_bit(raw[4], 0x80, v); }
  bool becn() const noexcept { return raw[4] & 0x40; }
  void set_becn(bool v) noexcept { set_bit(raw[4], 0x40, v); }
  uint32_t dest_qp() const noexcept { return load_be24(raw + 5); }
  void set_dest_qp(uint32_t v) noexcept { store_be24(raw + 5, v); }
  /// AckReq (IBA 9.2).
  bool ack_req() const noexcept { return raw[8] & 0x80; }
  void set_ack_req(bool v) noexcept { set_bit(raw[8], 0x80, v); }
  uint32_t psn() const noexcept { return load_be24(raw + 9); }
  void set_psn(uint32_t v) noexcept { store_be24(raw + 9, v); }

 private:
  static void set_bit(uint8_t& byte, uint8_t mask, bool v) noexcept {
    byte = static_cast<uint8_t>(v ? (byte | mask) : (byte & ~mask));
  }
};

static_assert(sizeof(Bth) == Bth::kSize);
static_assert(std::is_trivially_copyable_v<Bth>);

}  // namespace ibemu::wire
