// Kernel mode: the data channel's records as the engine's WQEs, attributes
// and completions, and back (emulator-daemon/kernel_records.h). Records
// built here are checked by the module's own validators, as the daemon's
// reader and the module check them.
#include "emulator-daemon/kernel_records.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "kernel/ibemu_ctl_validate.h"
#include "transport/engine/shared_receive_queue.h"

namespace ibemu {
namespace {

using engine::QpState;
using engine::WcOpcode;
using engine::WcStatus;
using engine::WrOpcode;

ibemu_data_send_wqe ud_send() {
  ibemu_data_send_wqe r{};
  r.hdr.type = IBEMU_DATA_SEND_WQE;
  r.token = 0x1234567890;
  r.qpn = 0xf00001;
  r.flags = IBEMU_DATA_SEND_SIGNALED | IBEMU_DATA_SEND_SOLICITED;
  r.opcode = IBEMU_DATA_WR_SEND_WITH_IMM;
  r.imm_or_rkey = 0x01020304;
  r.remote_qpn = 0x000011;
  r.remote_qkey = 0x80010000;
  r.av.dlid = 0xc001;
  r.av.port = 1;
  r.av.sl = 3;
  r.av.is_global = 1;
  r.av.dgid[0] = 0xff;
  r.av.hop_limit = 1;
  r.num_sge = 2;
  r.sge[0] = {0xffff888000001000, 2044, 0x100};
  r.sge[1] = {0xffff888000002000, 4, 0x100};
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(r.num_sge, 0));
  return r;
}

TEST(KernelRecords, GivenAUdSendWithImmediateExpectTheEngineWqeToCarryEveryField) {
  const ibemu_data_send_wqe r = ud_send();
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  ASSERT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  EXPECT_EQ(w.wr_id, r.token);
  EXPECT_EQ(w.opcode, WrOpcode::kSendWithImm);
  EXPECT_EQ(w.flags, engine::kSendSignaled | engine::kSendSolicited);
  EXPECT_EQ(w.imm_or_rkey, 0x01020304u);
  EXPECT_EQ(w.remote_qpn, 0x000011u);
  EXPECT_EQ(w.remote_qkey, 0x80010000u);
  EXPECT_EQ(w.av.dlid, 0xc001);
  EXPECT_EQ(w.av.port_num, 1);
  EXPECT_EQ(w.av.sl, 3);
  EXPECT_TRUE(w.av.is_global);
  EXPECT_EQ(w.av.dgid[0], 0xff);
  ASSERT_EQ(w.num_sge, 2);
  EXPECT_EQ(w.sge[0].addr, 0xffff888000001000u);
  EXPECT_EQ(w.sge[0].length, 2044u);
  EXPECT_EQ(w.sge[1].lkey, 0x100u);
}

TEST(KernelRecords, GivenAnInlineSendExpectOneSgeOntoTheRecordsOwnBytes) {
  ibemu_data_send_wqe r = ud_send();
  r.num_sge = 0;
  std::memset(r.sge, 0, sizeof(r.sge));  // the padding after inline bytes is zero
  r.flags |= IBEMU_DATA_SEND_INLINE;
  r.inline_len = 5;
  std::memcpy(r.inline_data, "hello", 5);
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(0, r.inline_len));
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  ASSERT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  ASSERT_EQ(w.num_sge, 1);
  EXPECT_EQ(w.sge[0].length, 5u);
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(w.sge[0].addr), "hello", 5), 0);
  EXPECT_TRUE(w.flags & engine::kSendInline);
}

TEST(KernelRecords, GivenMoreSgesThanTheEngineTakesExpectEinval) {
  // The ABI allows 32; the device advertises the engine's 16.
  ibemu_data_send_wqe r = ud_send();
  r.num_sge = engine::DeviceLimits::kMaxSge + 1;
  engine::SendWqe w;
  EXPECT_EQ(kernel_records::to_send_wqe(r, &w), EINVAL);
  ibemu_data_recv_wqe rr{};
  rr.num_sge = engine::DeviceLimits::kMaxSge + 1;
  engine::RecvWqe rw;
  EXPECT_EQ(kernel_records::to_recv_wqe(rr, &rw), EINVAL);
}

