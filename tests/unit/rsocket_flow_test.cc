// The rsocket stream's flow control (provider/compat/rdmacm/rsocket_flow.h):
// a writer and a reader joined by memcpy instead of a QP.
#include "provider/compat/rdmacm/rsocket_flow.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ibemu::rsock {
namespace {

TEST(RsocketFlow, WritesNeverCrossTheRingEnd) {
  SendWindow tx;
  tx.reset(100, 8);
  Extent e = tx.next(70);
  EXPECT_EQ(e.offset, 0u);
  EXPECT_EQ(e.length, 70u);
  tx.commit(70);
  e = tx.next(70);
  EXPECT_EQ(e.length, 30u);  // room is 30
  tx.on_credits(70, 1);
  e = tx.next(70);
  EXPECT_EQ(e.offset, 70u);
  EXPECT_EQ(e.length, 30u);  // up to the end only
  tx.commit(30);
  e = tx.next(70);
  EXPECT_EQ(e.offset, 0u);
  EXPECT_EQ(e.length, 70u);
}

TEST(RsocketFlow, MessageCreditsBoundWrites) {
  SendWindow tx;
  tx.reset(1 << 20, 2);
  tx.commit(1);
  tx.commit(1);
  EXPECT_EQ(tx.next(10).length, 0u);
  tx.on_credits(2, 1);
  EXPECT_EQ(tx.next(10).length, 10u);
  tx.on_credits(1, 0);  // stale: changes nothing
  EXPECT_EQ(tx.message_credits(), 1u);
  tx.on_credits(5, 9);  // more than was ever written: ignored
  EXPECT_EQ(tx.message_credits(), 1u);
}

TEST(RsocketFlow, ReceiveRingRejectsOverrun) {
  ReceiveRing rx;
  rx.reset(64);
  EXPECT_TRUE(rx.on_write(64));
  EXPECT_FALSE(rx.on_write(1));
  rx.consume(10);
  EXPECT_TRUE(rx.on_write(10));
  EXPECT_EQ(rx.readable(), 64u);
}

TEST(RsocketFlow, CreditReportIsDueAtHalf) {
  CreditReport r;
  r.reset();
  EXPECT_FALSE(r.owed());
  r.set_consumed(31);
  EXPECT_TRUE(r.owed());
  EXPECT_FALSE(r.due(64, 16));
  r.set_consumed(32);
  EXPECT_TRUE(r.due(64, 16));
  r.reported();
  EXPECT_FALSE(r.owed());
  for (int i = 0; i < 8; ++i) r.on_repost();
  EXPECT_TRUE(r.due(64, 16));
}

TEST(RsocketFlow, StagingReleasesInOrder) {
  StagingRing s;
  s.reset(10);
  Extent a = s.reserve(6);
  s.commit(a.length);
  Extent b = s.reserve(6);
  EXPECT_EQ(b.offset, 6u);
  EXPECT_EQ(b.length, 4u);
  s.commit(b.length);
  EXPECT_EQ(s.reserve(1).length, 0u);
  s.release(6);
  Extent c = s.reserve(8);
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(c.length, 6u);
}

// A random stream through small rings arrives intact: the writer writes
// what the window allows, the reader reads random amounts and reports.
TEST(RsocketFlow, RandomStreamArrivesIntact) {
  constexpr size_t kRing = 97, kCredits = 3, kTotal = 200000;
  std::mt19937 rng(7);
  std::vector<uint8_t> ring(kRing), source(kTotal), sink;
  for (auto& b : source) b = uint8_t(rng());
  SendWindow tx;
  ReceiveRing rx;
  CreditReport report;
  tx.reset(kRing, kCredits);
  rx.reset(kRing);
  report.reset();
  size_t sent = 0;
  while (sink.size() < kTotal) {
    for (int burst = int(rng() % 4); burst >= 0 && sent < kTotal; --burst) {
      const Extent e = tx.next(std::min<size_t>(kTotal - sent, 1 + rng() % 50));
      if (!e.length) break;
      std::memcpy(ring.data() + e.offset, source.data() + sent, e.length);
      tx.commit(e.length);
      ASSERT_TRUE(rx.on_write(uint32_t(e.length)));
      report.on_repost();
      sent += e.length;
    }
    std::vector<uint8_t> out(1 + rng() % 60);
    const size_t skip = rng() % 3;
    const size_t peeked = rx.copy_out(ring.data(), out.data(), out.size(), skip);
    if (peeked) {
      ASSERT_EQ(0, std::memcmp(out.data(), source.data() + sink.size() + skip, peeked));
    }
    const size_t n = rx.copy_out(ring.data(), out.data(), out.size());
    sink.insert(sink.end(), out.begin(), out.begin() + long(n));
    rx.consume(n);
    report.set_consumed(rx.consumed());
    if (report.due(kRing, kCredits) || !tx.next(1).length) {
      tx.on_credits(report.consumed(), report.reposted());
      report.reported();
    }
  }
  EXPECT_EQ(sink, source);
}

}  // namespace
}  // namespace ibemu::rsock
