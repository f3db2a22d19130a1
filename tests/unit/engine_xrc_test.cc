// XRC (IBA annex A14): given an XRC send QP on one HCA and an XRC receive QP
// with XRC SRQs on the other, expect requests to carry the target SRQ's
// number, SENDs to land in that SRQ's WQEs with completions on its CQ, RDMA
// to be checked against its PD, and an SRQ of another XRC domain refused.
#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using testing::kLidA;
using testing::kLidB;
using testing::kLocal;
using testing::kRemote;

constexpr uint32_t kXrcd = 7, kOtherXrcd = 8;
constexpr uint32_t kSrqn = 0x77, kForeignSrqn = 0x78;
constexpr uint32_t kSendQpn = 0x31, kRecvQpn = 0x42;

struct Xrc : ::testing::Test {
  Xrc()
      : a(link, kLidA, testing::kGuidA, 0x11, {}),
        b(link, kLidB, testing::kGuidB, 0x22, {}),
        srq_cq(64, nullptr),
        srq(16, 1, nullptr),
        foreign(16, 1, nullptr) {
    srq.set_xrc(XrcBinding{kSrqn, kXrcd, testing::kPd, &srq_cq});
    foreign.set_xrc(XrcBinding{kForeignSrqn, kOtherXrcd, testing::kPd, &srq_cq});
    b.engine.srqs().add(kSrqn, &srq);
    b.engine.srqs().add(kForeignSrqn, &foreign);
    send = make(a, QpType::kXrcSend, kSendQpn, 0);
    recv = make(b, QpType::kXrcRecv, kRecvQpn, kXrcd);
    testing::ConnectParams p;
    testing::connect_qp(*send, p, kLidB, kRecvQpn, 0x100, 0x200, kRemote);
    // A receive QP stays in RTR (it never sends requests).
    QpAttr at;
    at.qp_state = QpState::kInit;
    at.port_num = 1;
    at.qp_access_flags = kRemote | kAccessRemoteAtomic;
    EXPECT_EQ(recv->modify(at, testing::init_mask(QpType::kRc)), 0);
    at.qp_state = QpState::kRtr;
    at.ah.dlid = kLidA;
    at.ah.port_num = 1;
    at.path_mtu = 5;
    at.dest_qp_num = kSendQpn;
    at.rq_psn = 0x200;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 1;
    EXPECT_EQ(recv->modify(at, testing::rtr_mask(QpType::kRc)), 0);
    src = testing::register_region(a.engine, 4096, kLocal, 0x3c);
    dst = testing::register_region(b.engine, 4096, kRemote | kAccessRemoteAtomic, 0);
  }
  std::shared_ptr<Qp> make(testing::Endpoint& e, QpType type, uint32_t qpn, uint32_t xrcd) {
    QpInit init;
    init.type = type;
    init.qpn = qpn;
    init.pd = testing::kPd;
    init.send_cq = type == QpType::kXrcSend ? &e.send_cq : nullptr;
    init.xrcd = xrcd;
    init.max_send_wr = 16;
    init.max_send_sge = 1;
    return e.engine.create_qp(init, nullptr);
  }
  SendWqe to_srq(SendWqe w, uint32_t srqn) {
    w.remote_srqn = srqn;
    return w;
  }
  bool run_until(const std::function<bool()>& done) {
    for (int i = 0; i < 1000; ++i) {
      link.deliver_all();
      a.poll();
      if (done()) return true;
    }
    return false;
  }

  testing::FakeLink link;
  testing::Endpoint a, b;
  CompletionQueue srq_cq;
  SharedReceiveQueue srq, foreign;
  std::shared_ptr<Qp> send, recv;
  testing::Region src, dst;
};

