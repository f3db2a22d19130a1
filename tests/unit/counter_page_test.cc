// A context's counter page as the daemon maps it: only a page whose size its
// owner can no longer change, so the daemon's reads can never fault.
#include "common/counter_page.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

namespace ibemu {
namespace {

TEST(CounterPage, GivenAPageMadeByCreateExpectTheDaemonSeesItsCounts) {
  CounterPage owner;
  ASSERT_EQ(owner.create(), 0);
  owner.get()->at(1).xmit_packets.store(7);
  CounterPage daemon;
  ASSERT_EQ(daemon.attach_read_only(dup(owner.fd())), 0);
  EXPECT_EQ(daemon.get()->at(1).xmit_packets.load(), 7u);
}

TEST(CounterPage, GivenAMemfdWhoseSizeIsNotSealedExpectRefused) {
  const int fd = memfd_create("unsealed-counters", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, sizeof(engine::EngineCounters)), 0);
  CounterPage daemon;
  EXPECT_EQ(daemon.attach_read_only(fd), EINVAL);
}

TEST(CounterPage, GivenAPageMadeByCreateExpectItsOwnerCannotShrinkIt) {
  CounterPage owner;
  ASSERT_EQ(owner.create(), 0);
  EXPECT_NE(ftruncate(owner.fd(), 16), 0);
}

}  // namespace
}  // namespace ibemu
