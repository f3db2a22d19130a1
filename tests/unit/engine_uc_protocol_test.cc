// The UC transport end to end (IBA 9.8): like RC without responses. A send
// WQE completes once its last packet is sent; the responder drops a message
// with a missing packet silently and never answers.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::ConnectParams;
using testing::EnginePair;
using testing::expect_all;
using testing::Fate;
using testing::ids;
using testing::kLidA;
using testing::kLidB;
using testing::Message;
using testing::Target;
using testing::WirePacket;

ConnectParams uc(uint32_t path_mtu = 5) {
  ConnectParams p;
  p.type = QpType::kUc;
  p.path_mtu = path_mtu;
  return p;
}

TEST(UcProtocol, GivenSendsOfEverySizeExpectDeliveredAndCompletedWithoutAcks) {
  EnginePair pair(uc(1));
  const size_t sizes[] = {0, 1, 255, 256, 257, 10 * 256 + 3};
  std::vector<Message> msgs;
  for (size_t len : sizes) msgs.emplace_back(pair.a, pair.b, len, uint32_t(len));
  for (size_t i = 0; i < msgs.size(); ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(100 + i, msgs[i].recv_sges)), 0);
  for (size_t i = 0; i < msgs.size(); ++i)
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, msgs[i].send_sges)),
              0);
  ASSERT_TRUE(pair.run_until([&] {
    return pair.a.send_wcs.size() == msgs.size() && pair.b.recv_wcs.size() == msgs.size();
  }));
  pair.run_for(5ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{100, 101, 102, 103, 104, 105}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
  for (size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_EQ(pair.b.recv_wcs[i].byte_len, sizes[i]);
    msgs[i].expect_delivered();
  }
  EXPECT_TRUE(pair.acks_from(kLidB).empty());
  for (const WirePacket& p : pair.requests_from(kLidA)) {
    EXPECT_EQ(p.opcode() & 0xe0, 0x20) << "not a UC opcode";
    EXPECT_FALSE(p.view().bth().ack_req());
  }
}

TEST(UcProtocol, GivenSendCompletesWhenSentExpectNoWaitForTheReceiver) {
  EnginePair pair(uc());
  Message m(pair.a, pair.b, 5000, 1);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  pair.a.poll();
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  pair.run_for(20ms);  // no retransmission, no error: UC has no timers
  EXPECT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.requests_from(kLidA).size(), 2u);
  EXPECT_EQ(pair.a.state(), QpState::kRts);
}

TEST(UcProtocol, GivenRdmaWritesExpectDataAndImmediate) {
  EnginePair pair(uc());
  Message plain(pair.a, pair.b, 3 * 4096 + 1, 11), with_imm(pair.a, pair.b, 4096, 12);
  Target t1(pair.b, plain.data.size()), t2(pair.b, with_imm.data.size());
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(7, with_imm.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(1, plain.send_sges, t1.va(), t1.rkey())),
            0);
  SendWqe w = testing::write_wr(2, with_imm.send_sges, t2.va(), t2.rkey());
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.imm_or_rkey = 0xabcd;
  ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 1; }));
  t1.expect_holds(plain.data);
  t2.expect_holds(with_imm.data);
  EXPECT_EQ(pair.b.recv_wcs[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(pair.b.recv_wcs[0].imm_data, 0xabcdu);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
}

TEST(UcProtocol, GivenFarMoreThanAWindowOfPacketsExpectNoStall) {
  ConnectParams p = uc(1);
  p.max_send_wr = 1024;
  p.max_recv_wr = 1024;
  EnginePair pair(p);
  constexpr int kCount = 500;  // 1000 packets
  testing::Region src = testing::register_region(pair.a.engine, kCount * 512, testing::kLocal);
  testing::Region dst = testing::register_region(pair.b.engine, kCount * 512, testing::kRemote);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = uint8_t(i * 13 + 5);
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(i, {dst.sge(i * 512, 512)})), 0);
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(
        testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, {src.sge(i * 512, 512)})),
        0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == kCount; }, 5s));
  EXPECT_EQ(pair.a.send_wcs.size(), size_t(kCount));
  EXPECT_EQ(src.bytes, dst.bytes);
}

