// XRC across contexts (IBA annex A14, xrc_forwarding.h): given an XRC send QP
// on HCA R, an XRC receive QP in context A of HCA T and an XRC SRQ of the same
// domain in context B of T, expect A to answer as the responder and B to
// execute: completions on B's CQ, data in B's memory, RNR while B's SRQ is
// empty, B's keys and PD checked, READ responses and atomics from B, later
// packets held back until B's verdict, and other QPs of A unaffected.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using testing::kLidA;
using testing::kLidB;
using testing::kLocal;
using testing::kPd;
using testing::kRemote;

constexpr uint32_t kXrcd = 7, kOtherXrcd = 8;
constexpr uint32_t kSrqnB = 0x70, kSrqnOtherDomain = 0x71, kSrqnA = 0x72;
constexpr uint32_t kSendQpn = 0x31, kSendQpn2 = 0x32, kRecvQpn = 0x42, kRecvQpn2 = 0x43;
constexpr uint64_t kContextA = 0xa, kContextB = 0xb;

/// One context of HCA T: its own engine and CQ, at T's LID and port GUID.
struct Context {
  Context(testing::FakeLink& link, uint64_t id, const Clock& clock)
      : ports(kLidB, testing::kGuidB), engine(&link, &ports, nullptr, &link, id), cq(64, nullptr) {
    engine.set_clock(&clock);
    link.attach(kLidB, &engine);
    link.attach_context(id, &engine);
  }
  std::vector<Completion> poll() {
    std::vector<Completion> out(64);
    out.resize(static_cast<size_t>(cq.poll(64, out.data())));
    return out;
  }
  testing::FakePorts ports;
  HcaEngine engine;
  CompletionQueue cq;
};

struct XrcAcrossContexts : ::testing::Test {
  explicit XrcAcrossContexts(uint32_t path_mtu = 5)
      : r(link, kLidA, testing::kGuidA, 0x11, {}, clock),
        a(link, kContextA, clock),
        b(link, kContextB, clock),
        srq_b(16, 4, nullptr),
        srq_other(16, 4, nullptr),
        srq_a(16, 4, nullptr) {
    srq_b.set_xrc(XrcBinding{kSrqnB, kXrcd, kPd, &b.cq});
    srq_other.set_xrc(XrcBinding{kSrqnOtherDomain, kOtherXrcd, kPd, &b.cq});
    srq_a.set_xrc(XrcBinding{kSrqnA, kXrcd, kPd, &a.cq});
    b.engine.srqs().add(kSrqnB, &srq_b);
    b.engine.srqs().add(kSrqnOtherDomain, &srq_other);
    a.engine.srqs().add(kSrqnA, &srq_a);
    link.attach_srq(kSrqnB, kContextB);
    link.attach_srq(kSrqnOtherDomain, kContextB);
    link.attach_srq(kSrqnA, kContextA);
    send = connect_pair(kSendQpn, kRecvQpn, path_mtu, &recv);
    src = testing::register_region(r.engine, 1 << 16, kLocal | kAccessRemoteWrite, 0x3c);
    dst = testing::register_region(b.engine, 1 << 16, kRemote | kAccessRemoteAtomic, 0);
  }

