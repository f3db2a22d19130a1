// The checks ibemu.ko applies to every control message, and those both sides
// apply to the data channel's records (kernel/ibemu_ctl_validate.c), compiled
// in user space.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "emulator-daemon/kernel_messages.h"
#include "kernel/ibemu_ctl_validate.h"
#include "tests/unit/kernel_ctl_samples.h"
#include "transport/engine/qp_core.h"
#include "transport/engine/types.h"

namespace ibemu {
namespace {

using testing::valid_device;
using testing::valid_mad_in;
using testing::valid_mad_reply;
using testing::valid_port;

template <typename Msg>
int validate(const Msg& m) {
  return ibemu_ctl_validate(&m, sizeof(m));
}

TEST(KernelControlValidate, AcceptsWellFormedMessages) {
  EXPECT_EQ(validate(valid_device()), 0);
  EXPECT_EQ(validate(valid_port()), 0);
  EXPECT_EQ(validate(valid_mad_in()), 0);
  EXPECT_EQ(validate(valid_mad_reply()), 0);
}

TEST(KernelControlValidate, RefusesLengthsThatDisagree) {
  auto m = valid_port();
  EXPECT_EQ(ibemu_ctl_validate(&m, sizeof(m) - 1), -EINVAL);
  m.hdr.length = sizeof(m) + 4;
  EXPECT_EQ(validate(m), -EINVAL);
  EXPECT_EQ(ibemu_ctl_validate(&m, 3), -EINVAL);
}

TEST(KernelControlValidate, RefusesWhatOnlyTheModuleSends) {
  EXPECT_EQ(validate(kernel_message<ibemu_ctl_mad_out>(IBEMU_CTL_MAD_OUT)), -EINVAL);
  EXPECT_EQ(validate(kernel_message<ibemu_ctl_process_mad>(IBEMU_CTL_PROCESS_MAD)), -EINVAL);
}

TEST(KernelControlValidate, RefusesBadDevices) {
  auto m = valid_device();
  m.abi_version = IBEMU_CTL_ABI_VERSION + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.num_ports = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m.num_ports = IBEMU_CTL_MAX_PORTS + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.index = IBEMU_CTL_MAX_DEVICES;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  std::memset(m.name, 'a', sizeof(m.name));  // not terminated
  EXPECT_EQ(validate(m), -EINVAL);
  for (const char* name : {"", "ibemu%d", "a/b", "a b"}) {
    m = valid_device();
    std::strcpy(m.name, name);
    EXPECT_EQ(validate(m), -EINVAL) << name;
  }
}

// ABI 3 appended the kernel QPN block and the FRWR limit to ABI 2's layout,
// ABI 4 the ports' GIDs.
static_assert(sizeof(ibemu_ctl_add_device) == 312);
static_assert(offsetof(ibemu_ctl_add_device, kernel_qpn_first) == 224);
static_assert(offsetof(ibemu_ctl_add_device, subnet_prefix) == 240);

TEST(KernelControlValidate, TakesPortGuidsOfTheDevicesPortsOnly) {
  auto m = valid_device();
  m.subnet_prefix = 0xfe80000000000000ull;
  m.port_guids[0] = 0x0002c90300000101ull;
  m.port_guids[1] = 0x0002c90300000102ull;
  EXPECT_EQ(validate(m), 0);
  m.port_guids[2] = 0x0002c90300000103ull;  // the device has 2 ports
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.port_guids[IBEMU_CTL_MAX_PORTS - 1] = 1;
  EXPECT_EQ(validate(m), -EINVAL);
}

TEST(KernelControlValidate, RefusesBadKernelQpnBlocksAndPageLists) {
  auto m = valid_device();
  m.kernel_qpn_count = 0x100000;  // reaches the multicast QPN
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_first = 1;  // QP1
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_first = 0xffffff;
  m.kernel_qpn_count = 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_count = 0;  // no block, yet a start
  EXPECT_EQ(validate(m), -EINVAL);
  m.kernel_qpn_first = 0;
  EXPECT_EQ(validate(m), 0);
  m = valid_device();
  m.max_fast_reg_pages = IBEMU_CTL_MAX_FAST_REG_PAGES;
  EXPECT_EQ(validate(m), 0);
  m.max_fast_reg_pages = IBEMU_CTL_MAX_FAST_REG_PAGES + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.reserved2 = 1;
  EXPECT_EQ(validate(m), -EINVAL);
  // ABI 2's and ABI 3's ADD_DEVICE, shorter by the newer fields.
  for (size_t length : {offsetof(ibemu_ctl_add_device, kernel_qpn_first),
                        offsetof(ibemu_ctl_add_device, subnet_prefix)}) {
    m = valid_device();
    m.hdr.length = uint16_t(length);
    EXPECT_EQ(ibemu_ctl_validate(&m, m.hdr.length), -EINVAL);
  }
}

TEST(KernelControlValidate, RefusesPortAttributesOutOfRange) {
  auto m = valid_port();
  m.port = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.state = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.active_mtu = 6;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.lmc = 8;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.sm_sl = 16;
  EXPECT_EQ(validate(m), -EINVAL);
}

TEST(KernelControlValidate, RefusesBadMadsAndReplies) {
  auto mad = kernel_message<ibemu_ctl_mad_in>(IBEMU_CTL_MAD_IN);
  mad.port = 1;
  mad.qpn = 2;
  EXPECT_EQ(validate(mad), -EINVAL);
  mad.qpn = 1;
  mad.src_qp = 1u << 24;
  EXPECT_EQ(validate(mad), -EINVAL);
  auto reply = kernel_message<ibemu_ctl_process_mad_reply>(IBEMU_CTL_PROCESS_MAD_REPLY);
  reply.hdr.seq = 0;
  EXPECT_EQ(validate(reply), -EINVAL);
  reply.hdr.seq = 1;
  reply.result = 3;
  EXPECT_EQ(validate(reply), -EINVAL);
}

// --- The data channel (ABI 3) ---

// The layouts both sides compile: any change here is an ABI change.
static_assert(sizeof(ibemu_data_hdr) == 8);
static_assert(sizeof(ibemu_data_create_cq) == 16);
static_assert(sizeof(ibemu_data_destroy_cq) == 16);
static_assert(sizeof(ibemu_data_reg_dma_mr) == 24);
static_assert(sizeof(ibemu_data_alloc_mr) == 24);
static_assert(sizeof(ibemu_data_dereg_mr) == 16);
static_assert(sizeof(ibemu_data_create_srq) == 32);
static_assert(sizeof(ibemu_data_modify_srq) == 16);
static_assert(sizeof(ibemu_data_destroy_srq) == 16);
static_assert(sizeof(ibemu_data_create_qp) == 56);
static_assert(sizeof(ibemu_data_av) == 32);
static_assert(sizeof(ibemu_data_modify_qp) == 88);
static_assert(offsetof(ibemu_data_modify_qp, av) == 56);
static_assert(sizeof(ibemu_data_destroy_qp) == 16);
static_assert(sizeof(ibemu_data_mcast) == 32);
static_assert(sizeof(ibemu_data_sge) == 16);
static_assert(sizeof(ibemu_data_fast_reg) == 32);
static_assert(offsetof(ibemu_data_send_wqe, sge) == 136);
static_assert(offsetof(ibemu_data_send_wqe, inline_data) == 136);
static_assert(sizeof(ibemu_data_send_wqe) == 136 + 16 * IBEMU_DATA_MAX_SGE);
static_assert(offsetof(ibemu_data_recv_wqe, sge) == 32);
static_assert(sizeof(ibemu_data_recv_wqe) == 32 + 16 * IBEMU_DATA_MAX_SGE);
static_assert(sizeof(ibemu_data_cqe) == 56);
static_assert(sizeof(ibemu_data_event) == 24);
static_assert(sizeof(ibemu_data_complete) == 16);
static_assert(sizeof(ibemu_data_copy_segment) == 32);
static_assert(sizeof(ibemu_data_copy) == 16);
// The largest record fits the header's 16-bit length.
static_assert(sizeof(ibemu_data_send_wqe) <= 0xffff);
// The ioctls' numbers encode their arguments' sizes.
static_assert(_IOC_SIZE(IBEMU_IOC_COMPLETE) == sizeof(ibemu_data_complete));
static_assert(_IOC_SIZE(IBEMU_IOC_COPY) == sizeof(ibemu_data_copy));
static_assert(_IOC_DIR(IBEMU_IOC_OPEN_DATA) == _IOC_NONE);

// The values the header says are the engine's (the daemon converts them by cast).
namespace e = engine;
static_assert(IBEMU_DATA_QPT_RC == static_cast<int>(e::QpType::kRc));
static_assert(IBEMU_DATA_QPT_UC == static_cast<int>(e::QpType::kUc));
static_assert(IBEMU_DATA_QPT_UD == static_cast<int>(e::QpType::kUd));
static_assert(IBEMU_DATA_QPS_RESET == static_cast<int>(e::QpState::kReset));
static_assert(IBEMU_DATA_QPS_ERR == static_cast<int>(e::QpState::kErr));
static_assert(IBEMU_DATA_ACCESS_LOCAL_WRITE == e::kAccessLocalWrite);
static_assert(IBEMU_DATA_ACCESS_REMOTE_WRITE == e::kAccessRemoteWrite);
static_assert(IBEMU_DATA_ACCESS_REMOTE_READ == e::kAccessRemoteRead);
static_assert(IBEMU_DATA_ACCESS_REMOTE_ATOMIC == e::kAccessRemoteAtomic);
static_assert(IBEMU_DATA_SEND_FENCE == e::kSendFence);
static_assert(IBEMU_DATA_SEND_SIGNALED == e::kSendSignaled);
static_assert(IBEMU_DATA_SEND_SOLICITED == e::kSendSolicited);
static_assert(IBEMU_DATA_SEND_INLINE == e::kSendInline);
static_assert(IBEMU_DATA_WC_GRH == e::kWcGrh);
static_assert(IBEMU_DATA_WC_WITH_IMM == e::kWcWithImm);
static_assert(IBEMU_DATA_WC_WITH_INV == e::kWcWithInv);
static_assert(IBEMU_DATA_WC_GENERAL_ERR == static_cast<int>(e::WcStatus::kGeneralErr));
static_assert(IBEMU_DATA_WR_RDMA_WRITE == static_cast<int>(e::WrOpcode::kRdmaWrite));
static_assert(IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM ==
              static_cast<int>(e::WrOpcode::kRdmaWriteWithImm));
static_assert(IBEMU_DATA_WR_SEND == static_cast<int>(e::WrOpcode::kSend));
static_assert(IBEMU_DATA_WR_SEND_WITH_IMM == static_cast<int>(e::WrOpcode::kSendWithImm));
static_assert(IBEMU_DATA_WR_RDMA_READ == static_cast<int>(e::WrOpcode::kRdmaRead));
static_assert(IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP == static_cast<int>(e::WrOpcode::kAtomicCmpAndSwp));
static_assert(IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD ==
              static_cast<int>(e::WrOpcode::kAtomicFetchAndAdd));
static_assert(IBEMU_DATA_WR_LOCAL_INV == static_cast<int>(e::WrOpcode::kLocalInv));
static_assert(IBEMU_DATA_WR_SEND_WITH_INV == static_cast<int>(e::WrOpcode::kSendWithInv));
static_assert(IBEMU_DATA_WC_SEND == static_cast<int>(e::WcOpcode::kSend));
static_assert(IBEMU_DATA_WC_RDMA_WRITE == static_cast<int>(e::WcOpcode::kRdmaWrite));
static_assert(IBEMU_DATA_WC_RDMA_READ == static_cast<int>(e::WcOpcode::kRdmaRead));
static_assert(IBEMU_DATA_WC_COMP_SWAP == static_cast<int>(e::WcOpcode::kCompSwap));
static_assert(IBEMU_DATA_WC_FETCH_ADD == static_cast<int>(e::WcOpcode::kFetchAdd));
static_assert(IBEMU_DATA_WC_LOCAL_INV == static_cast<int>(e::WcOpcode::kLocalInv));
static_assert(IBEMU_DATA_WC_RECV == static_cast<int>(e::WcOpcode::kRecv));
static_assert(IBEMU_DATA_WC_RECV_RDMA_WITH_IMM == static_cast<int>(e::WcOpcode::kRecvRdmaWithImm));
static_assert(IBEMU_DATA_EVENT_QP_FATAL == static_cast<int>(e::QpEvent::kFatal));
static_assert(IBEMU_DATA_EVENT_QP_REQ_ERR == static_cast<int>(e::QpEvent::kReqErr));
static_assert(IBEMU_DATA_EVENT_QP_ACCESS_ERR == static_cast<int>(e::QpEvent::kAccessErr));
static_assert(IBEMU_DATA_EVENT_COMM_EST == static_cast<int>(e::QpEvent::kCommEst));
static_assert(IBEMU_DATA_EVENT_SQ_DRAINED == static_cast<int>(e::QpEvent::kSqDrained));
static_assert(IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED ==
              static_cast<int>(e::QpEvent::kLastWqeReached));
static_assert(IBEMU_DATA_QP_STATE == e::kQpState && IBEMU_DATA_QP_CUR_STATE == e::kQpCurState &&
              IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY == e::kQpEnSqdAsyncNotify &&
              IBEMU_DATA_QP_ACCESS_FLAGS == e::kQpAccessFlags &&
              IBEMU_DATA_QP_PKEY_INDEX == e::kQpPkeyIndex && IBEMU_DATA_QP_PORT == e::kQpPort &&
              IBEMU_DATA_QP_QKEY == e::kQpQkey && IBEMU_DATA_QP_AV == e::kQpAv &&
              IBEMU_DATA_QP_PATH_MTU == e::kQpPathMtu && IBEMU_DATA_QP_TIMEOUT == e::kQpTimeout &&
              IBEMU_DATA_QP_RETRY_CNT == e::kQpRetryCnt &&
              IBEMU_DATA_QP_RNR_RETRY == e::kQpRnrRetry && IBEMU_DATA_QP_RQ_PSN == e::kQpRqPsn &&
              IBEMU_DATA_QP_MAX_QP_RD_ATOMIC == e::kQpMaxQpRdAtomic &&
              IBEMU_DATA_QP_MIN_RNR_TIMER == e::kQpMinRnrTimer &&
              IBEMU_DATA_QP_SQ_PSN == e::kQpSqPsn &&
              IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC == e::kQpMaxDestRdAtomic &&
              IBEMU_DATA_QP_PATH_MIG_STATE == e::kQpPathMigState &&
              IBEMU_DATA_QP_DEST_QPN == e::kQpDestQpn);
// Whatever the engine offers, a record can carry.
static_assert(e::DeviceLimits::kMaxSge <= IBEMU_DATA_MAX_SGE);
static_assert(e::DeviceLimits::kMaxInlineData <= IBEMU_DATA_MAX_INLINE);
static_assert(e::DeviceLimits::kMaxQpWr <= IBEMU_DATA_MAX_WR);
static_assert(e::DeviceLimits::kMaxSrqWr <= IBEMU_DATA_MAX_WR);
static_assert(e::DeviceLimits::kMaxCqe <= IBEMU_DATA_MAX_CQE);

using testing::data_samples;
using testing::DataSample;
using testing::record_bytes;
using testing::valid_alloc_mr;
using testing::valid_complete;
using testing::valid_copy;
using testing::valid_copy_segment;
using testing::valid_cqe;
using testing::valid_create_cq;
using testing::valid_create_qp;
using testing::valid_create_srq;
using testing::valid_event;
using testing::valid_inline_send_wqe;
using testing::valid_mcast;
using testing::valid_modify_qp;
using testing::valid_modify_srq;
using testing::valid_recv_wqe;
using testing::valid_reg_dma_mr;
using testing::valid_reg_mr_wqe;
using testing::valid_send_wqe;

ibemu_data_direction other(ibemu_data_direction d) {
  return d == IBEMU_DATA_TO_DAEMON ? IBEMU_DATA_TO_MODULE : IBEMU_DATA_TO_DAEMON;
}

int record_valid(const std::vector<uint8_t>& bytes, ibemu_data_direction dir) {
  return ibemu_data_record_valid(bytes.data(), bytes.size(), dir);
}

template <typename Record>
int to_daemon(const Record& r) {
  return record_valid(record_bytes(r), IBEMU_DATA_TO_DAEMON);
}

template <typename Record>
int to_module(const Record& r) {
  return record_valid(record_bytes(r), IBEMU_DATA_TO_MODULE);
}

void write_length(std::vector<uint8_t>& bytes, uint16_t length) {
  std::memcpy(bytes.data() + offsetof(ibemu_data_hdr, length), &length, sizeof(length));
}

// A record cut (or zero-extended) to `length`, which its header then says.
void set_length(std::vector<uint8_t>& bytes, size_t length) {
  bytes.resize(length);
  write_length(bytes, static_cast<uint16_t>(length));
}

// A record whose header claims more than its struct holds (a count past
// the arrays' end): the claimed length, zero past the struct.
template <typename Record>
std::vector<uint8_t> claimed_bytes(const Record& r) {
  std::vector<uint8_t> bytes(r.hdr.length);
  std::memcpy(bytes.data(), &r, std::min<size_t>(sizeof(r), bytes.size()));
  return bytes;
}

TEST(KernelDataValidate, AcceptsEveryWellFormedRecordOnlyOnItsWay) {
  for (const DataSample& s : data_samples()) {
    EXPECT_EQ(record_valid(s.bytes, s.direction), 0) << s.name;
    EXPECT_EQ(record_valid(s.bytes, other(s.direction)), -EINVAL) << s.name;
    EXPECT_EQ(s.bytes.size() % 8, 0u) << s.name;
  }
}

TEST(KernelDataValidate, RefusesTruncatedAndOversizedRecords) {
  for (const DataSample& s : data_samples()) {
    auto bytes = s.bytes;
    // The header agrees with the length, the record's shape does not.
    set_length(bytes, s.bytes.size() - 8);
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name << " short";
    bytes = s.bytes;
    set_length(bytes, s.bytes.size() + 8);
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name << " long";
    // The header and the bytes given disagree.
    EXPECT_EQ(ibemu_data_record_valid(s.bytes.data(), s.bytes.size() - 8, s.direction), -EINVAL)
        << s.name;
    bytes = s.bytes;
    bytes.resize(s.bytes.size() + 8);
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name;
    // Not a multiple of 8.
    bytes = s.bytes;
    set_length(bytes, s.bytes.size() - 1);
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name << " odd";
  }
  std::vector<uint8_t> header_only(4);
  EXPECT_EQ(record_valid(header_only, IBEMU_DATA_TO_DAEMON), -EINVAL);
}

TEST(KernelDataValidate, RefusesBadHeaders) {
  for (const DataSample& s : data_samples()) {
    auto bytes = s.bytes;
    bytes[offsetof(ibemu_data_hdr, index)] = IBEMU_CTL_MAX_DEVICES;
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name;
    bytes = s.bytes;
    bytes[offsetof(ibemu_data_hdr, reserved) + 2] = 1;
    EXPECT_EQ(record_valid(bytes, s.direction), -EINVAL) << s.name;
  }
  auto unknown = record_bytes(valid_create_cq());
  for (uint16_t type : {0, 14, 31, 34, 63, 66, 0xffff}) {
    std::memcpy(unknown.data(), &type, sizeof(type));
    EXPECT_EQ(record_valid(unknown, IBEMU_DATA_TO_DAEMON), -EINVAL) << type;
    EXPECT_EQ(record_valid(unknown, IBEMU_DATA_TO_MODULE), -EINVAL) << type;
  }
}

TEST(KernelDataValidate, RefusesNonzeroReservedFields) {
  auto reg = valid_reg_dma_mr();
  reg.reserved = 1;
  EXPECT_EQ(to_daemon(reg), -EINVAL);
  auto qp = valid_create_qp();
  qp.reserved[5] = 1;
  EXPECT_EQ(to_daemon(qp), -EINVAL);
  auto modify = valid_modify_qp();
  modify.reserved[0] = 1;
  EXPECT_EQ(to_daemon(modify), -EINVAL);
  modify = valid_modify_qp();
  modify.av.reserved[2] = 1;
  EXPECT_EQ(to_daemon(modify), -EINVAL);
  auto mcast = valid_mcast();
  mcast.reserved = 1;
  EXPECT_EQ(to_daemon(mcast), -EINVAL);
  auto send = valid_send_wqe();
  send.reserved = 1;
  EXPECT_EQ(to_daemon(send), -EINVAL);
  send = valid_send_wqe();
  send.reg.page_size = 4096;  // a REG_MR field on a SEND
  EXPECT_EQ(to_daemon(send), -EINVAL);
  auto recv = valid_recv_wqe();
  recv.reserved[6] = 1;
  EXPECT_EQ(to_daemon(recv), -EINVAL);
  auto cqe = valid_cqe();
  cqe.reserved[0] = 1;
  EXPECT_EQ(to_module(cqe), -EINVAL);
  auto event = valid_event();
  event.reserved[4] = 1;
  EXPECT_EQ(to_module(event), -EINVAL);
  auto inline_send = valid_inline_send_wqe();
  inline_send.inline_data[inline_send.inline_len] = 'x';  // in the padding
  EXPECT_EQ(to_daemon(inline_send), -EINVAL);
}

TEST(KernelDataValidate, RefusesBadObjectCommands) {
  auto cq = valid_create_cq();
  cq.cq = 0;
  EXPECT_EQ(to_daemon(cq), -EINVAL);
  cq = valid_create_cq();
  cq.cqe = 0;
  EXPECT_EQ(to_daemon(cq), -EINVAL);
  cq.cqe = IBEMU_DATA_MAX_CQE + 1;
  EXPECT_EQ(to_daemon(cq), -EINVAL);

  auto dma = valid_reg_dma_mr();
  dma.key = 0x101;  // a DMA MR's key byte is 0
  EXPECT_EQ(to_daemon(dma), -EINVAL);
  dma = valid_reg_dma_mr();
  dma.access = IBEMU_DATA_ACCESS_REMOTE_WRITE;  // without local write
  EXPECT_EQ(to_daemon(dma), -EINVAL);
  dma.access = 16;  // MW_BIND
  EXPECT_EQ(to_daemon(dma), -EINVAL);
  auto fr = valid_alloc_mr();
  fr.max_pages = 0;
  EXPECT_EQ(to_daemon(fr), -EINVAL);
  fr.max_pages = IBEMU_CTL_MAX_FAST_REG_PAGES + 1;
  EXPECT_EQ(to_daemon(fr), -EINVAL);

  auto srq = valid_create_srq();
  srq.max_sge = IBEMU_DATA_MAX_SGE + 1;
  EXPECT_EQ(to_daemon(srq), -EINVAL);
  srq = valid_create_srq();
  srq.srq_limit = srq.max_wr + 1;
  EXPECT_EQ(to_daemon(srq), -EINVAL);
  auto limit = valid_modify_srq();
  limit.srq = 0;
  EXPECT_EQ(to_daemon(limit), -EINVAL);

  auto qp = valid_create_qp();
  for (uint8_t type : {0, 1, 5, 9, 0xf0}) {
    qp.qp_type = type;
    EXPECT_EQ(to_daemon(qp), -EINVAL) << int{type};
  }
  for (uint32_t qpn : {0u, 1u, 0xffffffu, 0x1000000u}) {
    qp = valid_create_qp();
    qp.qpn = qpn;
    EXPECT_EQ(to_daemon(qp), -EINVAL) << qpn;
  }
  qp = valid_create_qp();
  qp.max_send_sge = IBEMU_DATA_MAX_SGE + 1;
  EXPECT_EQ(to_daemon(qp), -EINVAL);
  qp = valid_create_qp();
  qp.max_inline_data = IBEMU_DATA_MAX_INLINE + 1;
  EXPECT_EQ(to_daemon(qp), -EINVAL);
  qp = valid_create_qp();
  qp.srq = 1;  // with its own receive queue's capacities
  EXPECT_EQ(to_daemon(qp), -EINVAL);
  qp.max_recv_wr = qp.max_recv_sge = 0;
  EXPECT_EQ(to_daemon(qp), 0);
  qp.sq_sig_all = 2;
  EXPECT_EQ(to_daemon(qp), -EINVAL);

  auto mcast = valid_mcast();
  mcast.mgid[0] = 0xfe;
  EXPECT_EQ(to_daemon(mcast), -EINVAL);
  mcast = valid_mcast();
  mcast.mlid = 0xbfff;
  EXPECT_EQ(to_daemon(mcast), -EINVAL);
  mcast.mlid = 0xffff;  // the permissive LID
  EXPECT_EQ(to_daemon(mcast), -EINVAL);
}

TEST(KernelDataValidate, RefusesQpAttributesOutOfRangeOnlyWhenNamed) {
  auto m = valid_modify_qp();
  m.timeout = 32;  // not in attr_mask: the engine never reads it
  EXPECT_EQ(to_daemon(m), 0);
  m.attr_mask |= IBEMU_DATA_QP_TIMEOUT;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.qp_state = 7;  // the engine's kUnknown is no state to move to
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.path_mtu = 6;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.av.port = 0;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.av.sl = 16;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.rq_psn = 1u << 24;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  m = valid_modify_qp();
  m.max_dest_rd_atomic = 17;
  EXPECT_EQ(to_daemon(m), -EINVAL);
  for (uint32_t refused : {1u << 14, 1u << 19, 1u << 25}) {  // ALT_PATH, CAP, RATE_LIMIT
    m = valid_modify_qp();
    m.attr_mask |= refused;
    EXPECT_EQ(to_daemon(m), -EINVAL) << refused;
  }
  m = valid_modify_qp();
  m.modify_seq = 0;
  EXPECT_EQ(to_daemon(m), -EINVAL);
}

TEST(KernelDataValidate, RefusesBadSendWqes) {
  auto w = valid_send_wqe();
  w.opcode = 8;  // BIND_MW
  EXPECT_EQ(to_daemon(w), -EINVAL);
  w.opcode = 10;  // LSO
  EXPECT_EQ(to_daemon(w), -EINVAL);
  w = valid_send_wqe();
  w.flags |= 16;  // IB_SEND_IP_CSUM
  EXPECT_EQ(to_daemon(w), -EINVAL);
  w = valid_send_wqe();
  w.remote_qpn = 1u << 24;
  EXPECT_EQ(to_daemon(w), -EINVAL);
  w = valid_send_wqe();
  w.av.is_global = 2;
  EXPECT_EQ(to_daemon(w), -EINVAL);

  // num_sge and the length disagree, or num_sge is beyond the array.
  w = valid_send_wqe();
  w.num_sge = 3;
  EXPECT_EQ(to_daemon(w), -EINVAL);
  w.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(3, 0));
  EXPECT_EQ(to_daemon(w), 0);
  w.num_sge = IBEMU_DATA_MAX_SGE + 1;
  w.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(w.num_sge, 0));
  EXPECT_EQ(record_valid(claimed_bytes(w), IBEMU_DATA_TO_DAEMON), -EINVAL);
  w.num_sge = IBEMU_DATA_MAX_SGE;
  w.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(w.num_sge, 0));
  EXPECT_EQ(to_daemon(w), 0);

  // Inline bytes: only with the flag, never with SGEs, within the limit.
  auto in = valid_inline_send_wqe();
  in.flags &= ~IBEMU_DATA_SEND_INLINE;
  EXPECT_EQ(to_daemon(in), -EINVAL);
  in = valid_inline_send_wqe();
  in.num_sge = 1;
  in.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(1, in.inline_len));
  EXPECT_EQ(to_daemon(in), -EINVAL);
  in = valid_inline_send_wqe();
  in.inline_len = IBEMU_DATA_MAX_INLINE + 1;
  in.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(0, in.inline_len));
  EXPECT_EQ(record_valid(claimed_bytes(in), IBEMU_DATA_TO_DAEMON), -EINVAL);
  in = valid_inline_send_wqe();
  in.opcode = IBEMU_DATA_WR_RDMA_READ;
  EXPECT_EQ(to_daemon(in), -EINVAL);

  // Local operations carry no SGE.
  auto inv = valid_send_wqe();
  inv.opcode = IBEMU_DATA_WR_LOCAL_INV;
  EXPECT_EQ(to_daemon(inv), -EINVAL);

  auto reg = valid_reg_mr_wqe();
  reg.reg.generation = 0;
  EXPECT_EQ(to_daemon(reg), -EINVAL);
  reg = valid_reg_mr_wqe();
  reg.reg.page_size = 4096 + 512;
  EXPECT_EQ(to_daemon(reg), -EINVAL);
  reg.reg.page_size = 2048;
  EXPECT_EQ(to_daemon(reg), -EINVAL);
  reg = valid_reg_mr_wqe();
  reg.reg.iova = ~0ull - 100;  // wraps
  EXPECT_EQ(to_daemon(reg), -EINVAL);
  reg = valid_reg_mr_wqe();
  reg.reg.access = IBEMU_DATA_ACCESS_REMOTE_ATOMIC;
  EXPECT_EQ(to_daemon(reg), -EINVAL);
}