TEST(UcProtocol, GivenMiddlePacketLostExpectThatMessageDroppedAndTheNextDelivered) {
  EnginePair pair(uc(1));
  Message m1(pair.a, pair.b, 5 * 256, 21), m2(pair.a, pair.b, 3 * 256 + 9, 22);
  const uint32_t lost = wire::psn_add(pair.params.sq_psn_a, 2);
  pair.link.policy = [lost](const WirePacket& p) {
    return p.is_request() && p.psn() == lost ? Fate::kDrop : Fate::kDeliver;
  };
  // Both messages land in the same receive buffer: m1 never completes, so
  // the receive WQE it started is used again for m2.
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  pair.run_for(5ms);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].wr_id, 10u);
  EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, m2.data.size());
  m2.expect_delivered();
  // The sender cannot know: both WRs succeeded from its point of view.
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_TRUE(pair.acks_from(kLidB).empty());
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(UcProtocol, GivenStalePacketOfAnEarlierMessageExpectNoCorruptedDelivery) {
  EnginePair pair(uc(1));
  Message m1(pair.a, pair.b, 2 * 256, 31), m2(pair.a, pair.b, 2 * 256, 32),
      m3(pair.a, pair.b, 100, 33);
  // Keep a copy of m1's last packet and replay it between m2's two packets.
  std::vector<uint8_t> stale;
  const uint32_t m1_last = wire::psn_add(pair.params.sq_psn_a, 1);
  const uint32_t m2_first = wire::psn_add(pair.params.sq_psn_a, 2);
  pair.link.policy = [&](const WirePacket& p) {
    if (p.is_request() && p.psn() == m1_last) stale = p.bytes;
    if (p.is_request() && p.psn() == m2_first) {
      pair.b.engine.receive(p.bytes.data(), p.bytes.size());
      pair.b.engine.receive(stale.data(), stale.size());
      return Fate::kDrop;  // delivered above, in front of the stale copy
    }
    return Fate::kDeliver;
  };
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m1.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(3, m3.recv_sges)), 0);
  for (uint64_t i = 0; i < 3; ++i) {
    const Message& m = i == 0 ? m1 : i == 1 ? m2 : m3;
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, m.send_sges)), 0);
  }
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }));
  pair.run_for(5ms);
  // m1 arrives; m2 is broken by the stale packet and must not be delivered
  // at all (least of all with m1's tail in it); m3 arrives in m2's buffer.
  ASSERT_EQ(pair.b.recv_wcs.size(), 2u);
  EXPECT_EQ(pair.b.recv_wcs[0].wr_id, 1u);
  m1.expect_delivered();
  EXPECT_EQ(pair.b.recv_wcs[1].wr_id, 2u);
  EXPECT_EQ(pair.b.recv_wcs[1].byte_len, m3.data.size());
  expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
  std::vector<uint8_t> got;
  for (const Sge& s : m2.recv_sges)
    for (uint32_t i = 0; i < s.length && got.size() < m3.data.size(); ++i)
      got.push_back(m2.dst.bytes[s.addr - m2.dst.addr() + i]);
  EXPECT_EQ(got, m3.data);
}

TEST(UcProtocol, GivenNoReceivePostedExpectMessageDroppedSilently) {
  EnginePair pair(uc());
  Message m1(pair.a, pair.b, 3 * 4096, 41), m2(pair.a, pair.b, 10, 42);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  pair.run_for(5ms);
  EXPECT_TRUE(pair.acks_from(kLidB).empty());  // no RNR NAK on UC
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  // The next message, with a receive posted, gets through.
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(5, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, 10u);
  m2.expect_delivered();
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
}

TEST(UcProtocol, GivenWriteWithBadRkeyExpectMessageDroppedAndQpsStillUp) {
  // No NAK exists on UC: the responder drops the message and carries on.
  EnginePair pair(uc(1));
  Message bad(pair.a, pair.b, 3 * 256, 61), next(pair.a, pair.b, 300, 62);
  Target t(pair.b, bad.data.size());
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, next.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(2, bad.send_sges, t.va(), t.rkey() ^ 1)),
            0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, next.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  pair.run_for(2ms);
  t.expect_untouched();
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
  next.expect_delivered();
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{2, 3}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_TRUE(pair.acks_from(kLidB).empty());
}

TEST(UcProtocol, GivenSendTooLongForTheReceiveBufferExpectDroppedAndBufferReused) {
  EnginePair pair(uc(1));
  Message big(pair.a, pair.b, 4 * 256, 71), next(pair.a, pair.b, 300, 72);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, next.recv_sges)), 0);  // 364 bytes
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, big.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, next.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  pair.run_for(2ms);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].wr_id, 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, 300u);
  next.expect_delivered();
}

TEST(UcProtocol, GivenRcPacketForAUcQpExpectIgnored) {
  // IBA 9.6.1: the opcode's transport must be the QP's.
  EnginePair pair(uc());
  Message m(pair.a, pair.b, 100, 51);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  std::vector<uint8_t> rc = pair.requests_from(kLidA).at(0).bytes;
  const size_t bth = wire::Lrh::kSize;
  rc[bth] = static_cast<uint8_t>(rc[bth] & 0x1f);  // UC_SEND_ONLY → RC_SEND_ONLY
  testing::reseal(rc);
  pair.link.clear_log();
  pair.b.engine.receive(rc.data(), rc.size());
  pair.link.deliver_all();
  pair.b.poll();
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  EXPECT_TRUE(pair.link.log().empty()) << "a UC QP answered";
  m.expect_untouched();
}

}  // namespace
}  // namespace ibemu::engine
