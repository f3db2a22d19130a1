// Global Route Header, 40 bytes (IBA 8.3). Same layout as an IPv6 header.
//
//   bits 31-28 IPVer, 27-20 TClass, 19-0 FlowLabel
//   bytes 4-5 PayLen, byte 6 NxtHdr, byte 7 HopLmt
//   bytes 8-23 SGID, bytes 24-39 DGID
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

using Gid = std::array<uint8_t, 16>;

/// IBA 8.3: the only IPVer an IBA GRH carries.
inline constexpr uint8_t kGrhIpVer = 6;
/// IBA 8.3: NxtHdr value for "IBA transport header follows".
inline constexpr uint8_t kGrhNextHdrIba = 0x1b;

struct Grh {
  static constexpr size_t kSize = 40;
  uint8_t raw[kSize]{};

  static Grh from(const uint8_t* p) noexcept {
    Grh h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint8_t ip_ver() const noexcept { return raw[0] >> 4; }
  void set_ip_ver(uint8_t v) noexcept { raw[0] = static_cast<uint8_t>((v << 4) | (raw[0] & 0x0f)); }
  uint8_t tclass() const noexcept { return static_cast<uint8_t>((load_be32(raw) >> 20) & 0xff); }
  void set_tclass(uint8_t v) noexcept {
    store_be32(raw, (load_be32(raw) & 0xf00fffffu) | (uint32_t{v} << 20));
  }
  uint32_t flow_label() const noexcept { return load_be32(raw) & 0x000fffff; }
  void set_flow_label(uint32_t v) noexcept {
    store_be32(raw, (load_be32(raw) & 0xfff00000u) | (v & 0x000fffff));
  }
  /// Bytes after the GRH up to and including the ICRC (IBA 8.3).
  uint16_t pay_len() const noexcept { return load_be16(raw + 4); }
  void set_pay_len(uint16_t v) noexcept { store_be16(raw + 4, v); }
  uint8_t next_hdr() const noexcept { return raw[6]; }
  void set_next_hdr(uint8_t v) noexcept { raw[6] = v; }
  uint8_t hop_limit() const noexcept { return raw[7]; }
  void set_hop_limit(uint8_t v) noexcept { raw[7] = v; }

  Gid sgid() const noexcept { return gid_at(8); }
  void sgid(uint8_t out[16]) const noexcept { std::memcpy(out, raw + 8, 16); }
  void set_sgid(const uint8_t gid[16]) noexcept { std::memcpy(raw + 8, gid, 16); }
  void set_sgid(const Gid& gid) noexcept { std::memcpy(raw + 8, gid.data(), 16); }
  Gid dgid() const noexcept { return gid_at(24); }
  void dgid(uint8_t out[16]) const noexcept { std::memcpy(out, raw + 24, 16); }
  void set_dgid(const uint8_t gid[16]) noexcept { std::memcpy(raw + 24, gid, 16); }
  void set_dgid(const Gid& gid) noexcept { std::memcpy(raw + 24, gid.data(), 16); }

 private:
  Gid gid_at(size_t off) const noexcept {
    Gid g;
    std::memcpy(g.data(), raw + off, g.size());
    return g;
  }
};

static_assert(sizeof(Grh) == Grh::kSize);
static_assert(std::is_trivially_copyable_v<Grh>);

}  // namespace ibemu::wire
