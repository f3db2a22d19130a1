#pragma once
// Management datagrams: the 24-byte common MAD header (IBA 13.4.3), the
// method, class, attribute and status codes, and their names.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/mad/bits.h"

namespace ibemu::mad {

inline constexpr size_t kMadSize = 256;         // IBA 13.4.2: every MAD is 256 bytes
inline constexpr size_t kMadHeaderSize = 24;    // IBA 13.4.3
inline constexpr uint8_t kBaseVersion = 1;      // IBA 13.4.3 BaseVersion
inline constexpr uint8_t kSmpClassVersion = 1;  // IBA 14.2.1.1 ClassVersion of SMPs

/// IBA 13.4.4: management classes this code knows by name.
enum class MgmtClass : uint8_t {
  kSubnLid = 0x01,  // LID-routed SMP
  kSubnAdm = 0x03,  // SA
  kPerfMgt = 0x04,
  kBoardMgt = 0x05,
  kDevMgt = 0x06,
  kCommMgt = 0x07,
  kSnmp = 0x08,
  kSubnDirected = 0x81,  // directed-route SMP
};

/// Whether a MgmtClass is a subnet management class (an SMP, QP0's).
inline bool is_smp_class(uint8_t c) {
  return c == uint8_t(MgmtClass::kSubnLid) || c == uint8_t(MgmtClass::kSubnDirected);
}

/// IBA 13.4.5 (and 15.2.3 for the SA-only ones). The byte holds the
/// R bit (0x80) too, so responses are distinct values.
enum class Method : uint8_t {
  kGet = 0x01,
  kSet = 0x02,
  kSend = 0x03,
  kTrap = 0x05,
  kReport = 0x06,
  kTrapRepress = 0x07,
  kGetTable = 0x12,
  kGetTraceTable = 0x13,
  kGetMulti = 0x14,
  kDelete = 0x15,
  kGetResp = 0x81,
  kReportResp = 0x86,
  kGetTableResp = 0x92,
  kGetMultiResp = 0x94,
  kDeleteResp = 0x95,
};
inline constexpr uint8_t kMethodResponseBit = 0x80;  // IBA 13.4.5: the R bit

/// IBA 14.2.5: subnet management attributes.
enum class AttrId : uint16_t {
  kClassPortInfo = 0x0001,
  kNotice = 0x0002,
  kInformInfo = 0x0003,
  kNodeDescription = 0x0010,
  kNodeInfo = 0x0011,
  kSwitchInfo = 0x0012,
  kGuidInfo = 0x0014,
  kPortInfo = 0x0015,
  kPKeyTable = 0x0016,
  kSlToVlMappingTable = 0x0017,
  kVlArbitrationTable = 0x0018,
  kLinearForwardingTable = 0x0019,
  kRandomForwardingTable = 0x001a,
  kMulticastForwardingTable = 0x001b,
  kSmInfo = 0x0020,
  kVendorDiag = 0x0030,
  kLedInfo = 0x0031,
};

/// IBA 13.4.7: the MAD status word. Bit 0 busy, bit 1 redirect,
/// bits 2-4 the invalid-field code; the enum names the common combinations.
enum class MadStatus : uint16_t {
  kOk = 0x0000,
  kBusy = 0x0001,
  kRedirect = 0x0002,
  kBadVersion = 0x0004,             // code 1: class or version not supported
  kUnsupportedMethod = 0x0008,      // code 2
  kUnsupportedMethodAttr = 0x000c,  // code 3: method/attribute combination
  kInvalidField = 0x001c,           // code 7: a field or the modifier is invalid
};

/// Names as the spec writes them; unknown values print in hex.
std::string to_string(MgmtClass c);
std::string to_string(Method m);
std::string to_string(AttrId a);
std::string to_string(MadStatus s);

/// Byte-wise big-endian helpers for whole-byte fields at byte offsets.
constexpr uint16_t load_be16(const uint8_t* p) noexcept { return uint16_t(p[0] << 8 | p[1]); }
constexpr uint32_t load_be32(const uint8_t* p) noexcept {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
constexpr uint64_t load_be64(const uint8_t* p) noexcept {
  return uint64_t(load_be32(p)) << 32 | load_be32(p + 4);
}
constexpr void store_be16(uint8_t* p, uint16_t v) noexcept {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
constexpr void store_be32(uint8_t* p, uint32_t v) noexcept {
  store_be16(p, uint16_t(v >> 16));
  store_be16(p + 2, uint16_t(v));
}
constexpr void store_be64(uint8_t* p, uint64_t v) noexcept {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

/// The common MAD header fields (IBA 13.4.3), shared by every MAD
/// layout through CRTP: the derived struct owns `bytes`, at least 24 long.
template <typename Derived>
class MadHeaderFields {
 public:
  uint8_t base_version() const noexcept { return b()[0]; }
  void set_base_version(uint8_t v) noexcept { b()[0] = v; }
  MgmtClass mgmt_class() const noexcept { return MgmtClass(b()[1]); }
  void set_mgmt_class(MgmtClass v) noexcept { b()[1] = uint8_t(v); }
  uint8_t class_version() const noexcept { return b()[2]; }
  void set_class_version(uint8_t v) noexcept { b()[2] = v; }
  /// R bit and method together (IBA 13.4.5), e.g. Method::kGetResp.
  Method method() const noexcept { return Method(b()[3]); }
  void set_method(Method v) noexcept { b()[3] = uint8_t(v); }
  bool is_response() const noexcept { return b()[3] & kMethodResponseBit; }
  /// The whole 16-bit Status word (for DR SMPs bit 15 is the D bit).
  uint16_t status_word() const noexcept { return load_be16(b() + 4); }
  void set_status_word(uint16_t v) noexcept { store_be16(b() + 4, v); }
  /// ClassSpecific (bytes 6-7): hop pointer and hop count in DR SMPs.
  uint16_t class_specific() const noexcept { return load_be16(b() + 6); }
  void set_class_specific(uint16_t v) noexcept { store_be16(b() + 6, v); }
  uint64_t tid() const noexcept { return load_be64(b() + 8); }
  void set_tid(uint64_t v) noexcept { store_be64(b() + 8, v); }
  AttrId attr_id() const noexcept { return AttrId(load_be16(b() + 16)); }
  void set_attr_id(AttrId v) noexcept { store_be16(b() + 16, uint16_t(v)); }
  uint32_t attr_mod() const noexcept { return load_be32(b() + 20); }
  void set_attr_mod(uint32_t v) noexcept { store_be32(b() + 20, v); }

 private:
  const uint8_t* b() const noexcept { return static_cast<const Derived*>(this)->bytes.data(); }
  uint8_t* b() noexcept { return static_cast<Derived*>(this)->bytes.data(); }
};

/// Just the common header, e.g. to look at a MAD of any class.
struct MadHeader : MadHeaderFields<MadHeader> {
  std::array<uint8_t, kMadHeaderSize> bytes{};
};
static_assert(sizeof(MadHeader) == kMadHeaderSize);
static_assert(std::is_trivially_copyable_v<MadHeader>);
static_assert(std::is_standard_layout_v<MadHeader>);

}  // namespace ibemu::mad
