#pragma once
// Communication management (IBA 12): the CM messages carried in MADs of class
// 0x07, version 2, method Send, each with one accessor per field at the bit
// offset and width of the spec's message table (IBA 12.6). Offsets count from
// the start of the message, which is the MAD's data area (byte 24 of the MAD).
// Shared by the daemon (which routes CM MADs to the process that owns a
// connection) and the rdma_cm library (which runs the protocol).
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/mad/bits.h"
#include "common/mad/mad.h"

namespace ibemu::mad::cm {

inline constexpr uint8_t kClassVersion = 2;                        // IBA 12.6: CM ClassVersion
inline constexpr size_t kMessageSize = kMadSize - kMadHeaderSize;  // 232

/// IBA 12.6, Table 95: the CM's attribute IDs.
enum class Attr : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};

/// IBA 12.6.7.2, Table 103: REJ reasons ibemu sends or expects.
enum class RejectReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortRedirect = 24,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerReject = 28,
  kRnrRetryCount = 29,
  kDuplicateLocalCommId = 30,
  kUnsupportedClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
};

/// REJ's and MRA's "message rejected / MRAed" field (IBA 12.6.7, 12.6.6).
enum class MessageKind : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

/// IBA 12.11.2, Table 112: SIDR_REP status.
enum class SidrStatus : uint8_t {
  kValid = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

/// The fields of every message but SIDR's: the sender's and receiver's
/// communication IDs come first (IBA 12.6.1).
#define IBEMU_CM_COMM_IDS                         \
  IBEMU_MAD_FIELD(uint32_t, local_comm_id, 0, 32) \
  IBEMU_MAD_FIELD(uint32_t, remote_comm_id, 32, 32)

/// A message's private data: the bytes from `Offset` to the end.
template <size_t Offset>
struct PrivateDataArea {
  static constexpr size_t kPrivateDataOffset = Offset;
  static constexpr size_t kPrivateDataSize = kMessageSize - Offset;
};

/// IBA 12.6.5, Table 99: REQ. The primary path's GIDs are bytes 56 and 72.
struct Req : PrivateDataArea<140> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_MAD_FIELD(uint32_t, local_comm_id, 0, 32)
  IBEMU_MAD_FIELD(uint64_t, service_id, 64, 64)
  IBEMU_MAD_FIELD(uint64_t, local_ca_guid, 128, 64)
  IBEMU_MAD_FIELD(uint32_t, local_qkey, 224, 32)
  IBEMU_MAD_FIELD(uint32_t, local_qpn, 256, 24)
  IBEMU_MAD_FIELD(uint8_t, responder_resources, 280, 8)
  IBEMU_MAD_FIELD(uint32_t, local_eecn, 288, 24)
  IBEMU_MAD_FIELD(uint8_t, initiator_depth, 312, 8)
  IBEMU_MAD_FIELD(uint32_t, remote_eecn, 320, 24)
  IBEMU_MAD_FIELD(uint8_t, remote_cm_response_timeout, 344, 5)
  IBEMU_MAD_FIELD(uint8_t, transport_service_type, 349, 2)  // 0 RC, 1 UC, 3 XRC
  IBEMU_MAD_FIELD(bool, end_to_end_flow_control, 351, 1)
  IBEMU_MAD_FIELD(uint32_t, starting_psn, 352, 24)
  IBEMU_MAD_FIELD(uint8_t, local_cm_response_timeout, 376, 5)
  IBEMU_MAD_FIELD(uint8_t, retry_count, 381, 3)
  IBEMU_MAD_FIELD(uint16_t, partition_key, 384, 16)
  IBEMU_MAD_FIELD(uint8_t, path_mtu, 400, 4)
  IBEMU_MAD_FIELD(bool, rdc_exists, 404, 1)
  IBEMU_MAD_FIELD(uint8_t, rnr_retry_count, 405, 3)
  IBEMU_MAD_FIELD(uint8_t, max_cm_retries, 408, 4)
  IBEMU_MAD_FIELD(bool, srq, 412, 1)
  IBEMU_MAD_FIELD(uint8_t, extended_transport_type, 413, 3)
  IBEMU_MAD_FIELD(uint16_t, primary_local_lid, 416, 16)
  IBEMU_MAD_FIELD(uint16_t, primary_remote_lid, 432, 16)
  IBEMU_MAD_FIELD(uint32_t, primary_flow_label, 704, 20)
  IBEMU_MAD_FIELD(uint8_t, primary_packet_rate, 730, 6)
  IBEMU_MAD_FIELD(uint8_t, primary_traffic_class, 736, 8)
  IBEMU_MAD_FIELD(uint8_t, primary_hop_limit, 744, 8)
  IBEMU_MAD_FIELD(uint8_t, primary_sl, 752, 4)
  IBEMU_MAD_FIELD(bool, primary_subnet_local, 756, 1)
  IBEMU_MAD_FIELD(uint8_t, primary_local_ack_timeout, 760, 5)
  uint8_t* primary_local_gid() noexcept { return bytes.data() + 56; }
  const uint8_t* primary_local_gid() const noexcept { return bytes.data() + 56; }
  uint8_t* primary_remote_gid() noexcept { return bytes.data() + 72; }
  const uint8_t* primary_remote_gid() const noexcept { return bytes.data() + 72; }
};

