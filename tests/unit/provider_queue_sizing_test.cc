// The SRQ sizes the provider grants: mlx5's rounding where the device claims
// a ConnectX id, the request itself elsewhere.
#include <gtest/gtest.h>

#include <cerrno>

#include "provider/core/queue_sizing.h"
#include "transport/engine/types.h"

namespace ibemu::provider {
namespace {

using engine::DeviceLimits;

constexpr uint32_t kMellanox = 0x02c9;

ibv_srq_attr srq(uint32_t max_wr, uint32_t max_sge, uint32_t srq_limit = 0) {
  ibv_srq_attr a{};
  a.max_wr = max_wr;
  a.max_sge = max_sge;
  a.srq_limit = srq_limit;
  return a;
}

TEST(QueueSizingFor, ConnectXIdsUnderMellanoxOuiFollowMlx5) {
  EXPECT_EQ(queue_sizing_for(kMellanox, 4123), QueueSizing::kMlx5);    // ConnectX-6
  EXPECT_EQ(queue_sizing_for(kMellanox, 0x1017), QueueSizing::kMlx5);  // ConnectX-5
  EXPECT_EQ(queue_sizing_for(kMellanox, 0x1021), QueueSizing::kMlx5);  // ConnectX-7
  EXPECT_EQ(queue_sizing_for(kMellanox, 0xa2d6), QueueSizing::kMlx5);  // BlueField-2
}

TEST(QueueSizingFor, OtherIdsKeepTheRequest) {
  EXPECT_EQ(queue_sizing_for(kMellanox, 0xbe00), QueueSizing::kAsRequested);  // ibemu default
  EXPECT_EQ(queue_sizing_for(kMellanox, 4099), QueueSizing::kAsRequested);    // ConnectX-3: mlx4
  EXPECT_EQ(queue_sizing_for(0x1234, 4123), QueueSizing::kAsRequested);       // not Mellanox
}

TEST(SizeSrqAsRequested, RefusesEmptyQueuesAndKeepsTheRest) {
  for (auto bad : {srq(0, 1), srq(1, 0), srq(4, 1, 5), srq(DeviceLimits::kMaxSrqWr + 1, 1),
                   srq(1, DeviceLimits::kMaxSge + 1)}) {
    ibv_srq_attr a = bad;
    EXPECT_EQ(size_srq(QueueSizing::kAsRequested, &a), EINVAL);
    EXPECT_EQ(a.max_wr, bad.max_wr);
  }
  ibv_srq_attr a = srq(100, 3, 10);
  ASSERT_EQ(size_srq(QueueSizing::kAsRequested, &a), 0);
  EXPECT_EQ(a.max_wr, 100u);
  EXPECT_EQ(a.max_sge, 3u);
}

TEST(SizeSrqMlx5, RoundsUpAndReportsWhatIsGranted) {
  struct Case {
    uint32_t wr, sge, granted_wr, granted_sge;
  };
  for (const Case& c : {Case{0, 0, 0, 1}, Case{1, 1, 1, 1}, Case{2, 2, 3, 3}, Case{3, 3, 3, 3},
                        Case{4, 4, 7, 7}, Case{100, 5, 127, 7}, Case{1024, 16, 2047, 16}}) {
    ibv_srq_attr a = srq(c.wr, c.sge);
    ASSERT_EQ(size_srq(QueueSizing::kMlx5, &a), 0) << c.wr << " " << c.sge;
    EXPECT_EQ(a.max_wr, c.granted_wr) << "max_wr " << c.wr;
    EXPECT_EQ(a.max_sge, c.granted_sge) << "max_sge " << c.sge;
  }
}

TEST(SizeSrqMlx5, StaysWithinTheDeviceLimits) {
  ibv_srq_attr a = srq(DeviceLimits::kMaxSrqWr, DeviceLimits::kMaxSge);
  ASSERT_EQ(size_srq(QueueSizing::kMlx5, &a), 0);
  EXPECT_EQ(a.max_wr, DeviceLimits::kMaxSrqWr);
  EXPECT_EQ(a.max_sge, DeviceLimits::kMaxSge);
  a = srq(DeviceLimits::kMaxSrqWr + 1, 1);
  EXPECT_EQ(size_srq(QueueSizing::kMlx5, &a), EINVAL);
  a = srq(1, DeviceLimits::kMaxSge + 1);
  EXPECT_EQ(size_srq(QueueSizing::kMlx5, &a), EINVAL);
}

TEST(SizeSrqMlx5, IgnoresTheLimitOnCreation) {
  ibv_srq_attr a = srq(4, 1, 100);
  EXPECT_EQ(size_srq(QueueSizing::kMlx5, &a), 0);
}

}  // namespace
}  // namespace ibemu::provider