  /// An XRC send QP on R to RTS and an XRC receive QP of A to RTR.
  std::shared_ptr<Qp> connect_pair(uint32_t send_qpn, uint32_t recv_qpn, uint32_t path_mtu,
                                   std::shared_ptr<Qp>* recv_out, uint8_t timeout = 8) {
    QpInit init;
    init.type = QpType::kXrcSend;
    init.qpn = send_qpn;
    init.pd = kPd;
    init.send_cq = &r.send_cq;
    init.max_send_wr = 64;
    init.max_send_sge = 4;
    auto s = r.engine.create_qp(init, nullptr);
    QpInit rinit;
    rinit.type = QpType::kXrcRecv;
    rinit.qpn = recv_qpn;
    rinit.xrcd = kXrcd;
    auto t = a.engine.create_qp(rinit, [this](uint32_t, QpEvent e) { a_events.push_back(e); });
    testing::ConnectParams p;
    p.path_mtu = path_mtu;
    p.max_rd_atomic = 4;
    p.timeout = timeout;
    testing::connect_qp(*s, p, kLidB, recv_qpn, 0x100, 0x200, kRemote);
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.port_num = 1;
    at.qp_access_flags = kRemote | kAccessRemoteAtomic;
    EXPECT_EQ(t->modify(at, testing::init_mask(QpType::kRc)), 0);
    at.qp_state = QpState::kRtr;
    at.ah.dlid = kLidA;
    at.ah.port_num = 1;
    at.path_mtu = path_mtu;
    at.dest_qp_num = send_qpn;
    at.rq_psn = 0x200;
    at.max_dest_rd_atomic = 4;
    at.min_rnr_timer = 1;
    EXPECT_EQ(t->modify(at, testing::rtr_mask(QpType::kRc)), 0);
    *recv_out = t;
    return s;
  }

  static SendWqe to(SendWqe w, uint32_t srqn) {
    w.remote_srqn = srqn;
    return w;
  }
  void post_b(uint64_t wr_id, const std::vector<Sge>& sges) {
    RecvWqe w = testing::recv_wr(wr_id, sges);
    int bad;
    ASSERT_EQ(srq_b.post(&w, 1, &bad), 0);
  }
  /// Delivers packets and messages, runs the timers and polls R's CQ.
  bool run_until(const std::function<bool()>& done, int rounds = 2000) {
    for (int i = 0; i < rounds; ++i) {
      link.deliver_all();
      for (HcaEngine* e : {&r.engine, &a.engine, &b.engine}) e->run_timers(clock.now());
      link.deliver_all();
      r.poll();
      if (done()) return true;
      clock.advance(std::chrono::microseconds(20));
    }
    return false;
  }
  size_t acks_of(wire::AckType type) const {
    size_t n = 0;
    for (const testing::WirePacket& p : link.log())
      if (p.slid() == kLidB && p.is_ack() && p.ack_type() == type) ++n;
    return n;
  }

  testing::FakeLink link;
  testing::ManualClock clock;
  testing::Endpoint r;
  Context a, b;
  SharedReceiveQueue srq_b, srq_other, srq_a;
  std::shared_ptr<Qp> send, recv;
  testing::Region src, dst;
  std::vector<QpEvent> a_events;
};

TEST_F(XrcAcrossContexts, GivenSendForAnotherContextsSrqExpectItsWqeItsCqAndAnAckFromTheQp) {
  post_b(5, {dst.sge(0, 100)});
  ASSERT_EQ(
      testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 64)}), kSrqnB)), 0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u) << "the completion is on the SRQ's CQ, in the SRQ's context";
  EXPECT_EQ(wcs[0].wr_id, 5u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(wcs[0].byte_len, 64u);
  EXPECT_EQ(wcs[0].qp_num, kRecvQpn) << "it names the receive QP";
  EXPECT_EQ(wcs[0].src_qp, kSendQpn);
  EXPECT_EQ(wcs[0].slid, kLidA);
  EXPECT_EQ(dst.bytes[63], 0x3c);
  EXPECT_EQ(dst.bytes[64], 0);
  EXPECT_TRUE(a.poll().empty());
  EXPECT_EQ(acks_of(wire::AckType::kAck), 1u);
  EXPECT_EQ(link.log().back().opcode(), 0xb1) << "XRC_ACKNOWLEDGE, from the receive QP";
  EXPECT_EQ(recv->state(), QpState::kRtr);
}