TEST_F(Xrc, GivenSendToAnSrqExpectItsWqeItsCqAndXrcPacketsBothWays) {
  RecvWqe r = testing::recv_wr(5, {dst.sge(0, 100)});
  int bad;
  ASSERT_EQ(srq.post(&r, 1, &bad), 0);
  ASSERT_EQ(
      testing::post(*send, to_srq(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 64)}), kSrqn)),
      0);
  ASSERT_EQ(link.queued().size(), 1u);
  const wire::PacketView req = link.queued().front().view();
  EXPECT_EQ(req.opcode(), 0xa4) << "XRC_SEND_ONLY";
  EXPECT_EQ(req.xrceth().srqn(), kSrqn);
  ASSERT_TRUE(run_until([&] { return !a.send_wcs.empty(); }));
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(link.log().back().opcode(), 0xb1) << "XRC_ACKNOWLEDGE";
  Completion c;
  ASSERT_EQ(srq_cq.poll(1, &c), 1) << "the completion goes to the SRQ's CQ";
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(c.byte_len, 64u);
  EXPECT_EQ(c.qp_num, kRecvQpn);
  EXPECT_EQ(dst.bytes[63], 0x3c);
}

TEST_F(Xrc, GivenRdmaWriteThroughAnSrqExpectItsPdChecked) {
  SendWqe w = testing::write_wr(1, {src.sge(0, 32)}, dst.addr(100), dst.key);
  ASSERT_EQ(testing::post(*send, to_srq(w, kSrqn)), 0);
  ASSERT_TRUE(run_until([&] { return a.send_wcs.size() == 1; }));
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes[131], 0x3c);
  // The same region through an SRQ of another PD: not this request's memory.
  srq.set_xrc(XrcBinding{kSrqn, kXrcd, testing::kPd + 1, &srq_cq});
  w.wr_id = 2;
  ASSERT_EQ(testing::post(*send, to_srq(w, kSrqn)), 0);
  ASSERT_TRUE(run_until([&] { return a.send_wcs.size() == 2; }));
  EXPECT_EQ(a.send_wcs[1].status, WcStatus::kRemAccessErr);
}

TEST_F(Xrc, GivenAtomicsThroughAnSrqExpectEachExecutedAsItsOpcodeSays) {
  dst.bytes[8] = 40;
  ASSERT_EQ(
      testing::post(*send, to_srq(testing::atomic_wr(1, WrOpcode::kAtomicCmpAndSwp, {src.sge(0, 8)},
                                                     dst.addr(8), dst.key, 40, 7),
                                  kSrqn)),
      0);
  ASSERT_TRUE(run_until([&] { return a.send_wcs.size() == 1; }));
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes[8], 7) << "XRC_COMPARE_SWAP swaps (it is no FetchAdd)";
  ASSERT_EQ(
      testing::post(*send, to_srq(testing::atomic_wr(2, WrOpcode::kAtomicFetchAndAdd,
                                                     {src.sge(8, 8)}, dst.addr(8), dst.key, 3),
                                  kSrqn)),
      0);
  ASSERT_TRUE(run_until([&] { return a.send_wcs.size() == 2; }));
  EXPECT_EQ(dst.bytes[8], 10);
}

TEST_F(Xrc, GivenSrqOfAnotherDomainOrNoneExpectInvalidRequest) {
  ASSERT_EQ(testing::post(
                *send, to_srq(testing::send_wr(1, WrOpcode::kSend, {src.sge(0, 8)}), kForeignSrqn)),
            0);
  ASSERT_TRUE(run_until([&] { return !a.send_wcs.empty(); }));
  EXPECT_EQ(a.send_wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(recv->state(), QpState::kErr);
}

TEST_F(Xrc, GivenXrcQpsExpectNoReceiveQueuesAndNoSendQueueOnTheReceiveSide) {
  EXPECT_EQ(testing::post(*send, testing::recv_wr(1, {src.sge(0, 8)})), EINVAL);
  EXPECT_EQ(testing::post(*recv, testing::recv_wr(1, {dst.sge(0, 8)})), EINVAL);
  EXPECT_EQ(testing::post(*recv, testing::send_wr(1, WrOpcode::kSend, {dst.sge(0, 8)})), EINVAL);
}

}  // namespace
}  // namespace ibemu::engine
