// The daemon's QP numbers (emulator-daemon/qp_directory.h): per HCA, never
// the special or the multicast QPN, not reused soon, and blocks set aside
// for an owner that numbers its own QPs (ibemu.ko's kernel QPs).
#include "emulator-daemon/qp_directory.h"

#include <gtest/gtest.h>

namespace ibemu {
namespace {

TEST(QpDirectory, AllocatesFromTheFirstOrdinaryQpnPerDevice) {
  QpDirectory d;
  EXPECT_EQ(d.allocate(0, 1), QpDirectory::kFirstQpn);
  EXPECT_EQ(d.allocate(0, 1), QpDirectory::kFirstQpn + 1);
  EXPECT_EQ(d.allocate(1, 2), QpDirectory::kFirstQpn);
  EXPECT_EQ(d.owner(0, QpDirectory::kFirstQpn + 1), 1u);
  EXPECT_EQ(d.owner(1, QpDirectory::kFirstQpn), 2u);
  EXPECT_FALSE(d.allocate(-1, 1));
}

TEST(QpDirectory, GivenAFreedQpnExpectItNotReusedNext) {
  QpDirectory d;
  const uint32_t a = *d.allocate(0, 1);
  ASSERT_TRUE(d.release(0, a, 1));
  EXPECT_NE(d.allocate(0, 1), a);
  EXPECT_FALSE(d.release(0, a, 1));  // not held any more
}

TEST(QpDirectory, OnlyTheOwnerReleases) {
  QpDirectory d;
  const uint32_t a = *d.allocate(0, 1);
  EXPECT_FALSE(d.release(0, a, 2));
  EXPECT_EQ(d.owner(0, a), 1u);
}

TEST(QpDirectory, NeverHandsOutTheMulticastQpn) {
  QpDirectory d;
  // Walk the allocator up to the top of the range: it wraps below 0xFFFFFF.
  ASSERT_TRUE(d.reserve(0, QpDirectory::kFirstQpn, 0xfffff0 - QpDirectory::kFirstQpn, 9));
  for (int i = 0; i < 32; ++i) {
    auto qpn = d.allocate(0, 1);
    ASSERT_TRUE(qpn);
    EXPECT_NE(*qpn, 0xffffffu);
    EXPECT_GE(*qpn, 0xfffff0u);
    d.release(0, *qpn, 1);
  }
}

TEST(QpDirectory, AllocationSkipsAReservedBlock) {
  QpDirectory d;
  ASSERT_TRUE(d.reserve(0, QpDirectory::kFirstQpn + 2, 100, 7));
  EXPECT_EQ(d.allocate(0, 1), QpDirectory::kFirstQpn);
  EXPECT_EQ(d.allocate(0, 1), QpDirectory::kFirstQpn + 1);
  EXPECT_EQ(d.allocate(0, 1), QpDirectory::kFirstQpn + 102);
  // The block is the device's only: another device allocates there.
  EXPECT_EQ(d.allocate(1, 1), QpDirectory::kFirstQpn);
  EXPECT_EQ(d.owner(0, QpDirectory::kFirstQpn + 50), 7u);
  EXPECT_FALSE(d.owner(0, QpDirectory::kFirstQpn + 102 + 1));
  // A block's QPNs are not QPs in use.
  EXPECT_EQ(d.size(), 4u);
  EXPECT_EQ(d.count(7), 0u);
}

TEST(QpDirectory, ReserveRefusesOverlapsAndTheSpecialRanges) {
  QpDirectory d;
  const uint32_t used = *d.allocate(0, 1);
  EXPECT_FALSE(d.reserve(0, used, 10, 7));          // holds a QPN in use
  EXPECT_FALSE(d.reserve(0, 0, 10, 7));             // the special QPs
  EXPECT_FALSE(d.reserve(0, 0xfffff0, 0x10, 7));    // the multicast QPN
  EXPECT_FALSE(d.reserve(0, 0x100, 0, 7));          // empty
  ASSERT_TRUE(d.reserve(0, 0xf00000, 0xfffff, 7));  // the kernel's block
  EXPECT_FALSE(d.reserve(0, 0xf00010, 4, 8));       // inside another block
  EXPECT_TRUE(d.reserve(1, 0xf00000, 0xfffff, 8));  // another device
}

TEST(QpDirectory, ReleaseAllFreesTheBlockToo) {
  QpDirectory d;
  ASSERT_TRUE(d.reserve(0, 0x20, 16, 7));
  EXPECT_EQ(d.release_all(7), 0u);
  EXPECT_FALSE(d.owner(0, 0x20));
  ASSERT_TRUE(d.reserve(0, 0x20, 16, 8));  // the range is free again
}

}  // namespace
}  // namespace ibemu
