#pragma once
// The subnet management attributes an SMA answers and an SM sets (IBA 14.2.5).
// Each struct is the attribute's bytes as they sit in the SMP data area, with
// one accessor per field at the bit offset and width of the spec's table, so
// a field can be checked against its table row by reading one line.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/mad/bits.h"
#include "common/state_page.h"

namespace ibemu::mad {

/// IBA 14.2.5.3 NodeInfo:NodeType.
enum class NodeType : uint8_t { kCa = 1, kSwitch = 2, kRouter = 3 };
/// IBA 14.2.5.13 SMInfo:SMState.
enum class SmState : uint8_t { kNotActive = 0, kDiscovering = 1, kStandby = 2, kMaster = 3 };

/// IBA 14.2.5.6 PortInfo:LinkWidth* bits.
inline constexpr uint8_t kLinkWidth1x = 0x01;
inline constexpr uint8_t kLinkWidth4x = 0x02;
inline constexpr uint8_t kLinkWidth8x = 0x04;
inline constexpr uint8_t kLinkWidth12x = 0x08;
/// PortInfo:LinkSpeed* bits (SDR 2.5, DDR 5, QDR 10 Gb/s per lane).
inline constexpr uint8_t kLinkSpeedSdr = 0x1;
inline constexpr uint8_t kLinkSpeedDdr = 0x2;
inline constexpr uint8_t kLinkSpeedQdr = 0x4;
/// PortInfo:LinkSpeedExt* bits (FDR 14.0625, EDR 25.78125, HDR 53.125 Gb/s).
inline constexpr uint8_t kLinkSpeedExtFdr = 0x1;
inline constexpr uint8_t kLinkSpeedExtEdr = 0x2;
inline constexpr uint8_t kLinkSpeedExtHdr = 0x4;

/// IBA 14.2.5.6 PortInfo:CapabilityMask bits used here.
inline constexpr uint32_t kCapIsSm = 1u << 1;
inline constexpr uint32_t kCapIsNoticeSupported = 1u << 2;
inline constexpr uint32_t kCapIsTrapSupported = 1u << 3;
inline constexpr uint32_t kCapIsSmDisabled = 1u << 10;
inline constexpr uint32_t kCapIsSystemImageGuidSupported = 1u << 11;
inline constexpr uint32_t kCapIsExtendedSpeedsSupported = 1u << 14;
inline constexpr uint32_t kCapIsCapabilityMask2Supported = 1u << 15;
inline constexpr uint32_t kCapIsCommunicationManagementSupported = 1u << 16;
inline constexpr uint32_t kCapIsClientReregistrationSupported = 1u << 25;

/// IBA 14.2.5.6 PortInfo:NeighborMTU/MTUCap: 1 = 256 ... 5 = 4096 bytes.
constexpr int mtu_bytes(uint8_t mtu_enum) noexcept {
  return mtu_enum >= 1 && mtu_enum <= 5 ? 128 << mtu_enum : 0;
}

/// IBA 14.2.5.2 NodeDescription: 64 bytes of UTF-8, NUL padded.
struct NodeDescription {
  std::array<uint8_t, 64> bytes{};
  /// The text up to the first NUL (never more than 64 bytes).
  std::string text() const;
  /// Stores at most 64 bytes of `s`, NUL padded.
  void set_text(std::string_view s) noexcept;
};

/// IBA 14.2.5.3 NodeInfo.
struct NodeInfo {
  std::array<uint8_t, 40> bytes{};
  IBEMU_MAD_FIELD(uint8_t, base_version, 0, 8)
  IBEMU_MAD_FIELD(uint8_t, class_version, 8, 8)
  IBEMU_MAD_FIELD(NodeType, node_type, 16, 8)
  IBEMU_MAD_FIELD(uint8_t, num_ports, 24, 8)
  IBEMU_MAD_FIELD(uint64_t, system_image_guid, 32, 64)
  IBEMU_MAD_FIELD(uint64_t, node_guid, 96, 64)
  IBEMU_MAD_FIELD(uint64_t, port_guid, 160, 64)
  IBEMU_MAD_FIELD(uint16_t, partition_cap, 224, 16)
  IBEMU_MAD_FIELD(uint16_t, device_id, 240, 16)
  IBEMU_MAD_FIELD(uint32_t, revision, 256, 32)
  IBEMU_MAD_FIELD(uint8_t, local_port_num, 288, 8)
  IBEMU_MAD_FIELD(uint32_t, vendor_id, 296, 24)
};

/// IBA 14.2.5.4 SwitchInfo.
struct SwitchInfo {
  std::array<uint8_t, 20> bytes{};
  IBEMU_MAD_FIELD(uint16_t, linear_fdb_cap, 0, 16)
  IBEMU_MAD_FIELD(uint16_t, random_fdb_cap, 16, 16)
  IBEMU_MAD_FIELD(uint16_t, multicast_fdb_cap, 32, 16)
  IBEMU_MAD_FIELD(uint16_t, linear_fdb_top, 48, 16)
  IBEMU_MAD_FIELD(uint8_t, default_port, 64, 8)
  IBEMU_MAD_FIELD(uint8_t, default_multicast_primary_port, 72, 8)
  IBEMU_MAD_FIELD(uint8_t, default_multicast_not_primary_port, 80, 8)
  IBEMU_MAD_FIELD(uint8_t, life_time_value, 88, 5)
  IBEMU_MAD_FIELD(bool, port_state_change, 93, 1)
  IBEMU_MAD_FIELD(uint8_t, optimized_sl_to_vl_mapping_programming, 94, 2)
  IBEMU_MAD_FIELD(uint16_t, lids_per_port, 96, 16)
  IBEMU_MAD_FIELD(uint16_t, partition_enforcement_cap, 112, 16)
  IBEMU_MAD_FIELD(bool, inbound_enforcement_cap, 128, 1)
  IBEMU_MAD_FIELD(bool, outbound_enforcement_cap, 129, 1)
  IBEMU_MAD_FIELD(bool, filter_raw_inbound_cap, 130, 1)
  IBEMU_MAD_FIELD(bool, filter_raw_outbound_cap, 131, 1)
  IBEMU_MAD_FIELD(bool, enhanced_port0, 132, 1)
  IBEMU_MAD_FIELD(uint16_t, multicast_fdb_top, 144, 16)
};

/// IBA 14.2.5.6 PortInfo.
struct PortInfo {
  std::array<uint8_t, 64> bytes{};
  IBEMU_MAD_FIELD(uint64_t, m_key, 0, 64)
  IBEMU_MAD_FIELD(uint64_t, gid_prefix, 64, 64)
  IBEMU_MAD_FIELD(uint16_t, lid, 128, 16)
  IBEMU_MAD_FIELD(uint16_t, master_sm_lid, 144, 16)
  IBEMU_MAD_FIELD(uint32_t, capability_mask, 160, 32)
  IBEMU_MAD_FIELD(uint16_t, diag_code, 192, 16)
  IBEMU_MAD_FIELD(uint16_t, m_key_lease_period, 208, 16)
  IBEMU_MAD_FIELD(uint8_t, local_port_num, 224, 8)
  IBEMU_MAD_FIELD(uint8_t, link_width_enabled, 232, 8)
  IBEMU_MAD_FIELD(uint8_t, link_width_supported, 240, 8)
  IBEMU_MAD_FIELD(uint8_t, link_width_active, 248, 8)
  IBEMU_MAD_FIELD(uint8_t, link_speed_supported, 256, 4)
  IBEMU_MAD_FIELD(PortState, port_state, 260, 4)
  IBEMU_MAD_FIELD(uint8_t, port_physical_state, 264, 4)
  IBEMU_MAD_FIELD(uint8_t, link_down_default_state, 268, 4)
  IBEMU_MAD_FIELD(uint8_t, m_key_protect_bits, 272, 2)
  IBEMU_MAD_FIELD(uint8_t, lmc, 277, 3)
  IBEMU_MAD_FIELD(uint8_t, link_speed_active, 280, 4)
  IBEMU_MAD_FIELD(uint8_t, link_speed_enabled, 284, 4)
  IBEMU_MAD_FIELD(uint8_t, neighbor_mtu, 288, 4)
  IBEMU_MAD_FIELD(uint8_t, master_sm_sl, 292, 4)
  IBEMU_MAD_FIELD(uint8_t, vl_cap, 296, 4)
  IBEMU_MAD_FIELD(uint8_t, init_type, 300, 4)
  IBEMU_MAD_FIELD(uint8_t, vl_high_limit, 304, 8)
  IBEMU_MAD_FIELD(uint8_t, vl_arbitration_high_cap, 312, 8)
  IBEMU_MAD_FIELD(uint8_t, vl_arbitration_low_cap, 320, 8)
  IBEMU_MAD_FIELD(uint8_t, init_type_reply, 328, 4)
  IBEMU_MAD_FIELD(uint8_t, mtu_cap, 332, 4)
  IBEMU_MAD_FIELD(uint8_t, vl_stall_count, 336, 3)
  IBEMU_MAD_FIELD(uint8_t, hoq_life, 339, 5)
  IBEMU_MAD_FIELD(uint8_t, operational_vls, 344, 4)
  IBEMU_MAD_FIELD(bool, partition_enforcement_inbound, 348, 1)
  IBEMU_MAD_FIELD(bool, partition_enforcement_outbound, 349, 1)
  IBEMU_MAD_FIELD(bool, filter_raw_inbound, 350, 1)
  IBEMU_MAD_FIELD(bool, filter_raw_outbound, 351, 1)
  IBEMU_MAD_FIELD(uint16_t, m_key_violations, 352, 16)
  IBEMU_MAD_FIELD(uint16_t, p_key_violations, 368, 16)
  IBEMU_MAD_FIELD(uint16_t, q_key_violations, 384, 16)
  IBEMU_MAD_FIELD(uint8_t, guid_cap, 400, 8)
  IBEMU_MAD_FIELD(bool, client_reregister, 408, 1)
  IBEMU_MAD_FIELD(uint8_t, multicast_pkey_trap_suppression_enabled, 409, 2)
  IBEMU_MAD_FIELD(uint8_t, subnet_timeout, 411, 5)
  IBEMU_MAD_FIELD(uint8_t, resp_time_value, 419, 5)
  IBEMU_MAD_FIELD(uint8_t, local_phy_errors, 424, 4)
  IBEMU_MAD_FIELD(uint8_t, overrun_errors, 428, 4)
  IBEMU_MAD_FIELD(uint16_t, max_credit_hint, 432, 16)
  IBEMU_MAD_FIELD(uint32_t, link_round_trip_latency, 456, 24)
  IBEMU_MAD_FIELD(uint16_t, capability_mask2, 480, 16)
  IBEMU_MAD_FIELD(uint8_t, link_speed_ext_active, 496, 4)
  IBEMU_MAD_FIELD(uint8_t, link_speed_ext_supported, 500, 4)
  IBEMU_MAD_FIELD(uint8_t, link_speed_ext_enabled, 507, 5)
};

/// IBA 14.2.5.5 GUIDInfo: a block of 8 GUIDs; AttributeModifier = block.
struct GuidInfo {
  std::array<uint8_t, 64> bytes{};
  uint64_t guid(size_t i) const noexcept { return get_field(bytes.data(), slot(i)); }
  void set_guid(size_t i, uint64_t g) noexcept { set_field(bytes.data(), slot(i), g); }