TEST_F(XrcAcrossContexts, GivenTheSrqEmptyExpectRnrNaksUntilItsOwnerPostsAWqe) {
  ASSERT_EQ(testing::post(*send,
                          to(testing::send_wr(1, WrOpcode::kSendWithImm, {src.sge(0, 8)}), kSrqnB)),
            0);
  ASSERT_FALSE(run_until([&] { return !r.send_wcs.empty(); }, 50));
  EXPECT_GE(acks_of(wire::AckType::kRnrNak), 1u) << "RNR NAK with the QP's min_rnr_timer";
  EXPECT_EQ(acks_of(wire::AckType::kAck), 0u);
  post_b(9, {dst.sge(0, 8)});
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u) << "executed once, after the RNR NAKs";
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(wcs[0].wc_flags & kWcWithImm, uint32_t{kWcWithImm});
  EXPECT_EQ(recv->state(), QpState::kRtr);
}

struct XrcAcrossContextsSmallMtu : XrcAcrossContexts {
  XrcAcrossContextsSmallMtu() : XrcAcrossContexts(1) {}  // 256-byte packets
};

TEST_F(XrcAcrossContextsSmallMtu, GivenMultiPacketSendExpectOneWqeScatteredAcrossItsSges) {
  post_b(1, {dst.sge(0, 300), dst.sge(1000, 300), dst.sge(2000, 500)});
  post_b(2, {dst.sge(4000, 16)});
  const std::vector<uint8_t> data = testing::pattern(1000, 3);
  std::copy(data.begin(), data.end(), src.bytes.begin());
  ASSERT_EQ(
      testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 1000)}), kSrqnB)),
      0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].byte_len, 1000u);
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + 300, dst.bytes.begin()));
  EXPECT_TRUE(std::equal(data.begin() + 300, data.begin() + 600, dst.bytes.begin() + 1000));
  EXPECT_TRUE(std::equal(data.begin() + 600, data.end(), dst.bytes.begin() + 2000));
  EXPECT_FALSE(srq_b.empty()) << "the message took one WQE";
}

TEST_F(XrcAcrossContextsSmallMtu, GivenRdmaWriteExpectTheOwnersMemoryWrittenAndImmOnItsCq) {
  const std::vector<uint8_t> data = testing::pattern(3000, 5);
  std::copy(data.begin(), data.end(), src.bytes.begin());
  SendWqe w = testing::write_wr(1, {src.sge(0, 3000)}, dst.addr(100), dst.key);
  ASSERT_EQ(testing::post(*send, to(w, kSrqnB)), 0);
  ASSERT_TRUE(run_until([&] { return r.send_wcs.size() == 1; }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), dst.bytes.begin() + 100));
  EXPECT_EQ(dst.bytes[99], 0);
  EXPECT_EQ(dst.bytes[3100], 0);
  EXPECT_TRUE(b.poll().empty()) << "a WRITE without immediate takes no WQE";

  post_b(7, {dst.sge(5000, 4)});
  w = testing::write_wr(2, {src.sge(0, 600)}, dst.addr(8000), dst.key);
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.imm_or_rkey = 0x12345678;
  ASSERT_EQ(testing::post(*send, to(w, kSrqnB)), 0);
  ASSERT_TRUE(run_until([&] { return r.send_wcs.size() == 2; }));
  EXPECT_EQ(r.send_wcs[1].status, WcStatus::kSuccess);
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(wcs[0].byte_len, 600u);
  EXPECT_EQ(wcs[0].imm_data, 0x12345678u);
}

TEST_F(XrcAcrossContexts, GivenKeyOfAnotherPdExpectRemoteAccessErrorAndTheQpInError) {
  testing::Region other;
  other.bytes.assign(256, 0);
  other.key = b.engine.mrs().add(kPd + 1, other.bytes.data(), other.addr(), 256, kRemote);
  other.mrs = &b.engine.mrs();
  ASSERT_EQ(testing::post(
                *send, to(testing::write_wr(1, {src.sge(0, 32)}, other.addr(), other.key), kSrqnB)),
            0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(recv->state(), QpState::kErr);
  EXPECT_EQ(other.bytes[0], 0);
  EXPECT_NE(std::find(a_events.begin(), a_events.end(), QpEvent::kAccessErr), a_events.end())
      << "QP_ACCESS_ERR on the receive QP, in its context";
}

TEST_F(XrcAcrossContexts, GivenReceiveBufferWithABadKeyExpectProtectionErrorOnTheOwnersCq) {
  post_b(3, {Sge{dst.addr(0), 64, dst.key ^ 0xff}});
  ASSERT_EQ(
      testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 16)}), kSrqnB)), 0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kRemOpErr);
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(recv->state(), QpState::kErr);
}

