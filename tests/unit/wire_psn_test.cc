// PSN arithmetic (IBA 9.7): 24-bit, modulo 2^24, ordered within half the space.
#include <gtest/gtest.h>

#include <random>

#include "transport/wire/psn.h"

namespace ibemu::wire {
namespace {

TEST(WirePsn, GivenPsnNearTopExpectAddWrapsModulo2To24) {
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
  EXPECT_EQ(psn_add(0x123456, 0x1000000), 0x123456u);
  EXPECT_EQ(psn_add(0, kPsnMask), kPsnMask);
}

TEST(WirePsn, GivenNeighboursExpectSignedDistance) {
  EXPECT_EQ(psn_diff(1, 0), 1);
  EXPECT_EQ(psn_diff(0, 1), -1);
  EXPECT_EQ(psn_diff(5, 5), 0);
}

TEST(WirePsn, GivenWrapAroundExpectShortWayDistance) {
  EXPECT_EQ(psn_diff(0, 0xffffff), 1);
  EXPECT_EQ(psn_diff(0xffffff, 0), -1);
  EXPECT_EQ(psn_diff(2, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0xfffffe, 2), -4);
}

TEST(WirePsn, GivenHalfSpaceBoundaryExpectRangeMinus2To23Exclusive2To23Inclusive) {
  EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);
  EXPECT_EQ(psn_diff(0x800000, 0), 0x800000);  // ambiguous: reported positive
  EXPECT_EQ(psn_diff(0, 0x800000), 0x800000);
  EXPECT_EQ(psn_diff(0x800001, 0), -0x7fffff);
  EXPECT_EQ(psn_diff(0, 0x800001), 0x7fffff);
}

TEST(WirePsn, GivenBitsAbove24ExpectThemIgnored) {
  EXPECT_EQ(psn_diff(0x1000005, 5), 0);
  EXPECT_EQ(psn_add(0xff000000, 0), 0u);
}

TEST(WirePsn, GivenWrapAroundExpectBeforeFollowsSequenceNotMagnitude) {
  EXPECT_TRUE(psn_before(0xffffff, 0));
  EXPECT_FALSE(psn_before(0, 0xffffff));
  EXPECT_TRUE(psn_before(0xfffff0, 0x10));
  EXPECT_FALSE(psn_before(7, 7));
  EXPECT_TRUE(psn_at_or_after(7, 7));
  EXPECT_TRUE(psn_at_or_after(0, 0xffffff));
}

TEST(WirePsn, GivenRandomStartAndOffsetExpectDiffInvertsAdd) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> psn(0, kPsnMask);
  std::uniform_int_distribution<int32_t> delta(-0x7fffff, 0x800000);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t a = psn(rng);
    const int32_t d = delta(rng);
    const uint32_t b = psn_add(a, static_cast<uint32_t>(d));
    ASSERT_LE(b, kPsnMask);
    ASSERT_EQ(psn_diff(b, a), d) << std::hex << "a=" << a << " b=" << b;
    ASSERT_EQ(psn_before(b, a), d < 0);
  }
}

}  // namespace
}  // namespace ibemu::wire