 private:
  static constexpr Field slot(size_t i) noexcept { return Field{uint16_t((i & 7) * 64), 64}; }
};

/// IBA 14.2.5.7 P_KeyTable: a block of 32 P_Keys; AttributeModifier bits
/// 0-15 = block, bits 16-23 = port (switches).
struct PKeyTable {
  static constexpr size_t kEntries = 32;
  std::array<uint8_t, 64> bytes{};
  uint16_t pkey(size_t i) const noexcept { return uint16_t(get_field(bytes.data(), slot(i))); }
  void set_pkey(size_t i, uint16_t v) noexcept { set_field(bytes.data(), slot(i), v); }

 private:
  static constexpr Field slot(size_t i) noexcept { return Field{uint16_t((i & 31) * 16), 16}; }
};

/// IBA 14.2.5.10 LinearForwardingTable: egress ports of 64 consecutive LIDs;
/// AttributeModifier = block number (LIDs block*64 .. block*64+63).
struct LinearForwardingTable {
  static constexpr size_t kEntries = 64;
  std::array<uint8_t, 64> bytes{};
  uint8_t port(size_t i) const noexcept { return bytes[i & 63]; }
  void set_port(size_t i, uint8_t p) noexcept { bytes[i & 63] = p; }
};

/// IBA 14.2.5.13 SMInfo.
struct SmInfo {
  std::array<uint8_t, 21> bytes{};
  IBEMU_MAD_FIELD(uint64_t, guid, 0, 64)
  IBEMU_MAD_FIELD(uint64_t, sm_key, 64, 64)
  IBEMU_MAD_FIELD(uint32_t, act_count, 128, 32)
  IBEMU_MAD_FIELD(uint8_t, priority, 160, 4)
  IBEMU_MAD_FIELD(SmState, sm_state, 164, 4)
};

static_assert(sizeof(NodeDescription) == 64 && std::is_trivially_copyable_v<NodeDescription>);
static_assert(sizeof(NodeInfo) == 40 && std::is_trivially_copyable_v<NodeInfo>);
static_assert(sizeof(SwitchInfo) == 20 && std::is_trivially_copyable_v<SwitchInfo>);
static_assert(sizeof(PortInfo) == 64 && std::is_trivially_copyable_v<PortInfo>);
static_assert(sizeof(GuidInfo) == 64 && std::is_trivially_copyable_v<GuidInfo>);
static_assert(sizeof(PKeyTable) == 64 && std::is_trivially_copyable_v<PKeyTable>);
static_assert(sizeof(LinearForwardingTable) == 64 &&
              std::is_trivially_copyable_v<LinearForwardingTable>);
static_assert(sizeof(SmInfo) == 21 && std::is_trivially_copyable_v<SmInfo>);

std::string to_string(NodeType t);
std::string to_string(SmState s);
/// The IBA name of an SM state in lower case: "notactive", "discovering",
/// "standby" or "master", as the control protocol's sm_info op and `ibemu
/// status --json` spell it.
std::string sm_state_keyword(SmState s);
/// The state a keyword names, in any case; nullopt for anything else.
std::optional<SmState> parse_sm_state(std::string_view keyword);

}  // namespace ibemu::mad

namespace ibemu {
/// "Down", "Init", "Armed", "Active" as ibstat prints them (IBA 14.2.5.6).
std::string to_string(PortState s);
/// "Sleep", "Polling", "Disabled", "LinkUp" (IBA 14.2.5.6 PortPhysicalState).
std::string to_string(PhysState s);
}  // namespace ibemu