TEST(KernelRecords, GivenAReceiveExpectTokenAndSges) {
  ibemu_data_recv_wqe r{};
  r.hdr.type = IBEMU_DATA_RECV_WQE;
  r.token = 77;
  r.qpn = 0xf00002;
  r.num_sge = 1;
  r.sge[0] = {0xffff888000003000, 4096 + 40, 0x200};
  r.hdr.length = uint16_t(ibemu_data_recv_wqe_length(1));
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::RecvWqe w;
  ASSERT_EQ(kernel_records::to_recv_wqe(r, &w), 0);
  EXPECT_EQ(w.wr_id, 77u);
  ASSERT_EQ(w.num_sge, 1);
  EXPECT_EQ(w.sge[0].length, 4136u);
}

TEST(KernelRecords, GivenAModifyToRtsExpectTheEngineAttributesAndMask) {
  ibemu_data_modify_qp m{};
  m.hdr = {IBEMU_DATA_MODIFY_QP, sizeof(m), 0, {}};
  m.qpn = 0xf00001;
  m.attr_mask = IBEMU_DATA_QP_STATE | IBEMU_DATA_QP_SQ_PSN | IBEMU_DATA_QP_PATH_MIG_STATE;
  m.modify_seq = 3;
  m.qp_state = uint8_t(QpState::kRts);
  m.sq_psn = 0xabcdef;
  m.qkey = 0x0b1b;
  m.pkey_index = 2;
  m.port = 1;
  engine::QpAttr a;
  uint32_t mask = 0;
  kernel_records::to_qp_attr(m, &a, &mask);
  // Path migration has only the one path here: nothing for the engine.
  EXPECT_EQ(mask, uint32_t(engine::kQpState | engine::kQpSqPsn));
  EXPECT_EQ(a.qp_state, QpState::kRts);
  EXPECT_EQ(a.sq_psn, 0xabcdefu);
  EXPECT_EQ(a.qkey, 0x0b1bu);
  EXPECT_EQ(a.pkey_index, 2);
  EXPECT_EQ(a.port_num, 1);
}

