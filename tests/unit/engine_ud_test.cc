// Unreliable Datagram (IBA 9.8.4, 10.2.4, 11.4.1.1): given datagrams with
// right and wrong Q_Keys, sizes and receive queues, expect one packet per
// message with a DETH, the GRH area in front of the data, silent drops
// counted by cause, and local length errors that stop only the send queue.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using testing::kLidA;
using testing::kLidB;
using testing::kLocal;
using testing::kQpnA;
using testing::kQpnB;

constexpr uint32_t kQkey = 0x11111111;  // testing::full_attr's
constexpr uint32_t kGrhArea = 40;

struct Datagrams : ::testing::Test {
  Datagrams()
      : a(link, kLidA, testing::kGuidA, kQpnA, params()),
        b(link, kLidB, testing::kGuidB, kQpnB, params()) {
    for (auto* e : {&a, &b})
      EXPECT_EQ(testing::bring_to(*e->qp, QpState::kRts, testing::full_attr(0, 0)), 0);
    src = testing::register_region(a.engine, 8192, kLocal, 0x5a);
    dst = testing::register_region(b.engine, 8192, kLocal, 0);
  }
  static testing::ConnectParams params() {
    testing::ConnectParams p;
    p.type = QpType::kUd;
    return p;
  }
  SendWqe datagram(uint64_t id, uint32_t len, uint32_t qkey = kQkey) const {
    SendWqe w = testing::send_wr(id, WrOpcode::kSend, {src.sge(0, len)});
    w.av.dlid = kLidB;
    w.av.port_num = 1;
    w.remote_qpn = kQpnB;
    w.remote_qkey = qkey;
    return w;
  }
  void deliver() {
    link.deliver_all();
    a.poll();
    b.poll();
  }

  testing::FakeLink link;
  testing::Endpoint a, b;
  testing::Region src, dst;
};

TEST_F(Datagrams, GivenDatagramExpectOnePacketAndDataAfterTheGrhArea) {
  ASSERT_EQ(testing::post(*b.qp, testing::recv_wr(1, {dst.sge(0, 1000)})), 0);
  ASSERT_EQ(testing::post(*a.qp, datagram(2, 100)), 0);
  ASSERT_EQ(link.queued().size(), 1u);
  const wire::PacketView v = link.queued().front().view();
  EXPECT_EQ(v.opcode(), static_cast<uint8_t>(wire::Opcode::kUdSendOnly));
  EXPECT_EQ(v.deth().qkey(), kQkey);
  EXPECT_EQ(v.deth().src_qp(), kQpnA);
  deliver();
  ASSERT_EQ(a.send_wcs.size(), 1u) << "complete once on the wire";
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kSuccess);
  ASSERT_EQ(b.recv_wcs.size(), 1u);
  const Completion& c = b.recv_wcs[0];
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, kGrhArea + 100);
  EXPECT_EQ(c.src_qp, kQpnA);
  EXPECT_EQ(c.slid, kLidA);
  EXPECT_EQ(c.wc_flags & kWcGrh, 0u);
  EXPECT_EQ(dst.bytes[kGrhArea], 0x5a);
  EXPECT_EQ(dst.bytes[kGrhArea + 99], 0x5a);
  EXPECT_EQ(dst.bytes[kGrhArea + 100], 0) << "nothing past the message";
  EXPECT_EQ(dst.bytes[0], 0) << "no GRH came: the area is left alone";
}

TEST_F(Datagrams, GivenAnSmMovesTheReceiverToAnotherPartitionExpectItsDatagramsDropped) {
  ASSERT_EQ(testing::post(*b.qp, testing::recv_wr(5, {dst.sge(0, 1000)})), 0);
  // The receiving QP's pkey_index 0 now names partition 1; the sender
  // still sends with the default partition's key.
  b.ports.set_pkey(0, 0x8001);
  ASSERT_EQ(testing::post(*a.qp, datagram(1, 8)), 0);
  deliver();
  EXPECT_EQ(b.engine.counters().at(1).rcv_pkey_violations.load(), 1u);
  EXPECT_TRUE(b.recv_wcs.empty());
  // Both in partition 1 (the sender's packets carry its new key): delivered.
  a.ports.set_pkey(0, 0x0001);
  ASSERT_EQ(testing::post(*a.qp, datagram(2, 8)), 0);
  deliver();
  ASSERT_EQ(b.recv_wcs.size(), 1u);
  EXPECT_EQ(b.recv_wcs[0].wr_id, 5u);
}

TEST_F(Datagrams, GivenWrongQkeyOrNoReceiveExpectSilentDropsCountedByCause) {
  ASSERT_EQ(testing::post(*a.qp, datagram(1, 8)), 0);  // nothing posted at b
  deliver();
  EXPECT_EQ(b.engine.counters().at(1).rcv_no_receive.load(), 1u);
  ASSERT_EQ(testing::post(*b.qp, testing::recv_wr(5, {dst.sge(0, 1000)})), 0);
  ASSERT_EQ(testing::post(*a.qp, datagram(2, 8, kQkey + 1)), 0);
  deliver();
  EXPECT_EQ(b.engine.counters().at(1).rcv_qkey_violations.load(), 1u);
  EXPECT_TRUE(b.recv_wcs.empty());
  ASSERT_EQ(a.send_wcs.size(), 2u);
  testing::expect_all(a.send_wcs, WcStatus::kSuccess);
  ASSERT_EQ(testing::post(*a.qp, datagram(3, 8, 0x80000000u)), 0);  // the QP's own Q_Key
  deliver();
  ASSERT_EQ(b.recv_wcs.size(), 1u);
  EXPECT_EQ(b.recv_wcs[0].wr_id, 5u) << "the receive WQE waited for a datagram it could take";
}

TEST_F(Datagrams, GivenMessageAboveThePathMtuExpectLocalLengthErrorAndSendQueueError) {
  ASSERT_EQ(testing::post(*b.qp, testing::recv_wr(5, {dst.sge(0, 8192)})), 0);
  ASSERT_EQ(testing::post(*a.qp, datagram(1, 4097)), 0);
  ASSERT_EQ(testing::post(*a.qp, datagram(2, 8)), 0);
  deliver();
  ASSERT_EQ(a.send_wcs.size(), 2u);
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(a.send_wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(a.state(), QpState::kSqe);
  EXPECT_TRUE(link.log().empty());
  ASSERT_EQ(testing::post(*a.qp, datagram(3, 8)), 0);
  deliver();
  EXPECT_EQ(a.send_wcs.back().status, WcStatus::kWrFlushErr) << "posts in SQE are flushed";
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  ASSERT_EQ(a.qp->modify(rts, kQpState), 0);
  ASSERT_EQ(testing::post(*a.qp, datagram(4, 8)), 0);
  deliver();
  EXPECT_EQ(a.send_wcs.back().status, WcStatus::kSuccess);
  ASSERT_EQ(b.recv_wcs.size(), 1u);
}

}  // namespace
}  // namespace ibemu::engine
