// What the engine tells IBEMU_CHECK (transport/engine/spec_observer.h) and
// what it answers when asked (spec_queries.cc): given a connection on a fake
// link whose two ends report to an observer, a SEND to a QP with no receive
// posted is reported as an RNR NAK, first requests from a requester that
// started at another PSN are reported as a PSN mismatch while a lost first
// packet is not, and WRs in flight are found by the key they name.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine::testing {
namespace {

constexpr uint32_t kQpnC = 0x000031;  // A's QP under observation
constexpr uint32_t kQpnD = 0x000032;  // B's QP under observation

struct RecordingObserver : SpecObserver {
  void rnr_nak_sent(uint32_t qpn, uint32_t psn) noexcept override { rnr.emplace_back(qpn, psn); }
  void psn_mismatch(uint32_t qpn, uint32_t rq_psn, uint32_t psn) noexcept override {
    mismatches.push_back({qpn, rq_psn, psn});
  }
  struct Mismatch {
    uint32_t qpn, rq_psn, psn;
  };
  std::vector<std::pair<uint32_t, uint32_t>> rnr;
  std::vector<Mismatch> mismatches;
};

// Two QPs created after the engines got the observer (a QP learns of it
// when it is created), C on A sending to D on B.
class SpecObserverTest : public ::testing::Test {
 protected:
  void connect(uint32_t c_sq_psn, uint32_t d_rq_psn) {
    pair.a.engine.set_spec_observer(&seen);
    pair.b.engine.set_spec_observer(&seen);
    c = pair.a.create_qp(kQpnC, params);
    d = pair.b.create_qp(kQpnD, params);
    connect_qp(*c, params, kLidB, kQpnD, 0x500, c_sq_psn, params.access_a);
    connect_qp(*d, params, kLidA, kQpnC, d_rq_psn, 0x500, params.access_b);
    src = register_region(pair.a.engine, 64, kAccessLocalWrite, 0x5a);
    dst = register_region(pair.b.engine, 64, kAccessLocalWrite);
  }
  int send(uint64_t wr_id) { return post(*c, send_wr(wr_id, WrOpcode::kSend, {src.sge(0, 16)})); }
  bool sent(size_t n) {
    return pair.run_until([&] { return pair.a.send_wcs.size() >= n; });
  }