TEST(KernelDataValidate, RefusesBadRecvWqes) {
  auto r = valid_recv_wqe();
  r.srq = 1;  // both a QP and an SRQ
  EXPECT_EQ(to_daemon(r), -EINVAL);
  r.qpn = r.srq = 0;  // neither
  EXPECT_EQ(to_daemon(r), -EINVAL);
  r = valid_recv_wqe();
  r.num_sge = 0;  // the length still counts one
  EXPECT_EQ(to_daemon(r), -EINVAL);
  r.hdr.length = static_cast<uint16_t>(ibemu_data_recv_wqe_length(0));
  EXPECT_EQ(to_daemon(r), 0);
  r.num_sge = IBEMU_DATA_MAX_SGE + 1;
  r.hdr.length = static_cast<uint16_t>(ibemu_data_recv_wqe_length(r.num_sge));
  EXPECT_EQ(record_valid(claimed_bytes(r), IBEMU_DATA_TO_DAEMON), -EINVAL);
}

TEST(KernelDataValidate, RefusesBadCompletionsAndEvents) {
  auto c = valid_cqe();
  c.status = IBEMU_DATA_WC_GENERAL_ERR;
  EXPECT_EQ(to_module(c), 0);
  c.status = IBEMU_DATA_WC_GENERAL_ERR + 1;
  EXPECT_EQ(to_module(c), -EINVAL);
  c = valid_cqe();
  for (uint8_t opcode : {5, 7, 8, 130}) {  // BIND_MW, TSO, the kernel's REG_MR, TM
    c.opcode = opcode;
    EXPECT_EQ(to_module(c), -EINVAL) << int{opcode};
  }
  c = valid_cqe();
  c.flags = 4;  // the kernel's IB_WC_WITH_INVALIDATE, not the engine's
  EXPECT_EQ(to_module(c), -EINVAL);
  c.flags = IBEMU_DATA_WC_WITH_IMM | IBEMU_DATA_WC_WITH_INV;
  EXPECT_EQ(to_module(c), -EINVAL);
  c = valid_cqe();
  c.cq = 0;
  EXPECT_EQ(to_module(c), -EINVAL);
  c = valid_cqe();
  c.pkey_index = IBEMU_CTL_MAX_PKEYS;
  EXPECT_EQ(to_module(c), -EINVAL);
  c = valid_cqe();
  c.solicited = 2;
  EXPECT_EQ(to_module(c), -EINVAL);

  auto e = valid_event();
  e.qp_state = 7;
  EXPECT_EQ(to_module(e), -EINVAL);
  e = valid_event();
  e.event = IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED;  // not a QP's
  EXPECT_EQ(to_module(e), -EINVAL);
  e = valid_event();
  e.object = 0;
  EXPECT_EQ(to_module(e), -EINVAL);
  e.object = 4;
  EXPECT_EQ(to_module(e), -EINVAL);
  e = valid_event();
  e.object = IBEMU_DATA_EVENT_ON_SRQ;
  e.handle = 1;
  e.event = IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED;
  EXPECT_EQ(to_module(e), -EINVAL);  // still a QP's sequence and state
  e.modify_seq = 0;
  e.qp_state = 0;
  EXPECT_EQ(to_module(e), 0);
  e.event = IBEMU_DATA_EVENT_CQ_ERR;
  EXPECT_EQ(to_module(e), -EINVAL);
  e.object = IBEMU_DATA_EVENT_ON_CQ;
  EXPECT_EQ(to_module(e), 0);
  e.handle = 0;
  EXPECT_EQ(to_module(e), -EINVAL);
}