TEST(KernelRecords, GivenAReceiveCompletionExpectACqeTheModuleAccepts) {
  engine::Completion c;
  c.wr_id = 0xfeedface;
  c.status = WcStatus::kSuccess;
  c.opcode = WcOpcode::kRecv;
  c.byte_len = 2048;
  c.imm_data = 0x0a0b0c0d;
  c.qp_num = 0xf00001;
  c.src_qp = 0x11;
  c.wc_flags = engine::kWcGrh | engine::kWcWithImm;
  c.slid = 2;
  c.sl = 3;
  c.pkey_index = 1;
  const ibemu_data_cqe r = kernel_records::to_cqe(c, 9, true, 1);
  EXPECT_EQ(ibemu_data_record_valid(&r, sizeof r, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(r.hdr.index, 1);
  EXPECT_EQ(r.token, 0xfeedfaceu);
  EXPECT_EQ(r.cq, 9u);
  EXPECT_EQ(r.opcode, IBEMU_DATA_WC_RECV);
  EXPECT_EQ(r.flags, uint32_t(IBEMU_DATA_WC_GRH | IBEMU_DATA_WC_WITH_IMM));
  EXPECT_EQ(r.src_qp, 0x11u);
  EXPECT_EQ(r.slid, 2);
  EXPECT_EQ(r.solicited, 1);
}

TEST(KernelRecords, GivenAnErrorCompletionAndTheQpsNewStateExpectRecordsTheModuleAccepts) {
  engine::Completion c;
  c.wr_id = 1;
  c.status = WcStatus::kLocQpOpErr;
  c.opcode = WcOpcode::kSend;
  c.qp_num = 0xf00003;
  const ibemu_data_cqe cqe = kernel_records::to_cqe(c, 4, false, 0);
  EXPECT_EQ(ibemu_data_record_valid(&cqe, sizeof cqe, IBEMU_DATA_TO_MODULE), 0);
  const ibemu_data_event e =
      kernel_records::qp_event(0, 0xf00003, IBEMU_DATA_EVENT_QP_STATE, QpState::kSqe, 5);
  EXPECT_EQ(ibemu_data_record_valid(&e, sizeof e, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(e.object, IBEMU_DATA_EVENT_ON_QP);
  EXPECT_EQ(e.qp_state, uint8_t(QpState::kSqe));
  EXPECT_EQ(e.modify_seq, 5u);
}

// An RC QP's local operation: no SGEs, no destination.
ibemu_data_send_wqe local_op(uint8_t opcode) {
  ibemu_data_send_wqe r{};
  r.hdr.type = IBEMU_DATA_SEND_WQE;
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(0, 0));
  r.token = 0x2000000005;
  r.qpn = 0xf00004;
  r.flags = IBEMU_DATA_SEND_SIGNALED | IBEMU_DATA_SEND_FENCE;
  r.opcode = opcode;
  return r;
}

TEST(KernelRecords, GivenARegMrExpectTheEngineFastRegistrationWithTheModulesGeneration) {
  ibemu_data_send_wqe r = local_op(IBEMU_DATA_WR_REG_MR);
  r.reg.iova = 0xffff888004321010;
  r.reg.length = 3 * 4096 + 7;
  r.reg.key = 0x000123a5;
  r.reg.access = IBEMU_DATA_ACCESS_LOCAL_WRITE | IBEMU_DATA_ACCESS_REMOTE_WRITE;
  r.reg.generation = 9;
  r.reg.page_size = 4096;
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  ASSERT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  EXPECT_EQ(w.opcode, WrOpcode::kRegMr);
  EXPECT_EQ(w.flags, engine::kSendSignaled | engine::kSendFence);
  EXPECT_EQ(w.num_sge, 0);
  EXPECT_EQ(w.fast_reg.key, 0x000123a5u);
  EXPECT_EQ(w.fast_reg.iova, 0xffff888004321010u);
  EXPECT_EQ(w.fast_reg.length, 3u * 4096 + 7);
  EXPECT_EQ(w.fast_reg.access, engine::kAccessLocalWrite | engine::kAccessRemoteWrite);
  EXPECT_EQ(w.fast_reg.mapping, 9u);
}

TEST(KernelRecords, GivenALocalInvalidateExpectTheKeyToInvalidate) {
  ibemu_data_send_wqe r = local_op(IBEMU_DATA_WR_LOCAL_INV);
  r.imm_or_rkey = 0x000123a5;
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  ASSERT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  EXPECT_EQ(w.opcode, WrOpcode::kLocalInv);
  EXPECT_EQ(w.imm_or_rkey, 0x000123a5u);
  EXPECT_EQ(w.num_sge, 0);
}

TEST(KernelRecords, GivenASendWithInvalidateExpectThePeersKeyAndThePayload) {
  ibemu_data_send_wqe r = local_op(IBEMU_DATA_WR_SEND_WITH_INV);
  r.imm_or_rkey = 0x00abcd01;
  r.num_sge = 1;
  r.sge[0] = {0xffff888000005000, 64, 0x300};
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(1, 0));
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  ASSERT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  EXPECT_EQ(w.opcode, WrOpcode::kSendWithInv);
  EXPECT_EQ(w.imm_or_rkey, 0x00abcd01u);
  ASSERT_EQ(w.num_sge, 1);
  EXPECT_EQ(w.sge[0].length, 64u);
}

TEST(KernelRecords, GivenCompletionsOfRegistrationAndInvalidationExpectCqesTheModuleAccepts) {
  engine::Completion c;
  c.wr_id = 5;
  c.qp_num = 0xf00004;
  c.opcode = WcOpcode::kRegMr;
  ibemu_data_cqe r = kernel_records::to_cqe(c, 4, false, 0);
  EXPECT_EQ(ibemu_data_record_valid(&r, sizeof r, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(r.opcode, IBEMU_DATA_WC_REG_MR);
  // A receive that invalidated the sender's key names it.
  c.opcode = WcOpcode::kRecv;
  c.wc_flags = engine::kWcWithInv;
  c.imm_data = 0x00abcd01;
  r = kernel_records::to_cqe(c, 4, false, 0);
  EXPECT_EQ(ibemu_data_record_valid(&r, sizeof r, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(r.flags, uint32_t(IBEMU_DATA_WC_WITH_INV));
  EXPECT_EQ(r.imm_or_rkey, 0x00abcd01u);
}

// An RC QP's send WQE of `opcode` with one SGE, as the module builds it:
// no destination of its own (the QP's), 8 bytes of local memory.
ibemu_data_send_wqe rc_send(uint8_t opcode) {
  ibemu_data_send_wqe r = ud_send();
  r.av = {};
  r.remote_qpn = 0;
  r.remote_qkey = 0;
  r.imm_or_rkey = 0;
  r.flags = IBEMU_DATA_SEND_SIGNALED | IBEMU_DATA_SEND_FENCE;
  r.opcode = opcode;
  r.num_sge = 1;
  r.sge[0] = {0xffff888000004000, 8, 0x300};
  r.sge[1] = {};
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(r.num_sge, 0));
  return r;
}

engine::SendWqe converted(const ibemu_data_send_wqe& r) {
  EXPECT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::SendWqe w;
  EXPECT_EQ(kernel_records::to_send_wqe(r, &w), 0);
  EXPECT_EQ(w.wr_id, r.token);
  EXPECT_EQ(w.flags, engine::kSendSignaled | engine::kSendFence);
  return w;
}

TEST(KernelRecords, GivenRdmaWritesAndReadsExpectTheirOpcodesRemoteAddressAndRkey) {
  const std::pair<uint8_t, WrOpcode> ops[] = {
      {IBEMU_DATA_WR_RDMA_WRITE, WrOpcode::kRdmaWrite},
      {IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM, WrOpcode::kRdmaWriteWithImm},
      {IBEMU_DATA_WR_RDMA_READ, WrOpcode::kRdmaRead}};
  for (const auto& [abi, engine_opcode] : ops) {
    ibemu_data_send_wqe r = rc_send(abi);
    r.remote_addr = 0x7f0000001000;
    r.rkey = 0x1234500;
    if (abi == IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM) r.imm_or_rkey = 0xa1b2c3d4;
    const engine::SendWqe w = converted(r);
    EXPECT_EQ(w.opcode, engine_opcode);
    EXPECT_EQ(w.remote_addr, 0x7f0000001000u);
    EXPECT_EQ(w.rkey, 0x1234500u);
    EXPECT_EQ(w.imm_or_rkey, r.imm_or_rkey);
    ASSERT_EQ(w.num_sge, 1);
    EXPECT_EQ(w.sge[0].lkey, 0x300u);
  }
}

TEST(KernelRecords, GivenAtomicsExpectTheirOperandsInTheEngineWqe) {
  ibemu_data_send_wqe r = rc_send(IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP);
  r.remote_addr = 0x7f0000002008;
  r.rkey = 0x4400;
  r.compare_add = 0x1111;
  r.swap = 0x2222;
  engine::SendWqe w = converted(r);
  EXPECT_EQ(w.opcode, WrOpcode::kAtomicCmpAndSwp);
  EXPECT_EQ(w.remote_addr, 0x7f0000002008u);
  EXPECT_EQ(w.rkey, 0x4400u);
  EXPECT_EQ(w.compare_add, 0x1111u);
  EXPECT_EQ(w.swap, 0x2222u);
  r = rc_send(IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD);
  r.compare_add = 5;
  w = converted(r);
  EXPECT_EQ(w.opcode, WrOpcode::kAtomicFetchAndAdd);
  EXPECT_EQ(w.compare_add, 5u);
  EXPECT_EQ(w.sge[0].length, 8u);
}

TEST(KernelRecords, GivenSendWithInvalidateAndLocalInvalidateExpectTheRkeyToInvalidate) {
  ibemu_data_send_wqe r = rc_send(IBEMU_DATA_WR_SEND_WITH_INV);
  r.imm_or_rkey = 0x77700;
  engine::SendWqe w = converted(r);
  EXPECT_EQ(w.opcode, WrOpcode::kSendWithInv);
  EXPECT_EQ(w.imm_or_rkey, 0x77700u);
  // A local operation: no SGEs.
  r = rc_send(IBEMU_DATA_WR_LOCAL_INV);
  r.num_sge = 0;
  std::memset(r.sge, 0, sizeof(r.sge));
  r.hdr.length = uint16_t(ibemu_data_send_wqe_length(0, 0));
  r.imm_or_rkey = 0x77700;
  w = converted(r);
  EXPECT_EQ(w.opcode, WrOpcode::kLocalInv);
  EXPECT_EQ(w.imm_or_rkey, 0x77700u);
  EXPECT_EQ(w.num_sge, 0);
}

TEST(KernelRecords, GivenAnRcQpsModifiesToRtrAndRtsExpectEveryConnectionAttribute) {
  ibemu_data_modify_qp m{};
  m.hdr = {IBEMU_DATA_MODIFY_QP, sizeof(m), 0, {}};
  m.qpn = 0xf00010;
  m.modify_seq = 2;
  m.attr_mask = IBEMU_DATA_QP_STATE | IBEMU_DATA_QP_AV | IBEMU_DATA_QP_PATH_MTU |
                IBEMU_DATA_QP_DEST_QPN | IBEMU_DATA_QP_RQ_PSN | IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC |
                IBEMU_DATA_QP_MIN_RNR_TIMER | IBEMU_DATA_QP_ACCESS_FLAGS;
  m.qp_state = uint8_t(QpState::kRtr);
  m.av.dlid = 7;
  m.av.sl = 2;
  m.av.src_path_bits = 1;
  m.av.port = 1;
  m.av.is_global = 1;
  m.av.dgid[0] = 0xfe;
  m.av.dgid[15] = 0x42;
  m.av.flow_label = 0xabcde;
  m.av.hop_limit = 64;
  m.av.traffic_class = 3;
  m.path_mtu = 3;  // 1024
  m.dest_qpn = 0x000123;
  m.rq_psn = 0x654321;
  m.max_dest_rd_atomic = 16;
  m.min_rnr_timer = 12;
  m.access_flags = IBEMU_DATA_ACCESS_LOCAL_WRITE | IBEMU_DATA_ACCESS_REMOTE_WRITE |
                   IBEMU_DATA_ACCESS_REMOTE_READ | IBEMU_DATA_ACCESS_REMOTE_ATOMIC;
  ASSERT_EQ(ibemu_data_record_valid(&m, sizeof m, IBEMU_DATA_TO_DAEMON), 0);
  engine::QpAttr a;
  uint32_t mask = 0;
  kernel_records::to_qp_attr(m, &a, &mask);
  EXPECT_EQ(mask, m.attr_mask);
  EXPECT_EQ(a.qp_state, QpState::kRtr);
  EXPECT_EQ(a.ah.dlid, 7);
  EXPECT_EQ(a.ah.sl, 2);
  EXPECT_EQ(a.ah.src_path_bits, 1);
  EXPECT_EQ(a.ah.port_num, 1);
  EXPECT_TRUE(a.ah.is_global);
  EXPECT_EQ(a.ah.dgid[0], 0xfe);
  EXPECT_EQ(a.ah.dgid[15], 0x42);
  EXPECT_EQ(a.ah.flow_label, 0xabcdeu);
  EXPECT_EQ(a.ah.hop_limit, 64);
  EXPECT_EQ(a.ah.traffic_class, 3);
  EXPECT_EQ(a.path_mtu, 3u);
  EXPECT_EQ(a.dest_qp_num, 0x123u);
  EXPECT_EQ(a.rq_psn, 0x654321u);
  EXPECT_EQ(a.max_dest_rd_atomic, 16);
  EXPECT_EQ(a.min_rnr_timer, 12);
  EXPECT_EQ(a.qp_access_flags, uint32_t(engine::kAccessLocalWrite | engine::kAccessRemoteWrite |
                                        engine::kAccessRemoteRead | engine::kAccessRemoteAtomic));

  m.modify_seq = 3;
  m.attr_mask = IBEMU_DATA_QP_STATE | IBEMU_DATA_QP_TIMEOUT | IBEMU_DATA_QP_RETRY_CNT |
                IBEMU_DATA_QP_RNR_RETRY | IBEMU_DATA_QP_SQ_PSN | IBEMU_DATA_QP_MAX_QP_RD_ATOMIC;
  m.qp_state = uint8_t(QpState::kRts);
  m.timeout = 14;
  m.retry_cnt = 7;
  m.rnr_retry = 6;
  m.sq_psn = 0x123456;
  m.max_rd_atomic = 4;
  ASSERT_EQ(ibemu_data_record_valid(&m, sizeof m, IBEMU_DATA_TO_DAEMON), 0);
  kernel_records::to_qp_attr(m, &a, &mask);
  EXPECT_EQ(mask, m.attr_mask);
  EXPECT_EQ(a.qp_state, QpState::kRts);
  EXPECT_EQ(a.timeout, 14);
  EXPECT_EQ(a.retry_cnt, 7);
  EXPECT_EQ(a.rnr_retry, 6);
  EXPECT_EQ(a.sq_psn, 0x123456u);
  EXPECT_EQ(a.max_rd_atomic, 4);
}

TEST(KernelRecords, GivenTheCompletionsOfRcOperationsExpectTheirOpcodesForTheModule) {
  const std::pair<WcOpcode, uint8_t> ops[] = {
      {WcOpcode::kRdmaWrite, IBEMU_DATA_WC_RDMA_WRITE},
      {WcOpcode::kRdmaRead, IBEMU_DATA_WC_RDMA_READ},
      {WcOpcode::kCompSwap, IBEMU_DATA_WC_COMP_SWAP},
      {WcOpcode::kFetchAdd, IBEMU_DATA_WC_FETCH_ADD},
      {WcOpcode::kLocalInv, IBEMU_DATA_WC_LOCAL_INV},
      {WcOpcode::kRecvRdmaWithImm, IBEMU_DATA_WC_RECV_RDMA_WITH_IMM}};
  for (const auto& [engine_opcode, abi] : ops) {
    engine::Completion c;
    c.wr_id = 3;
    c.opcode = engine_opcode;
    c.byte_len = 8;
    c.qp_num = 0xf00010;
    const ibemu_data_cqe r = kernel_records::to_cqe(c, 2, false, 0);
    EXPECT_EQ(ibemu_data_record_valid(&r, sizeof r, IBEMU_DATA_TO_MODULE), 0);
    EXPECT_EQ(r.opcode, abi);
  }
  // A remote access error, and a receive that names the rkey it invalidated.
  engine::Completion c;
  c.status = WcStatus::kRemAccessErr;
  c.opcode = WcOpcode::kRdmaWrite;
  c.qp_num = 0xf00010;
  ibemu_data_cqe r = kernel_records::to_cqe(c, 2, false, 0);
  EXPECT_EQ(r.status, uint8_t(WcStatus::kRemAccessErr));
  c.status = WcStatus::kSuccess;
  c.opcode = WcOpcode::kRecv;
  c.wc_flags = engine::kWcWithInv;
  c.imm_data = 0x77700;
  r = kernel_records::to_cqe(c, 2, false, 0);
  EXPECT_EQ(ibemu_data_record_valid(&r, sizeof r, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(r.flags, uint32_t(IBEMU_DATA_WC_WITH_INV));
  EXPECT_EQ(r.imm_or_rkey, 0x77700u);
}

// A kernel SRQ's receive (ib_post_srq_recv): the record names the SRQ, not a
// QP; the engine's SRQ hands it to the QP that takes it with the module's
// token as wr_id.
TEST(KernelRecords, GivenAnSrqReceiveExpectTheEngineSrqToHandOutTheToken) {
  ibemu_data_recv_wqe r{};
  r.hdr.type = IBEMU_DATA_RECV_WQE;
  r.token = (uint64_t{5} << 33) | (uint64_t{1} << 32) | 7;
  r.srq = 3;
  r.num_sge = 2;
  r.sge[0] = {0xffff888000010000, 4096, 0x200};
  r.sge[1] = {0xffff888000020000, 4096, 0x200};
  r.hdr.length = uint16_t(ibemu_data_recv_wqe_length(r.num_sge));
  ASSERT_EQ(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  engine::RecvWqe w;
  ASSERT_EQ(kernel_records::to_recv_wqe(r, &w), 0);
  engine::SharedReceiveQueue srq(4, 2, nullptr);
  int bad = 0;
  ASSERT_EQ(srq.post(&w, 1, &bad), 0);
  engine::RecvWqe taken;
  ASSERT_TRUE(srq.take(&taken));
  EXPECT_EQ(taken.wr_id, r.token);
  ASSERT_EQ(taken.num_sge, 2);
  EXPECT_EQ(taken.sge[1].addr, 0xffff888000020000u);
  EXPECT_EQ(taken.length, 8192u);
}

// A record that names both a QP and an SRQ, or neither, is the module's bug.
TEST(KernelRecords, GivenAReceiveNamingQpAndSrqOrNeitherExpectTheChecksToRefuseIt) {
  ibemu_data_recv_wqe r{};
  r.hdr.type = IBEMU_DATA_RECV_WQE;
  r.hdr.length = uint16_t(ibemu_data_recv_wqe_length(0));
  r.qpn = 0xf00001;
  r.srq = 3;
  EXPECT_NE(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
  r.qpn = 0;
  r.srq = 0;
  EXPECT_NE(ibemu_data_record_valid(&r, r.hdr.length, IBEMU_DATA_TO_DAEMON), 0);
}

// The engine's SRQ fires its armed limit once, when a take leaves fewer
// WQEs than the limit (IBA 10.2.9.2); the plane hands that on as an SRQ
// event the module accepts.
TEST(KernelRecords, GivenAnSrqFallingBelowItsLimitExpectOneLimitEventTheModuleAccepts) {
  std::vector<ibemu_data_event> events;
  engine::SharedReceiveQueue srq(8, 1, [&] {
    events.push_back(kernel_records::object_event(1, IBEMU_DATA_EVENT_ON_SRQ, 6,
                                                  IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED));
  });
  ASSERT_EQ(srq.arm_limit(2), 0);
  engine::RecvWqe w{};
  w.num_sge = 0;
  int bad = 0;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(srq.post(&w, 1, &bad), 0);
  engine::RecvWqe taken;
  ASSERT_TRUE(srq.take(&taken));  // 3 left
  ASSERT_TRUE(srq.take(&taken));  // 2 left: not below the limit
  EXPECT_TRUE(events.empty());
  ASSERT_TRUE(srq.take(&taken));  // 1 left
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(srq.take(&taken));
  EXPECT_EQ(events.size(), 1u);  // disarmed
  EXPECT_EQ(srq.limit(), 0u);
  const ibemu_data_event& e = events[0];
  EXPECT_EQ(ibemu_data_record_valid(&e, sizeof e, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(e.hdr.index, 1);
  EXPECT_EQ(e.object, IBEMU_DATA_EVENT_ON_SRQ);
  EXPECT_EQ(e.handle, 6u);
  EXPECT_EQ(e.event, IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(e.qp_state, 0);
}

// A QP on an SRQ that enters ERR: LAST_WQE_REACHED with its state and the
// modify it follows, which the module uses to drop a stale one.
TEST(KernelRecords, GivenLastWqeReachedExpectAQpEventWithStateAndModifySeq) {
  const ibemu_data_event e =
      kernel_records::qp_event(0, 0xf00009, IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED, QpState::kErr, 4);
  EXPECT_EQ(ibemu_data_record_valid(&e, sizeof e, IBEMU_DATA_TO_MODULE), 0);
  EXPECT_EQ(e.object, IBEMU_DATA_EVENT_ON_QP);
  EXPECT_EQ(e.qp_state, uint8_t(QpState::kErr));
  EXPECT_EQ(e.modify_seq, 4u);
  // An SRQ's event that claims a QP state is malformed.
  ibemu_data_event bad =
      kernel_records::object_event(0, IBEMU_DATA_EVENT_ON_SRQ, 2, IBEMU_DATA_EVENT_SRQ_ERR);
  EXPECT_EQ(ibemu_data_record_valid(&bad, sizeof bad, IBEMU_DATA_TO_MODULE), 0);
  bad.qp_state = uint8_t(QpState::kErr);
  EXPECT_NE(ibemu_data_record_valid(&bad, sizeof bad, IBEMU_DATA_TO_MODULE), 0);
}

}  // namespace
}  // namespace ibemu