  ConnectParams params;
  EnginePair pair{params};
  RecordingObserver seen;
  std::shared_ptr<Qp> c, d;
  Region src, dst;
};

TEST_F(SpecObserverTest, GivenNoReceivePostedExpectRnrNakReportedOnceForEachNak) {
  connect(0x1000, 0x1000);
  ASSERT_EQ(send(1), 0);
  pair.run_until([&] { return !seen.rnr.empty(); });
  ASSERT_FALSE(seen.rnr.empty());
  EXPECT_EQ(seen.rnr.front(), std::make_pair(kQpnD, 0x1000u));
  ASSERT_EQ(post(*d, recv_wr(9, {dst.sge(0, 64)})), 0);
  ASSERT_TRUE(sent(1));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(seen.mismatches.empty());
}

TEST_F(SpecObserverTest, GivenReceivePostedAndPsnsAgreeingExpectNothingReported) {
  connect(0x1000, 0x1000);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post(*d, recv_wr(i, {dst.sge(0, 64)})), 0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(send(i), 0);
  ASSERT_TRUE(sent(3));
  EXPECT_TRUE(seen.rnr.empty());
  EXPECT_TRUE(seen.mismatches.empty());
}

// The first SEND is taken for a duplicate: not executed, and acknowledged
// with a PSN the sender never sent, which it ignores.
TEST_F(SpecObserverTest, GivenRequesterBehindRqPsnExpectMismatchReported) {
  connect(0x0f00, 0x1000);
  ASSERT_EQ(post(*d, recv_wr(9, {dst.sge(0, 64)})), 0);
  ASSERT_EQ(send(1), 0);
  pair.run_until([&] { return !seen.mismatches.empty(); });
  pair.run_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  ASSERT_EQ(seen.mismatches.size(), 1u);
  EXPECT_EQ(seen.mismatches[0].qpn, kQpnD);
  EXPECT_EQ(seen.mismatches[0].rq_psn, 0x1000u);
  EXPECT_EQ(seen.mismatches[0].psn, 0x0f00u);
}

TEST_F(SpecObserverTest, GivenRequesterFarAheadOfRqPsnExpectMismatchReportedOnce) {
  connect(0x9000, 0x1000);
  ASSERT_EQ(post(*d, recv_wr(9, {dst.sge(0, 64)})), 0);
  ASSERT_EQ(send(1), 0);
  ASSERT_EQ(send(2), 0);
  pair.run_for(std::chrono::milliseconds(20));
  ASSERT_EQ(seen.mismatches.size(), 1u);
  EXPECT_EQ(seen.mismatches[0].rq_psn, 0x1000u);
  EXPECT_EQ(seen.mismatches[0].psn, 0x9000u);
}

// A first packet lost on the link leaves the next one a little ahead: a
// PSN sequence error NAK, go-back-N, and no mismatch.
TEST_F(SpecObserverTest, GivenFirstPacketLostExpectNoMismatchReported) {
  connect(0x1000, 0x1000);
  bool dropped = false;
  pair.link.policy = [&](const WirePacket& p) {
    if (!dropped && p.is_request()) {
      dropped = true;
      return Fate::kDrop;
    }
    return Fate::kDeliver;
  };
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(post(*d, recv_wr(i, {dst.sge(0, 64)})), 0);
  ASSERT_EQ(send(1), 0);
  ASSERT_EQ(send(2), 0);
  ASSERT_TRUE(sent(2));
  EXPECT_TRUE(dropped);
  EXPECT_EQ(pair.b.recv_wcs.size(), 2u);
  EXPECT_TRUE(seen.mismatches.empty());
}

TEST_F(SpecObserverTest, GivenSendsInFlightExpectCountedUntilTheyComplete) {
  connect(0x1000, 0x1000);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(send(1), 0);
  ASSERT_EQ(send(2), 0);
  EXPECT_EQ(pair.a.engine.wrs_using_lkey(src.key), 2u);
  EXPECT_EQ(pair.a.engine.wrs_using_lkey(src.key + 1), 0u);
  // Inline data is copied at post time: its buffer's region is free at once.
  ASSERT_EQ(post(*c, send_wr(3, WrOpcode::kSend, {src.sge(0, 8)}, kSendSignaled | kSendInline)), 0);
  EXPECT_EQ(pair.a.engine.wrs_using_lkey(src.key), 2u);
  pair.link.policy = nullptr;
  ASSERT_EQ(post(*d, recv_wr(1, {dst.sge(0, 64)})), 0);
  ASSERT_EQ(post(*d, recv_wr(2, {dst.sge(0, 64)})), 0);
  ASSERT_EQ(post(*d, recv_wr(3, {dst.sge(0, 64)})), 0);
  ASSERT_TRUE(sent(3));
  EXPECT_EQ(pair.a.engine.wrs_using_lkey(src.key), 0u);
}

// A receive waiting for a message is not in flight (programs deregister
// before destroying the QP that holds it); one a message is being placed
// into is.
TEST_F(SpecObserverTest, GivenReceiveExpectCountedWhileAMessageIsPlacedIntoIt) {
  params.path_mtu = 1;  // 256 bytes: a 512-byte SEND is two packets
  connect(0x1000, 0x1000);
  Region big_src = register_region(pair.a.engine, 512, kAccessLocalWrite, 1);
  Region big_dst = register_region(pair.b.engine, 512, kAccessLocalWrite);
  ASSERT_EQ(post(*d, recv_wr(1, {big_dst.sge(0, 512)})), 0);
  EXPECT_EQ(pair.b.engine.wrs_using_lkey(big_dst.key), 0u);
  int requests = 0;
  pair.link.policy = [&](const WirePacket& p) {
    return p.is_request() && ++requests == 2 ? Fate::kDrop : Fate::kDeliver;
  };
  ASSERT_EQ(post(*c, send_wr(1, WrOpcode::kSend, {big_src.sge(0, 512)})), 0);
  pair.link.deliver_all();
  EXPECT_EQ(pair.b.engine.wrs_using_lkey(big_dst.key), 1u);
  ASSERT_TRUE(sent(1));
  EXPECT_EQ(pair.b.engine.wrs_using_lkey(big_dst.key), 0u);
}

Completion completion(uint32_t qpn, WcStatus status) {
  Completion c;
  c.qp_num = qpn;
  c.status = status;
  return c;
}

TEST(EngineCqPurge, GivenErrorsOfADestroyedQpExpectThoseOtherThanFlushesCounted) {
  CompletionQueue cq(16, nullptr);
  ASSERT_TRUE(cq.push(completion(1, WcStatus::kSuccess), false));
  ASSERT_TRUE(cq.push(completion(1, WcStatus::kRemAccessErr), false));
  ASSERT_TRUE(cq.push(completion(1, WcStatus::kWrFlushErr), false));
  ASSERT_TRUE(cq.push(completion(2, WcStatus::kRetryExcErr), false));
  EXPECT_EQ(cq.purge_qp(1), 1u);
  EXPECT_EQ(cq.purge_qp(1), 0u);
  EXPECT_EQ(cq.purge_qp(2), 1u);
}

}  // namespace
}  // namespace ibemu::engine::testing
