// Placement into a program's memory (transport/engine/dma_placement.h): each
// byte stored once, in ascending order, and the bytes right. What a second
// store does to a program that polls a byte is a race no test here can
// provoke on demand (riostream met it about once in 300,000 round trips on a
// loaded 2-CPU machine), so the plan of stores is what is checked.
#include "transport/engine/dma_placement.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ibemu::engine {
namespace {

TEST(DmaPlacement, EveryByteIsStoredOnceAndInAscendingOrder) {
  for (size_t n = 0; n <= 4200; ++n) {
    std::vector<int> stores(n, 0);
    size_t next = 0;
    for_each_placement_store(n, [&](size_t at, size_t width) {
      ASSERT_EQ(at, next) << "n " << n;
      ASSERT_LE(at + width, n) << "n " << n;
      for (size_t i = at; i < at + width; ++i) ++stores[i];
      next = at + width;
    });
    EXPECT_EQ(next, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(stores[i], 1) << "n " << n << " byte " << i;
  }
}

TEST(DmaPlacement, CopiesEverySizeAndAlignment) {
  std::vector<uint8_t> src(4200 + 64), dst(4200 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + 7);
  for (size_t shift : {0, 1, 3, 8, 15}) {
    for (size_t n : {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 1024, 4095, 4096, 4099}) {
      std::fill(dst.begin(), dst.end(), 0xee);
      place_in_order(dst.data() + shift, src.data() + (shift * 3) % 16, n);
      for (size_t i = 0; i < dst.size(); ++i) {
        const bool inside = i >= shift && i < shift + n;
        ASSERT_EQ(dst[i], inside ? src[i - shift + (shift * 3) % 16] : 0xee)
            << "shift " << shift << " n " << n << " byte " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ibemu::engine
