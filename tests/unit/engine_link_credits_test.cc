// A link without room, as a real link without credits (IBA 7.9): the link
// keeps the packet (TxResult::kQueued) and the QP sends nothing new until
// the link is ready again. Given a congested link, expect one packet per QP
// waiting on it, READ responses produced one at a time, every byte landing
// once the link has room, and a requester that the link stopped while it
// went back to resend not left stuck behind what arrived meanwhile.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::ConnectParams;
using testing::EnginePair;
using testing::expect_all;
using testing::kGap;
using testing::kGuard;
using testing::kLidA;
using testing::kLidB;
using testing::kLocal;
using testing::Target;
using testing::WirePacket;

ConnectParams small_mtu() {
  ConnectParams p;
  p.path_mtu = 1;  // 256-byte packets: a few KiB is many packets
  return p;
}

TEST(LinkCredits, GivenACongestedLinkExpectTheRequesterToStopAfterOnePacketAndGoOnWhenReady) {
  EnginePair pair(small_mtu());
  Target target(pair.b, 8 * 256);
  const std::vector<uint8_t> data = testing::pattern(8 * 256, 7);
  auto src = testing::register_region(pair.a.engine, data.size(), kLocal, kGuard);
  std::copy(data.begin(), data.end(), src.bytes.begin());
  pair.link.congested = true;
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(1, {src.sge(0, uint32_t(data.size()))},
                                                        target.va(), target.rkey())),
            0);
  EXPECT_EQ(pair.link.waiting(), 1u) << "a QP whose packet waits sends nothing more";
  pair.link.end_congestion();
  pair.a.engine.link_ready();
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  target.expect_holds(data);
  EXPECT_EQ(packets_from(pair, kLidA), 8u) << "nothing was sent twice";
}

TEST(LinkCredits, GivenACongestedLinkExpectReadResponsesProducedOneAtATimeAndAllLanding) {
  EnginePair pair(small_mtu());
  constexpr size_t kLen = 16 * 256 + 100;
  Target source(pair.b, kLen);
  const std::vector<uint8_t> data = testing::pattern(kLen, 3);
  std::copy(data.begin(), data.end(), source.region.bytes.begin() + kGap);
  auto dst = testing::register_region(pair.a.engine, kLen, kLocal, kGuard);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::read_wr(1, {dst.sge(0, uint32_t(kLen))}, source.va(),
                                                       source.rkey())),
            0);
  pair.link.congested = true;
  pair.link.deliver_all();  // B takes the request; its responses meet a full link
  EXPECT_EQ(pair.link.waiting(), 1u) << "the responder made one response, not all 17";
  for (int round = 0; round < 100 && pair.a.send_wcs.empty(); ++round) {
    pair.link.end_congestion();
    pair.b.engine.link_ready();
    pair.link.congested = true;
    pair.link.deliver_all();
    pair.a.poll();
  }
  pair.link.end_congestion();
  pair.b.engine.link_ready();
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), dst.bytes.begin()));
}

// A responder that entered the error state sends nothing more (IBA 10.3.1):
// the READ responses still waiting for room are dropped with it.
TEST(LinkCredits, GivenReadResponsesWaitingWhenTheResponderEntersErrorExpectNoneSent) {
  EnginePair pair(small_mtu());
  constexpr size_t kLen = 16 * 256;
  Target source(pair.b, kLen);
  auto dst = testing::register_region(pair.a.engine, kLen, kLocal, kGuard);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::read_wr(1, {dst.sge(0, uint32_t(kLen))}, source.va(),
                                                       source.rkey())),
            0);
  pair.link.congested = true;
  pair.link.deliver_all();  // B takes the request; its first response waits
  ASSERT_EQ(pair.link.waiting(), 1u);
  QpAttr err;
  err.qp_state = QpState::kErr;
  ASSERT_EQ(pair.b.qp->modify(err, kQpState), 0);
  pair.link.end_congestion();
  pair.b.engine.link_ready();
  pair.link.deliver_all();
  EXPECT_EQ(packets_from(pair, kLidB), 1u) << "only the response that had already left";
}