std::vector<uint8_t> batch_of(std::initializer_list<std::vector<uint8_t>> records) {
  std::vector<uint8_t> batch;
  for (const auto& r : records) batch.insert(batch.end(), r.begin(), r.end());
  return batch;
}

TEST(KernelDataValidate, ChecksBatchesRecordByRecord) {
  const auto daemon_batch =
      batch_of({record_bytes(valid_create_cq()), record_bytes(valid_send_wqe()),
                record_bytes(valid_recv_wqe())});
  EXPECT_EQ(ibemu_data_batch_valid(daemon_batch.data(), daemon_batch.size(), IBEMU_DATA_TO_DAEMON),
            0);
  const auto module_batch = batch_of({record_bytes(valid_cqe()), record_bytes(valid_event())});
  EXPECT_EQ(ibemu_data_batch_valid(module_batch.data(), module_batch.size(), IBEMU_DATA_TO_MODULE),
            0);
  // A batch ends on a record's end.
  EXPECT_EQ(
      ibemu_data_batch_valid(module_batch.data(), module_batch.size() - 8, IBEMU_DATA_TO_MODULE),
      -EINVAL);
  EXPECT_EQ(ibemu_data_batch_valid(module_batch.data(), 0, IBEMU_DATA_TO_MODULE), -EINVAL);
  // One record the wrong way spoils the batch.
  const auto mixed = batch_of({record_bytes(valid_cqe()), record_bytes(valid_create_cq())});
  EXPECT_EQ(ibemu_data_batch_valid(mixed.data(), mixed.size(), IBEMU_DATA_TO_MODULE), -EINVAL);
  // A zero length would never end the walk.
  auto stuck = module_batch;
  write_length(stuck, 0);
  EXPECT_EQ(ibemu_data_batch_valid(stuck.data(), stuck.size(), IBEMU_DATA_TO_MODULE), -EINVAL);
}