TEST_F(XrcAcrossContextsSmallMtu, GivenReadExpectResponsesFromTheOwnersMemory) {
  const std::vector<uint8_t> data = testing::pattern(1100, 9);
  std::copy(data.begin(), data.end(), dst.bytes.begin() + 200);
  ASSERT_EQ(
      testing::post(*send,
                    to(testing::read_wr(1, {src.sge(4096, 1100)}, dst.addr(200), dst.key), kSrqnB)),
      0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), src.bytes.begin() + 4096));
  size_t responses = 0;
  for (const testing::WirePacket& p : link.log())
    if (p.slid() == kLidB && (p.flags() & wire::kIsReadResponse)) ++responses;
  EXPECT_EQ(responses, 5u) << "1100 bytes at 256 a packet";

  // Then a SEND: the PSNs and MSN ran on through the READ.
  post_b(4, {dst.sge(0, 16)});
  ASSERT_EQ(
      testing::post(*send, to(testing::send_wr(2, WrOpcode::kSend, {src.sge(0, 16)}), kSrqnB)), 0);
  ASSERT_TRUE(run_until([&] { return r.send_wcs.size() == 2; }));
  EXPECT_EQ(r.send_wcs[1].status, WcStatus::kSuccess);
}

TEST_F(XrcAcrossContexts, GivenAtomicWhoseAckIsLostExpectItExecutedOnceInTheOwnersMemory) {
  uint64_t* word = reinterpret_cast<uint64_t*>(dst.bytes.data() + 64);
  *word = 40;
  bool dropped = false;
  link.policy = [&](const testing::WirePacket& p) {
    if (!dropped && (p.flags() & wire::kIsAtomicAck)) {
      dropped = true;
      return testing::Fate::kDrop;
    }
    return testing::Fate::kDeliver;
  };
  ASSERT_EQ(testing::post(*send, to(testing::atomic_wr(1, WrOpcode::kAtomicFetchAndAdd,
                                                       {src.sge(0, 8)}, dst.addr(64), dst.key, 2),
                                    kSrqnB)),
            0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  EXPECT_TRUE(dropped);
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(*word, 42u) << "the resent request got the saved result";
  uint64_t orig;
  std::memcpy(&orig, src.bytes.data(), 8);
  EXPECT_EQ(orig, 40u);

  ASSERT_EQ(
      testing::post(*send, to(testing::atomic_wr(2, WrOpcode::kAtomicCmpAndSwp, {src.sge(8, 8)},
                                                 dst.addr(64), dst.key, 42, 7),
                              kSrqnB)),
      0);
  ASSERT_TRUE(run_until([&] { return r.send_wcs.size() == 2; }));
  EXPECT_EQ(*word, 7u);
}

TEST_F(XrcAcrossContexts, GivenSrqNobodyHasOrOfAnotherDomainExpectInvalidRequest) {
  for (uint32_t srqn : {uint32_t{0x99}, kSrqnOtherDomain}) {
    SCOPED_TRACE(srqn);
    if (srqn == kSrqnOtherDomain) {
      r.send_wcs.clear();
      send = connect_pair(kSendQpn2, kRecvQpn2, 5, &recv);
    }
    ASSERT_EQ(testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 8)}), srqn)),
              0);
    ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
    EXPECT_EQ(r.send_wcs[0].status, WcStatus::kRemInvReqErr);
    EXPECT_EQ(recv->state(), QpState::kErr);
  }
  EXPECT_TRUE(b.poll().empty());
}

