#pragma once
// Subnet management packets (IBA 14.2.1): 256 bytes in two forms that share
// one layout up to the data area.
//
//   LID-routed (class 0x01, IBA 14.2.1.1): header, M_Key at byte 24,
//     32 reserved bytes, 64 data bytes at 64, 128 reserved bytes.
//   Directed route (class 0x81, IBA 14.2.1.2): Status bit 15 is the D
//     (direction) bit, ClassSpecific holds HopPointer (byte 6) and HopCount
//     (byte 7); DrSLID at 32, DrDLID at 34, data at 64, InitialPath at 128
//     and ReturnPath at 192 (one port number per hop, entry 0 unused).
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "common/mad/mad.h"

namespace ibemu::mad {

inline constexpr size_t kSmpDataOffset = 64;
inline constexpr size_t kSmpDataSize = 64;
inline constexpr size_t kSmpInitialPathOffset = 128;
inline constexpr size_t kSmpReturnPathOffset = 192;
inline constexpr size_t kSmpPathSize = 64;
/// IBA 14.2.1.2: paths hold 64 entries and entry 0 is unused: at most 63 hops.
inline constexpr uint8_t kMaxDrHops = 63;
/// IBA 4.1.3: 0xFFFF, the permissive LID.
inline constexpr uint16_t kPermissiveLid = 0xffff;
inline constexpr uint16_t kMaxUnicastLid = 0xbfff;
inline constexpr uint16_t kDirectionBit = 0x8000;  // IBA 14.2.1.2: D in Status

/// A unicast LID (IBA 4.1.3): 1..0xBFFF.
constexpr bool is_unicast_lid(uint32_t lid) noexcept { return lid >= 1 && lid <= kMaxUnicastLid; }

struct Smp : MadHeaderFields<Smp> {
  std::array<uint8_t, kMadSize> bytes{};

  /// Parses exactly 256 bytes; nullopt for any other length.
  static std::optional<Smp> from_bytes(const uint8_t* p, size_t len) noexcept {
    if (!p || len != kMadSize) return std::nullopt;
    Smp s;
    std::memcpy(s.bytes.data(), p, kMadSize);
    return s;
  }

  bool is_directed() const noexcept { return mgmt_class() == MgmtClass::kSubnDirected; }

  /// The status without the D bit for DR SMPs (IBA 14.2.1.2: 15 bits), the
  /// whole word otherwise.
  MadStatus status() const noexcept {
    return MadStatus(is_directed() ? status_word() & ~kDirectionBit : status_word());
  }
  void set_status(MadStatus s) noexcept {
    const uint16_t mask = is_directed() ? uint16_t(~kDirectionBit) : uint16_t(0xffff);
    set_status_word(uint16_t((status_word() & ~mask) | (uint16_t(s) & mask)));
  }

  // Directed-route fields (IBA 14.2.1.2).
  /// D bit: false outbound (to the destination), true on the way back.
  bool direction() const noexcept { return status_word() & kDirectionBit; }
  void set_direction(bool returning) noexcept {
    set_status_word(returning ? status_word() | kDirectionBit : status_word() & ~kDirectionBit);
  }
  uint8_t hop_pointer() const noexcept { return bytes[6]; }
  void set_hop_pointer(uint8_t v) noexcept { bytes[6] = v; }
  uint8_t hop_count() const noexcept { return bytes[7]; }
  void set_hop_count(uint8_t v) noexcept { bytes[7] = v; }
  uint16_t dr_slid() const noexcept { return load_be16(&bytes[32]); }
  void set_dr_slid(uint16_t v) noexcept { store_be16(&bytes[32], v); }
  uint16_t dr_dlid() const noexcept { return load_be16(&bytes[34]); }
  void set_dr_dlid(uint16_t v) noexcept { store_be16(&bytes[34], v); }
  /// Path entries; index must be < 64 (callers range-check the hop pointer).
  uint8_t initial_path(size_t i) const noexcept { return bytes[kSmpInitialPathOffset + (i & 63)]; }
  void set_initial_path(size_t i, uint8_t port) noexcept {
    bytes[kSmpInitialPathOffset + (i & 63)] = port;
  }
  uint8_t return_path(size_t i) const noexcept { return bytes[kSmpReturnPathOffset + (i & 63)]; }
  void set_return_path(size_t i, uint8_t port) noexcept {
    bytes[kSmpReturnPathOffset + (i & 63)] = port;
  }

  // Common to both forms.
  uint64_t m_key() const noexcept { return load_be64(&bytes[24]); }
  void set_m_key(uint64_t v) noexcept { store_be64(&bytes[24], v); }
  const uint8_t* data() const noexcept { return &bytes[kSmpDataOffset]; }
  uint8_t* data() noexcept { return &bytes[kSmpDataOffset]; }

  /// Copies an attribute (any of smp_attributes.h) out of the data area.
  template <typename A>
  A get_attr() const noexcept {
    static_assert(sizeof(A) <= kSmpDataSize && std::is_trivially_copyable_v<A>);
    A a;
    std::memcpy(a.bytes.data(), data(), sizeof(a.bytes));
    return a;
  }
  /// Replaces the data area with an attribute, zero-padded to 64 bytes.
  template <typename A>
  void set_attr(const A& a) noexcept {
    static_assert(sizeof(A) <= kSmpDataSize && std::is_trivially_copyable_v<A>);
    std::memset(data(), 0, kSmpDataSize);
    std::memcpy(data(), a.bytes.data(), sizeof(a.bytes));
  }

  /// A Get/Set request with everything else zero: a LID-routed SMP.
  static Smp make_lid_routed(Method m, AttrId attr, uint32_t attr_mod, uint64_t tid) noexcept;
  /// A DR request along `path` (path[0] = first egress port, at most 63
  /// entries; longer paths are truncated to 63 hops). DrSLID and DrDLID are
  /// permissive: the whole route is directed (IBA 14.2.2).
  static Smp make_directed(Method m, AttrId attr, uint32_t attr_mod, uint64_t tid,
                           const uint8_t* path, size_t hops) noexcept;
};
static_assert(sizeof(Smp) == kMadSize);
static_assert(std::is_trivially_copyable_v<Smp>);
static_assert(std::is_standard_layout_v<Smp>);

}  // namespace ibemu::mad
