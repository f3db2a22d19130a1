// IBEMU_TRACE's lines: the settings, the file name, verb lines and packet lines.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "provider/core/diagnostics.h"
#include "provider/core/packet_trace.h"
#include "provider/core/verb_trace.h"
#include "transport/wire/packet.h"

using namespace ibemu;
using namespace ibemu::provider;

namespace {

TEST(TraceSetting, GivenWordsExpectTheirChannels) {
  using namespace diagnostics;
  EXPECT_EQ(parse_trace_setting("verbs"), unsigned(kVerbs));
  EXPECT_EQ(parse_trace_setting("packets"), unsigned(kPackets));
  EXPECT_EQ(parse_trace_setting("verbs,packets"), unsigned(kVerbs | kPackets));
  EXPECT_EQ(parse_trace_setting("all"), unsigned(kVerbs | kPackets));
  // Unknown words are skipped, so a newer setting still works here.
  EXPECT_EQ(parse_trace_setting("timers,packets,"), unsigned(kPackets));
  EXPECT_EQ(parse_trace_setting(""), 0u);
  EXPECT_EQ(parse_trace_setting("verb"), 0u);
}

TEST(TraceFile, GivenPercentPExpectThePid) {
  EXPECT_EQ(diagnostics::trace_file_name("/var/tmp/trace.%p.log", 4242), "/var/tmp/trace.4242.log");
  EXPECT_EQ(diagnostics::trace_file_name("t-%p-%p", 7), "t-7-7");
  EXPECT_EQ(diagnostics::trace_file_name("plain.log", 7), "plain.log");
  EXPECT_EQ(diagnostics::trace_file_name("odd%", 7), "odd%");
  EXPECT_EQ(diagnostics::trace_file_name("%q", 7), "%q");
}

TEST(VerbTrace, GivenResultsExpectErrnoNames) {
  EXPECT_EQ(verb_trace::result(0), "= 0");
  EXPECT_EQ(verb_trace::result(EINVAL), "= 22 (EINVAL: Invalid argument)");
  EXPECT_EQ(verb_trace::null_result(ENOMEM), "= NULL (ENOMEM: Cannot allocate memory)");
}

TEST(VerbTrace, GivenAccessFlagsExpectNames) {
  EXPECT_EQ(verb_trace::access_flags(0), "0");
  EXPECT_EQ(verb_trace::access_flags(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            "LOCAL_WRITE|REMOTE_READ");
  EXPECT_EQ(verb_trace::access_flags(IBV_ACCESS_REMOTE_WRITE | (1u << 30)),
            "REMOTE_WRITE|0x40000000");
}

TEST(VerbTrace, GivenRtrAttributesExpectTheMaskedOnes) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x12;
  a.rq_psn = 0x4d2;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = 2;
  a.ah_attr.port_num = 1;
  a.timeout = 14;  // not in the mask: must not show
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(verb_trace::qp_attr(a, mask),
            "state RTR ah {dlid 2 sl 0 src_path_bits 0 port 1} path_mtu 1024 rq_psn 0x4d2 "
            "min_rnr_timer 12 max_dest_rd_atomic 1 dest_qp 0x12");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0xabc;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  EXPECT_EQ(verb_trace::qp_attr(a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY),
            "state RTS timeout 14 retry_cnt 7 rnr_retry 7 sq_psn 0xabc");
}

TEST(VerbTrace, GivenASendChainExpectEachWr) {
  ibv_sge sge{0x7f0000001000, 4096, 0x101};
  ibv_send_wr write{};
  write.wr_id = 2;
  write.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  write.imm_data = htonl(0xdeadbeef);
  write.wr.rdma.remote_addr = 0x2000;
  write.wr.rdma.rkey = 0x202;
  ibv_send_wr send{};
  send.wr_id = 1;
  send.opcode = IBV_WR_SEND;
  send.send_flags = IBV_SEND_SIGNALED;
  send.sg_list = &sge;
  send.num_sge = 1;
  send.next = &write;
  EXPECT_EQ(verb_trace::send_wrs(&send),
            "wr_id 1 SEND signaled sge [0x7f0000001000+4096 lkey 0x101]; "
            "wr_id 2 RDMA_WRITE_WITH_IMM sge [] imm 0xdeadbeef remote 0x2000 rkey 0x202");
}

TEST(VerbTrace, GivenAnAtomicAndAnInlineWrExpectTheirFields) {
  ibv_send_wr cas{};
  cas.wr_id = 9;
  cas.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  cas.wr.atomic.remote_addr = 0x3000;
  cas.wr.atomic.rkey = 0x303;
  cas.wr.atomic.compare_add = 1;
  cas.wr.atomic.swap = 2;
  EXPECT_EQ(verb_trace::send_wrs(&cas),
            "wr_id 9 ATOMIC_CMP_AND_SWP sge [] remote 0x3000 rkey 0x303 compare 0x1 swap 0x2");
  ibv_sge sges[2] = {{0x10, 3, 0}, {0x20, 5, 0}};
  ibv_send_wr in{};
  in.opcode = IBV_WR_SEND;
  in.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  in.sg_list = sges;
  in.num_sge = 2;
  EXPECT_EQ(verb_trace::send_wrs(&in), "wr_id 0 SEND signaled|inline inline 8 bytes");
}

TEST(VerbTrace, GivenWqesOfARegionExpectTheSameFormAsPostSend) {
  engine::SendWqe w;
  w.wr_id = 5;
  w.opcode = engine::WrOpcode::kRdmaRead;
  w.flags = engine::kSendSignaled;
  w.num_sge = 1;
  w.sge[0] = {0x1000, 64, 0x11};
  w.remote_addr = 0x9000;
  w.rkey = 0x22;
  EXPECT_EQ(verb_trace::send_wqes(&w, 1),
            "wr_id 5 RDMA_READ signaled sge [0x1000+64 lkey 0x11] remote 0x9000 rkey 0x22");
}

TEST(VerbTrace, GivenRecvWrsExpectTheirSges) {
  ibv_sge sge{0x5000, 100, 0x7};
  ibv_recv_wr second{};
  second.wr_id = 4;
  ibv_recv_wr first{};
  first.wr_id = 3;
  first.sg_list = &sge;
  first.num_sge = 1;
  first.next = &second;
  EXPECT_EQ(verb_trace::recv_wrs(&first), "wr_id 3 sge [0x5000+100 lkey 0x7]; wr_id 4 sge []");
}

TEST(VerbTrace, GivenCompletionsExpectWhatTheirStatusMakesValid) {
  ibv_wc wc{};
  wc.wr_id = 7;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = 4096;
  wc.qp_num = 0x11;
  wc.src_qp = 0x12;
  wc.slid = 2;
  wc.wc_flags = IBV_WC_WITH_IMM;
  wc.imm_data = htonl(0x1234);
  EXPECT_EQ(verb_trace::work_completion(wc),
            "{wr_id 7 status success RECV byte_len 4096 qp 0x11 src_qp 0x12 slid 2 sl 0 imm "
            "0x00001234}");
  wc.status = IBV_WC_RETRY_EXC_ERR;
  wc.vendor_err = 0x81;
  EXPECT_EQ(verb_trace::work_completion(wc),
            "{wr_id 7 status 12 (transport retry counter exceeded) vendor_err 0x81 qp 0x11}");
}

std::vector<uint8_t> packet(wire::Opcode op, uint8_t syndrome) {
  wire::PacketHeaders h;
  h.lrh.set_dlid(1);
  h.lrh.set_slid(2);
  h.bth.set_opcode(static_cast<uint8_t>(op));
  h.bth.set_pkey(0xffff);
  h.bth.set_dest_qp(0x11);
  h.bth.set_psn(0x3f2a1c);
  h.aeth.set_syndrome(syndrome);
  h.aeth.set_msn(5);
  std::vector<uint8_t> buf(wire::kMaxHeaders + 16 + 9);
  const size_t hl = wire::write_headers(buf.data(), h);
  const size_t payload = op == wire::Opcode::kRcSendOnly ? 16 : 0;
  buf.resize(wire::finalize_packet(buf.data(), hl, payload, /*compute_crcs=*/false));
  return buf;
}

TEST(PacketTrace, GivenAcksAndNaksExpectTheSyndromeDecoded) {
  auto ack =
      packet(wire::Opcode::kRcAcknowledge, wire::make_ack_syndrome(wire::kAethCreditInvalid));
  EXPECT_EQ(packet_trace_line("rx", ack.data(), ack.size()),
            "rx RC_ACKNOWLEDGE dlid=1 slid=2 qpn=0x000011 psn=0x3f2a1c len=0 sl=0 vl=0 "
            "pkey=0xffff aeth=ACK credits=invalid msn=0x000005");
  auto rnr = packet(wire::Opcode::kRcAcknowledge, wire::make_rnr_nak_syndrome(14));
  EXPECT_NE(packet_trace_line("rx", rnr.data(), rnr.size()).find("aeth=RNR_NAK timer=14"),
            std::string::npos);
  auto nak = packet(wire::Opcode::kRcAcknowledge,
                    wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_NE(packet_trace_line("rx", nak.data(), nak.size()).find("aeth=NAK(PSN_SEQUENCE_ERROR)"),
            std::string::npos)
      << packet_trace_line("rx", nak.data(), nak.size());
}

TEST(PacketTrace, GivenASendExpectItsLengthAndANote) {
  auto send = packet(wire::Opcode::kRcSendOnly, 0);
  EXPECT_EQ(packet_trace_line("drop", send.data(), send.size(), "injected loss"),
            "drop RC_SEND_ONLY dlid=1 slid=2 qpn=0x000011 psn=0x3f2a1c len=16 sl=0 vl=0 "
            "pkey=0xffff (injected loss)");
}

TEST(PacketTrace, GivenBytesThatAreNoPacketExpectTheParseError) {
  const uint8_t junk[4] = {1, 2, 3, 4};
  const std::string line = packet_trace_line("rx", junk, sizeof junk);
  EXPECT_EQ(line.rfind("rx MALFORMED(", 0), 0u) << line;
  EXPECT_NE(line.find("len=4"), std::string::npos) << line;
}

}  // namespace