TEST_F(XrcAcrossContexts, GivenAVerdictOutstandingExpectLaterPacketsToWaitAndOtherQpsToGoOn) {
  std::shared_ptr<Qp> recv2;
  auto send2 = connect_pair(kSendQpn2, kRecvQpn2, 5, &recv2);
  for (uint64_t id : {1, 2, 3}) post_b(id, {dst.sge(100 * id, 16)});
  RecvWqe w = testing::recv_wr(9, {dst.sge(1000, 16)});
  int bad;
  ASSERT_EQ(srq_a.post(&w, 1, &bad), 0);
  // Nothing reaches B for now: A's first request waits for its verdict.
  link.hold_messages_to = [](uint64_t context) { return context == kContextB; };
  for (uint64_t id : {1, 2, 3})
    ASSERT_EQ(
        testing::post(*send, to(testing::send_wr(id, WrOpcode::kSend, {src.sge(0, 8)}), kSrqnB)),
        0);
  ASSERT_EQ(
      testing::post(*send2, to(testing::send_wr(4, WrOpcode::kSend, {src.sge(0, 8)}), kSrqnA)), 0);
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }));
  ASSERT_EQ(r.send_wcs.size(), 1u);
  EXPECT_EQ(r.send_wcs[0].wr_id, 4u) << "another QP of A, on A's own SRQ, went on";
  EXPECT_EQ(a.poll().size(), 1u);
  const size_t sent = link.messages_sent;
  EXPECT_FALSE(run_until([&] { return r.send_wcs.size() > 1; }, 20));
  EXPECT_EQ(link.messages_sent, sent) << "one request at a time goes to B";

  link.hold_messages_to = nullptr;
  link.release_messages();
  ASSERT_TRUE(run_until([&] { return r.send_wcs.size() == 4; }));
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(testing::ids(wcs), (std::vector<uint64_t>{1, 2, 3})) << "in order, none lost";
  EXPECT_EQ(acks_of(wire::AckType::kRnrNak), 0u);
}

TEST_F(XrcAcrossContexts, GivenTheOwnerGoneWithARequestExpectTheResendRefused) {
  // A local ACK timeout of 4.096 us * 2^17, about 0.5 s: the requester
  // resends after the receive QP stopped waiting for the vanished owner.
  send = connect_pair(kSendQpn2, kRecvQpn2, 5, &recv, 17);
  post_b(1, {dst.sge(0, 8)});
  link.hold_messages_to = [](uint64_t context) { return context == kContextB; };
  ASSERT_EQ(testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 8)}), kSrqnB)),
            0);
  link.deliver_all();
  ASSERT_EQ(link.messages_sent, 1u);
  link.detach_srq(kSrqnB);  // B's process exits with the request
  ASSERT_TRUE(run_until([&] { return !r.send_wcs.empty(); }, 200'000));
  EXPECT_EQ(r.send_wcs[0].status, WcStatus::kRemInvReqErr) << "as for an SRQ that is gone";
  EXPECT_EQ(recv->state(), QpState::kErr);
}

TEST_F(XrcAcrossContextsSmallMtu, GivenTheQpFailingMidMessageExpectItsWqeFlushedOnTheOwnersCq) {
  post_b(6, {dst.sge(0, 2000)});
  // Only the first packet of the SEND arrives; then the QP is moved to ERR.
  link.policy = [](const testing::WirePacket& p) {
    return p.is_request() && !(p.flags() & wire::kIsFirst) ? testing::Fate::kDrop
                                                           : testing::Fate::kDeliver;
  };
  ASSERT_EQ(
      testing::post(*send, to(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 1000)}), kSrqnB)),
      0);
  run_until([] { return false; }, 5);
  EXPECT_TRUE(b.poll().empty()) << "the message holds its WQE";
  QpAttr at;
  at.qp_state = QpState::kErr;
  ASSERT_EQ(recv->modify(at, kQpState), 0);
  link.deliver_all();
  auto wcs = b.poll();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 6u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wcs[0].qp_num, kRecvQpn);
}

}  // namespace
}  // namespace ibemu::engine