TEST(KernelDataValidate, ChecksIoctlArgumentsAndCopySegments) {
  auto complete = valid_complete();
  EXPECT_EQ(ibemu_data_complete_valid(&complete), 0);
  for (uint32_t length : {0u, 4u, 60u, IBEMU_DATA_MAX_BATCH + 8u}) {
    complete.length = length;
    EXPECT_EQ(ibemu_data_complete_valid(&complete), -EINVAL) << length;
  }
  complete = valid_complete();
  complete.reserved = 1;
  EXPECT_EQ(ibemu_data_complete_valid(&complete), -EINVAL);

  auto copy = valid_copy();
  EXPECT_EQ(ibemu_data_copy_valid(&copy), 0);
  copy.count = 0;
  EXPECT_EQ(ibemu_data_copy_valid(&copy), -EINVAL);
  copy.count = IBEMU_DATA_MAX_COPY_SEGMENTS + 1;
  EXPECT_EQ(ibemu_data_copy_valid(&copy), -EINVAL);
  copy = valid_copy();
  copy.done = 1;
  EXPECT_EQ(ibemu_data_copy_valid(&copy), -EINVAL);

  auto seg = valid_copy_segment();
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), 0);
  for (uint8_t direction : {0, 3}) {
    seg.direction = direction;
    EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL) << int{direction};
  }
  seg = valid_copy_segment();
  seg.length = 0;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg.length = IBEMU_DATA_MAX_COPY_LENGTH + 1;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg = valid_copy_segment();
  seg.iova = ~0ull - 10;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg = valid_copy_segment();
  seg.buffer = ~0ull - 10;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg = valid_copy_segment();
  seg.iova = ~0ull - (seg.length - 1);  // the last byte of the address space
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), 0);
  seg = valid_copy_segment();
  seg.index = IBEMU_CTL_MAX_DEVICES;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg = valid_copy_segment();
  seg.mr = 1u << 24;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
  seg = valid_copy_segment();
  seg.reserved = 1;
  EXPECT_EQ(ibemu_data_copy_segment_valid(&seg), -EINVAL);
}

}  // namespace
}  // namespace ibemu
