#pragma once
// The vocabulary of the transport engine: work requests, completions, QP
// attributes. The numeric values equal the verbs ABI's (ibv_wc_status,
// ibv_wr_opcode, IBV_QP_* masks, ...) so the provider converts by cast; it
// static_asserts that. The engine itself never includes rdma-core.
#include <array>
#include <cstdint>

namespace ibemu::engine {

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kFatalErr = 19,
  kGeneralErr = 21,
};
const char* to_string(WcStatus);

enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kBindMw = 5,
  kLocalInv = 6,
  kRegMr = 0x20,  // the engine's own (fast registration), see below
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

enum class WrOpcode : uint8_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
  kAtomicCmpAndSwp = 5,
  kAtomicFetchAndAdd = 6,
  kLocalInv = 7,
  kBindMw = 8,
  kSendWithInv = 9,
  kRegMr = 0x20,  // the engine's own (fast registration), see below
};

// Fast registration (IB_WR_REG_MR) is a kernel verb: libibverbs has no such
// opcode, and the provider converts programs' opcodes by cast. Its engine
// value lies outside what the verbs ABI uses or reserves for the send queue
// (ibv_wr_opcode and ibv_wc_opcode below 0x10) and for receives (from
// IBV_WC_RECV, 0x80), so that no program's value is taken for it.
static_assert(static_cast<uint8_t>(WrOpcode::kRegMr) >= 0x10 &&
              static_cast<uint8_t>(WrOpcode::kRegMr) < 0x80);
static_assert(static_cast<uint8_t>(WcOpcode::kRegMr) >= 0x10 &&
              static_cast<uint8_t>(WcOpcode::kRegMr) < static_cast<uint8_t>(WcOpcode::kRecv));

enum SendFlag : uint32_t {
  kSendFence = 1,
  kSendSignaled = 2,
  kSendSolicited = 4,
  kSendInline = 8,
};

enum WcFlag : uint32_t { kWcGrh = 1, kWcWithImm = 2, kWcWithInv = 8 };

enum Access : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
  kAccessMwBind = 16,
  kAccessZeroBased = 32,
  kAccessOnDemand = 64,
  kAccessHugetlb = 128,
  kAccessRelaxedOrdering = 1 << 20,
};

enum class QpState : uint8_t { kReset = 0, kInit, kRtr, kRts, kSqd, kSqe, kErr, kUnknown };
const char* to_string(QpState);

/// The verbs QP types by their ibv_qp_type values, and the two of the
/// Dynamically Connected transport (mlx5dv's DCI and DCT; verbs creates them
/// as IBV_QPT_DRIVER, so their values here are the engine's own).
enum class QpType : uint8_t {
  kRc = 2,
  kUc = 3,
  kUd = 4,
  kXrcSend = 9,
  kXrcRecv = 10,
  kDci = 0xf0,  // DC initiator: a requester whose WRs each name their target
  kDct = 0xf1,  // DC target: a responder for any DCI that knows its key
};

enum QpAttrMask : uint32_t {
  kQpState = 1 << 0,
  kQpCurState = 1 << 1,
  kQpEnSqdAsyncNotify = 1 << 2,
  kQpAccessFlags = 1 << 3,
  kQpPkeyIndex = 1 << 4,
  kQpPort = 1 << 5,
  kQpQkey = 1 << 6,
  kQpAv = 1 << 7,
  kQpPathMtu = 1 << 8,
  kQpTimeout = 1 << 9,
  kQpRetryCnt = 1 << 10,
  kQpRnrRetry = 1 << 11,
  kQpRqPsn = 1 << 12,
  kQpMaxQpRdAtomic = 1 << 13,
  kQpAltPath = 1 << 14,
  kQpMinRnrTimer = 1 << 15,
  kQpSqPsn = 1 << 16,
  kQpMaxDestRdAtomic = 1 << 17,
  kQpPathMigState = 1 << 18,
  kQpCap = 1 << 19,
  kQpDestQpn = 1 << 20,
  kQpRateLimit = 1 << 25,
};

/// No default member initializers: WQEs hold arrays of these, and zeroing
/// them on every post showed up as the largest cost of posting (num_sge says
/// which entries are valid).
struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

/// A fast registration (IB_WR_REG_MR of a kernel consumer): region `key >> 8`,
/// allocated free for it (MrTable::alloc_fast_reg), becomes valid under `key`
/// for [iova, iova + length) with `access`. `mapping` names the translation
/// its owner froze for it (the module's page list), which the region's
/// DeviceMemory is told (DeviceMemory::bind).
struct FastReg {
  uint32_t key;
  uint64_t iova;
  uint64_t length;
  uint32_t access;
  uint32_t mapping;
};

/// A memory window bind (IBV_WR_BIND_MW, ibv_bind_mw; IBA 10.6.7.2).
struct WindowBind {
  uint32_t mw_rkey;   // the window's current rkey: names the window
  uint32_t new_rkey;  // its rkey once bound
  uint32_t mr_lkey;
  uint64_t addr;
  uint64_t length;  // 0 takes a type 1 window back
  uint32_t access;
};

/// An address vector (ibv_ah_attr without the rdma-core types).
struct AddressVector {
  uint16_t dlid = 0;
  uint8_t sl = 0;
  uint8_t src_path_bits = 0;
  uint8_t port_num = 0;
  bool is_global = false;
  std::array<uint8_t, 16> dgid{};
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
};

/// ibv_qp_attr's fields the engine keeps (IBA 11.2.4.2).
struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  uint32_t path_mtu = 5;  // IBA enum: 1=256 … 5=4096
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0,
           max_inline_data = 0;
  AddressVector ah;
  uint16_t pkey_index = 0;
  bool sq_draining = false;
  bool en_sqd_async_notify = false;  // RTS → SQD: raise SQ_DRAINED when drained
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint8_t port_num = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
};

/// One work completion (ibv_wc's fields).
struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // network byte order, as ibv_wc carries it
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
};

/// Limits the engine enforces and the provider advertises (ibv_device_attr).
struct DeviceLimits {
  static constexpr uint32_t kMaxQpWr = 16384;
  static constexpr uint32_t kMaxSge = 16;
  static constexpr uint32_t kMaxInlineData = 256;
  static constexpr uint32_t kMaxCqe = 1 << 20;
  static constexpr uint32_t kMaxQp = 1 << 16;
  static constexpr uint32_t kMaxCq = 1 << 16;
  static constexpr uint32_t kMaxMr = 1 << 20;
  static constexpr uint32_t kMaxPd = 1 << 16;
  static constexpr uint32_t kMaxMw = 1 << 16;
  static constexpr uint32_t kMaxAh = 1 << 16;
  static constexpr uint32_t kMaxSrq = 1 << 12;
  static constexpr uint32_t kMaxSrqWr = 16384;
  static constexpr uint32_t kMaxMcastGroups = 1 << 12;
  static constexpr uint32_t kMaxMcastQpAttach = 1 << 8;
  static constexpr uint64_t kMaxMrSize = ~0ull;
  static constexpr uint32_t kMaxQpRdAtom = 16;
  static constexpr uint32_t kMaxQpInitRdAtom = 16;
  static constexpr uint32_t kMaxMsgSize = 1u << 31;
};

}  // namespace ibemu::engine
