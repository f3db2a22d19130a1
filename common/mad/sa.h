#pragma once
// Subnet administration (IBA 15): the SA MAD's layout and the records ibemu's
// SA serves, each with one accessor per field at the bit offset and width of
// the spec's table (IBA 15.2.5), like the SMP attributes.
#include <array>
#include <cstdint>

#include "common/mad/bits.h"
#include "common/mad/mad.h"

namespace ibemu::mad {

inline constexpr uint8_t kSaClassVersion = 2;  // IBA 15.2.1.1
inline constexpr uint32_t kQp1Qkey = 0x80010000;

/// IBA 15.2.1.1: the SA MAD: common header, RMPP header, SA header, data.
inline constexpr size_t kSaRmppOffset = 24;
inline constexpr size_t kSaSmKeyOffset = 36;
inline constexpr size_t kSaAttrOffsetOffset = 44;  // AttributeOffset, in 8-byte words
inline constexpr size_t kSaComponentMaskOffset = 48;
inline constexpr size_t kSaDataOffset = 56;
inline constexpr size_t kSaDataSize = kMadSize - kSaDataOffset;  // 200

/// IBA 15.2.5: SA attribute IDs.
enum class SaAttr : uint16_t {
  kClassPortInfo = 0x0001,
  kNodeRecord = 0x0011,
  kPortInfoRecord = 0x0012,
  kServiceRecord = 0x0031,
  kPathRecord = 0x0035,
  kMcMemberRecord = 0x0038,
};

/// IBA 15.2.1.3 Table 187: SA-specific MAD status, bits 8-15 of Status.
enum class SaStatus : uint16_t {
  kOk = 0,
  kNoResources = 0x0100,
  kReqInvalid = 0x0200,
  kNoRecords = 0x0300,
  kTooManyRecords = 0x0400,
  kInvalidGid = 0x0500,
  kInsufficientComponents = 0x0600,
  kDenied = 0x0700,
};

/// IBA 15.2.5.2 NodeRecord: LID, reserved, NodeInfo (40 bytes),
/// NodeDescription (64 bytes); 108 bytes, 112 with the padding.
inline constexpr size_t kNodeRecordSize = 112;
namespace node_mask {
inline constexpr uint64_t kLid = 1ull << 0, kNodeType = 1ull << 4, kNodeGuid = 1ull << 7,
                          kPortGuid = 1ull << 8;
}

/// IBA 15.2.5.16 PathRecord (64 bytes). ComponentMask bit n is field n of
/// the table, counting ServiceID as two (bits 0 and 1).
struct PathRecord {
  std::array<uint8_t, 64> bytes{};
  IBEMU_MAD_FIELD(uint64_t, service_id, 0, 64)
  IBEMU_MAD_FIELD(uint16_t, dlid, 320, 16)
  IBEMU_MAD_FIELD(uint16_t, slid, 336, 16)
  IBEMU_MAD_FIELD(bool, raw_traffic, 352, 1)
  IBEMU_MAD_FIELD(uint32_t, flow_label, 356, 20)
  IBEMU_MAD_FIELD(uint8_t, hop_limit, 376, 8)
  IBEMU_MAD_FIELD(uint8_t, tclass, 384, 8)
  IBEMU_MAD_FIELD(bool, reversible, 392, 1)
  IBEMU_MAD_FIELD(uint8_t, numb_path, 393, 7)
  IBEMU_MAD_FIELD(uint16_t, pkey, 400, 16)
  IBEMU_MAD_FIELD(uint16_t, qos_class, 416, 12)
  IBEMU_MAD_FIELD(uint8_t, sl, 428, 4)
  IBEMU_MAD_FIELD(uint8_t, mtu_selector, 432, 2)
  IBEMU_MAD_FIELD(uint8_t, mtu, 434, 6)
  IBEMU_MAD_FIELD(uint8_t, rate_selector, 440, 2)
  IBEMU_MAD_FIELD(uint8_t, rate, 442, 6)
  IBEMU_MAD_FIELD(uint8_t, packet_life_time_selector, 448, 2)
  IBEMU_MAD_FIELD(uint8_t, packet_life_time, 450, 6)
  IBEMU_MAD_FIELD(uint8_t, preference, 456, 8)
  uint8_t* dgid() noexcept { return bytes.data() + 8; }
  const uint8_t* dgid() const noexcept { return bytes.data() + 8; }
  uint8_t* sgid() noexcept { return bytes.data() + 24; }
  const uint8_t* sgid() const noexcept { return bytes.data() + 24; }
};

namespace path_mask {
inline constexpr uint64_t kDgid = 1ull << 2, kSgid = 1ull << 3, kDlid = 1ull << 4,
                          kSlid = 1ull << 5, kNumbPath = 1ull << 12, kPkey = 1ull << 13,
                          kSl = 1ull << 15, kMtuSelector = 1ull << 16, kMtu = 1ull << 17;
}

/// IBA 15.2.5.14 ServiceRecord (176 bytes): a service registered with the
/// SA, found by its ServiceID or ServiceName.
struct ServiceRecord {
  static constexpr size_t kNameSize = 64;
  std::array<uint8_t, 176> bytes{};
  IBEMU_MAD_FIELD(uint64_t, service_id, 0, 64)
  IBEMU_MAD_FIELD(uint16_t, service_pkey, 192, 16)
  IBEMU_MAD_FIELD(uint32_t, service_lease, 224, 32)
  uint8_t* service_gid() noexcept { return bytes.data() + 8; }
  const uint8_t* service_gid() const noexcept { return bytes.data() + 8; }
  uint8_t* service_name() noexcept { return bytes.data() + 48; }
  const uint8_t* service_name() const noexcept { return bytes.data() + 48; }
};

namespace service_mask {
inline constexpr uint64_t kServiceId = 1ull << 0, kServiceGid = 1ull << 1, kServicePkey = 1ull << 2,
                          kServiceName = 1ull << 6;
}

/// IBA 15.2.5.17 MCMemberRecord (52 bytes; 56 with the padding to 8 bytes).
struct McMemberRecord {
  std::array<uint8_t, 56> bytes{};
  IBEMU_MAD_FIELD(uint32_t, qkey, 256, 32)
  IBEMU_MAD_FIELD(uint16_t, mlid, 288, 16)
  IBEMU_MAD_FIELD(uint8_t, mtu_selector, 304, 2)
  IBEMU_MAD_FIELD(uint8_t, mtu, 306, 6)
  IBEMU_MAD_FIELD(uint8_t, tclass, 312, 8)
  IBEMU_MAD_FIELD(uint16_t, pkey, 320, 16)
  IBEMU_MAD_FIELD(uint8_t, rate_selector, 336, 2)
  IBEMU_MAD_FIELD(uint8_t, rate, 338, 6)
  IBEMU_MAD_FIELD(uint8_t, packet_life_time_selector, 344, 2)
  IBEMU_MAD_FIELD(uint8_t, packet_life_time, 346, 6)
  IBEMU_MAD_FIELD(uint8_t, sl, 352, 4)
  IBEMU_MAD_FIELD(uint32_t, flow_label, 356, 20)
  IBEMU_MAD_FIELD(uint8_t, hop_limit, 376, 8)
  IBEMU_MAD_FIELD(uint8_t, scope, 384, 4)
  IBEMU_MAD_FIELD(uint8_t, join_state, 388, 4)
  IBEMU_MAD_FIELD(bool, proxy_join, 392, 1)
  uint8_t* mgid() noexcept { return bytes.data(); }
  const uint8_t* mgid() const noexcept { return bytes.data(); }
  uint8_t* port_gid() noexcept { return bytes.data() + 16; }
  const uint8_t* port_gid() const noexcept { return bytes.data() + 16; }
};

namespace mcmember_mask {
inline constexpr uint64_t kMgid = 1ull << 0, kPortGid = 1ull << 1, kQkey = 1ull << 2,
                          kMlid = 1ull << 3, kMtuSelector = 1ull << 4, kMtu = 1ull << 5,
                          kTclass = 1ull << 6, kPkey = 1ull << 7, kRateSelector = 1ull << 8,
                          kRate = 1ull << 9, kPacketLifeTimeSelector = 1ull << 10,
                          kPacketLifeTime = 1ull << 11, kSl = 1ull << 12, kFlowLabel = 1ull << 13,
                          kHopLimit = 1ull << 14, kScope = 1ull << 15, kJoinState = 1ull << 16;
}

/// IBA 15.2.5.17: MCMemberRecord:JoinState bits.
inline constexpr uint8_t kJoinFullMember = 0x1;

}  // namespace ibemu::mad