// The requester went back to ask for a READ again (its local ACK timer ran
// out) while the link held it back, and the responses then arrived after
// all: it must go on from after them, not stay behind them for ever.
TEST(LinkCredits, GivenReadResponsesThatArriveAfterTheRequesterWentBackExpectItToGoOn) {
  ConnectParams p = small_mtu();
  p.timeout = 8;  // about 1 ms
  p.max_rd_atomic = p.max_dest_rd_atomic = 2;
  EnginePair pair(p);
  constexpr size_t kLen = 4 * 256;
  Target source(pair.b, kLen);
  const std::vector<uint8_t> data = testing::pattern(kLen, 5);
  std::copy(data.begin(), data.end(), source.region.bytes.begin() + kGap);
  std::vector<testing::Region> dst;
  for (int i = 0; i < 3; ++i)
    dst.push_back(testing::register_region(pair.a.engine, kLen, kLocal, kGuard));
  auto read = [&](int i) {
    return testing::read_wr(uint64_t(i), {dst[size_t(i)].sge(0, uint32_t(kLen))}, source.va(),
                            source.rkey());
  };
  ASSERT_EQ(testing::post(*pair.a.qp, read(0)), 0);
  pair.link.congested = true;
  pair.link.deliver_all();                           // B's first response waits on the link
  ASSERT_EQ(testing::post(*pair.a.qp, read(1)), 0);  // so does A's second request: A stops
  pair.clock.advance(5ms);
  pair.a.engine.run_timers(
      pair.clock.now());  // A's ACK timer runs out: it goes back to the first READ
  pair.link.end_congestion();
  for (int i = 0; i < 4; ++i) {  // everything arrives while A still waits for the link
    pair.b.engine.link_ready();
    pair.link.deliver_all();
  }
  pair.a.poll();
  ASSERT_EQ(pair.a.send_wcs.size(), 2u);
  pair.a.engine.link_ready();
  ASSERT_EQ(testing::post(*pair.a.qp, read(2)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }, 2s));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  for (const auto& d : dst) EXPECT_TRUE(std::equal(data.begin(), data.end(), d.bytes.begin()));
}

// A slow responder: its READ responses wait for room while the requester's
// local ACK timer runs out and asks for the READ again. The responses still
// owed to the first request are given up for the second's, so the responder
// sends every response once more at most, not the rest of the first READ
// and then all of the second (each timeout on a slow host would add a
// copy of everything outstanding).
TEST(LinkCredits, GivenAReadAskedAgainWhileItsResponsesWaitExpectTheWaitingOnesReplaced) {
  ConnectParams p = small_mtu();
  p.timeout = 8;  // about 1 ms
  EnginePair pair(p);
  constexpr size_t kPackets = 16;
  Target source(pair.b, kPackets * 256);
  const std::vector<uint8_t> data = testing::pattern(kPackets * 256, 9);
  std::copy(data.begin(), data.end(), source.region.bytes.begin() + kGap);
  auto dst = testing::register_region(pair.a.engine, data.size(), kLocal, kGuard);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::read_wr(1, {dst.sge(0, uint32_t(data.size()))},
                                                       source.va(), source.rkey())),
            0);
  pair.link.congested = true;
  pair.link.deliver_all();  // B takes the request; its first response waits
  ASSERT_EQ(pair.link.waiting(), 1u);
  pair.link.end_congestion();  // on the wire, but B's QP is not told yet
  pair.clock.advance(5ms);
  pair.a.engine.run_timers(pair.clock.now());  // A asks for the READ again
  pair.link.deliver_all();                     // which B takes while its link is busy
  pair.b.engine.link_ready();
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(5ms);
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), dst.bytes.begin()));
  EXPECT_EQ(packets_from(pair, kLidA), 2u) << "the READ request and its one retry";
  EXPECT_EQ(packets_from(pair, kLidB), 1 + kPackets)
      << "the response that had left, then the READ from its start";
}

}  // namespace
}  // namespace ibemu::engine