/// IBA 12.6.6, Table 100: MRA.
struct Mra : PrivateDataArea<10> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
  IBEMU_MAD_FIELD(uint8_t, message_mraed, 64, 2)
  IBEMU_MAD_FIELD(uint8_t, service_timeout, 72, 5)
};

/// IBA 12.6.7, Table 101: REJ. The ARI is bytes 12-83.
struct Rej : PrivateDataArea<84> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
  IBEMU_MAD_FIELD(uint8_t, message_rejected, 64, 2)
  IBEMU_MAD_FIELD(uint8_t, reject_info_length, 72, 7)
  IBEMU_MAD_FIELD(uint16_t, reason, 80, 16)
};

/// IBA 12.6.8, Table 104: REP.
struct Rep : PrivateDataArea<36> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
  IBEMU_MAD_FIELD(uint32_t, local_qkey, 64, 32)
  IBEMU_MAD_FIELD(uint32_t, local_qpn, 96, 24)
  IBEMU_MAD_FIELD(uint32_t, local_eecn, 128, 24)
  IBEMU_MAD_FIELD(uint32_t, starting_psn, 160, 24)
  IBEMU_MAD_FIELD(uint8_t, responder_resources, 192, 8)
  IBEMU_MAD_FIELD(uint8_t, initiator_depth, 200, 8)
  IBEMU_MAD_FIELD(uint8_t, target_ack_delay, 208, 5)
  IBEMU_MAD_FIELD(uint8_t, failover_accepted, 213, 2)
  IBEMU_MAD_FIELD(bool, end_to_end_flow_control, 215, 1)
  IBEMU_MAD_FIELD(uint8_t, rnr_retry_count, 216, 3)
  IBEMU_MAD_FIELD(bool, srq, 219, 1)
  IBEMU_MAD_FIELD(uint64_t, local_ca_guid, 224, 64)
};

/// IBA 12.6.9, Table 105: RTU.
struct Rtu : PrivateDataArea<8> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
};

/// IBA 12.6.10, Table 106: DREQ.
struct Dreq : PrivateDataArea<12> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
  IBEMU_MAD_FIELD(uint32_t, remote_qpn, 64, 24)
};

/// IBA 12.6.11, Table 107: DREP.
struct Drep : PrivateDataArea<8> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_CM_COMM_IDS
};

/// IBA 12.11.1, Table 111: SIDR_REQ.
struct SidrReq : PrivateDataArea<16> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_MAD_FIELD(uint32_t, request_id, 0, 32)
  IBEMU_MAD_FIELD(uint16_t, partition_key, 32, 16)
  IBEMU_MAD_FIELD(uint64_t, service_id, 64, 64)
};

/// IBA 12.11.2, Table 112: SIDR_REP. ClassPortInfo is bytes 24-95.
struct SidrRep : PrivateDataArea<96> {
  std::array<uint8_t, kMessageSize> bytes{};
  IBEMU_MAD_FIELD(uint32_t, request_id, 0, 32)
  IBEMU_MAD_FIELD(uint8_t, status, 32, 8)
  IBEMU_MAD_FIELD(uint8_t, additional_info_length, 40, 8)
  IBEMU_MAD_FIELD(uint32_t, qpn, 64, 24)
  IBEMU_MAD_FIELD(uint64_t, service_id, 96, 64)
  IBEMU_MAD_FIELD(uint32_t, qkey, 160, 32)
};

#undef IBEMU_CM_COMM_IDS

/// Copies `len` bytes of private data into a message (the rest stays zero);
/// false when they do not fit.
template <typename Message>
bool set_private_data(Message& m, const void* data, size_t len) noexcept {
  if (len > Message::kPrivateDataSize) return false;
  if (len) std::memcpy(m.bytes.data() + Message::kPrivateDataOffset, data, len);
  return true;
}
template <typename Message>
const uint8_t* private_data(const Message& m) noexcept {
  return m.bytes.data() + Message::kPrivateDataOffset;
}

/// A whole CM MAD (256 bytes): the common header for `attr` and `tid`, then
/// the message.
template <typename Message>
std::vector<uint8_t> build_mad(Attr attr, uint64_t tid, const Message& m) {
  std::vector<uint8_t> mad(kMadSize, 0);
  MadHeader h;
  h.set_base_version(kBaseVersion);
  h.set_mgmt_class(MgmtClass::kCommMgt);
  h.set_class_version(kClassVersion);
  h.set_method(Method::kSend);
  h.set_tid(tid);
  h.set_attr_id(AttrId(uint16_t(attr)));
  std::memcpy(mad.data(), h.bytes.data(), kMadHeaderSize);
  std::memcpy(mad.data() + kMadHeaderSize, m.bytes.data(), kMessageSize);
  return mad;
}

/// The message of a CM MAD of at least 256 bytes.
template <typename Message>
Message parse_message(const uint8_t* mad) noexcept {
  Message m;
  std::memcpy(m.bytes.data(), mad + kMadHeaderSize, kMessageSize);
  return m;
}

/// The attribute of a CM MAD.
inline Attr attr_of(const uint8_t* mad) noexcept { return Attr(load_be16(mad + 16)); }

/// The IB service ID of an IP port space's port (IBA annex A3.2).
inline constexpr uint64_t ip_service_id(int ps, uint16_t port) noexcept {
  return (uint64_t(ps) << 16) | port;
}

}  // namespace ibemu::mad::cm
