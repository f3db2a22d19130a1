// The sending side of an inbox ring: a packet that finds no room waits, in
// order, and goes in once the consumer took some; a receiver that takes
// nothing for the head-of-queue lifetime loses what waits for it, counted.
#include "transport/link/ring_sender.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace ibemu::link {
namespace {

constexpr uint32_t kSlots = 4;
using Result = RingSender::Result;

struct Link {
  Link() {
    EXPECT_EQ(inbox.create(64, kSlots), 0);
    EXPECT_EQ(sender.attach(dup(inbox.fd())), 0);
  }
  Result send(uint8_t tag, int64_t now = 0) {
    const uint8_t packet[8] = {tag};
    return sender.send(packet, sizeof(packet), SlotKind::kPacket, now);
  }
  /// The tags the consumer finds, oldest first.
  std::vector<uint8_t> drain() {
    std::vector<uint8_t> tags;
    size_t len;
    while (const uint8_t* p = inbox.peek(&len)) {
      tags.push_back(p[0]);
      inbox.pop();
    }
    return tags;
  }
  size_t flush(int64_t now) {
    return sender.flush(now,
                        [this](const uint8_t* p, size_t, SlotKind) { discarded.push_back(p[0]); });
  }
  ShmRing inbox;
  RingSender sender{42};
  std::vector<uint8_t> discarded;
};

TEST(RingSender, GivenAFullRingExpectPacketsHeldInOrderAndSentAsRoomComes) {
  Link l;
  for (uint8_t i = 0; i < kSlots; ++i) EXPECT_EQ(l.send(i), Result::kSent);
  EXPECT_EQ(l.send(4), Result::kHeld);
  EXPECT_EQ(l.send(5), Result::kHeld);
  EXPECT_TRUE(l.sender.holding());
  EXPECT_EQ(l.flush(1), 0u);  // still no room
  EXPECT_EQ(l.drain(), (std::vector<uint8_t>{0, 1, 2, 3}));
  // Room now, but a new packet still goes behind those that wait.
  EXPECT_EQ(l.send(6), Result::kHeld);
  EXPECT_EQ(l.flush(2), 3u);
  EXPECT_FALSE(l.sender.holding());
  EXPECT_EQ(l.drain(), (std::vector<uint8_t>{4, 5, 6}));
  EXPECT_TRUE(l.discarded.empty());
}

TEST(RingSender, GivenAReceiverThatTakesNothingExpectItsPacketsDiscardedAfterTheLifetimeOnly) {
  Link l;
  for (uint8_t i = 0; i < kSlots; ++i) l.send(i);
  EXPECT_EQ(l.send(4, 0), Result::kHeld);
  EXPECT_EQ(l.flush(RingSender::kHoqLifetimeNs - 1), 0u);
  EXPECT_TRUE(l.discarded.empty());
  EXPECT_EQ(l.send(5, RingSender::kHoqLifetimeNs - 1), Result::kHeld);
  EXPECT_EQ(l.flush(RingSender::kHoqLifetimeNs), 2u);
  EXPECT_EQ(l.discarded, (std::vector<uint8_t>{4, 5}));
  EXPECT_FALSE(l.sender.holding());
}

TEST(RingSender, GivenAReceiverThatTakesSlowlyExpectNothingDiscarded) {
  Link l;
  for (uint8_t i = 0; i < kSlots; ++i) l.send(i);
  for (uint8_t i = 4; i < 12; ++i) EXPECT_EQ(l.send(i), Result::kHeld);
  int64_t now = 0;
  std::vector<uint8_t> got;
  while (got.size() < 12) {
    // One packet taken per almost-lifetime: slow, but never stalled.
    now += RingSender::kHoqLifetimeNs - 1;
    size_t len;
    if (const uint8_t* p = l.inbox.peek(&len)) {
      got.push_back(p[0]);
      l.inbox.pop();
    }
    l.flush(now);
  }
  EXPECT_TRUE(l.discarded.empty());
  for (uint8_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], i);
}

TEST(RingSender, GivenAReceiverThatLeftExpectEverythingWaitingDiscardedAtOnce) {
  Link l;
  for (uint8_t i = 0; i < kSlots; ++i) l.send(i);
  l.send(4);
  l.send(5);
  EXPECT_EQ(l.sender.discard_held(
                [&](const uint8_t* p, size_t, SlotKind) { l.discarded.push_back(p[0]); }),
            2u);
  EXPECT_EQ(l.discarded, (std::vector<uint8_t>{4, 5}));
  EXPECT_EQ(l.sender.owner(), 42u);
}

}  // namespace
}  // namespace ibemu::link
