// The inbox ring between contexts: a producer that finds it full waits while
// its consumer drains it, and gives up only on a consumer that stopped; a
// consumer that tampers with its ring cannot make a producer fault or hang.
#include "transport/link/shm_ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace ibemu::link {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 64;  // a multiple of 64: create() keeps it

struct Ring {
  Ring() {
    EXPECT_EQ(consumer.create(kSlotBytes, kSlots), 0);
    EXPECT_EQ(producer.attach(dup(consumer.fd())), 0);
  }
  void fill() {
    for (uint32_t i = 0; i < kSlots; ++i) ASSERT_TRUE(producer.push(packet.data(), packet.size()));
    ASSERT_FALSE(producer.push(packet.data(), packet.size()));
  }
  ShmRing consumer, producer;
  std::vector<uint8_t> packet = std::vector<uint8_t>(48, 0xab);
};

TEST(ShmRing, GivenAFullRingWhoseConsumerDrainsSlowlyExpectEveryPacketWaitedForAndNoneDropped) {
  Ring r;
  r.fill();
  std::atomic<bool> done{false};
  std::atomic<size_t> taken{0};
  // Slower than a yield, faster than the producer's patience.
  std::thread consumer([&] {
    while (!done) {
      std::this_thread::sleep_for(2ms);
      size_t len;
      if (r.consumer.peek(&len)) {
        r.consumer.pop();
        ++taken;
      }
    }
  });
  for (int i = 0; i < 20; ++i)
    EXPECT_TRUE(r.producer.push_waiting(r.packet.data(), r.packet.size(), SlotKind::kPacket, 50ms));
  done = true;
  consumer.join();
  EXPECT_GE(taken.load(), 20u);
  EXPECT_EQ(r.consumer.dropped(), 0u);
}

TEST(ShmRing, GivenAFullRingWhoseConsumerStoppedExpectTheProducerToGiveUpAndCountOneDrop) {
  Ring r;
  r.fill();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(r.producer.push_waiting(r.packet.data(), r.packet.size(), SlotKind::kPacket, 5ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 5ms);
  EXPECT_EQ(r.consumer.dropped(), 1u);
  // What the ring holds is intact and in order.
  size_t len = 0;
  for (uint32_t i = 0; i < kSlots; ++i) {
    ASSERT_NE(r.consumer.peek(&len), nullptr);
    EXPECT_EQ(len, r.packet.size());
    r.consumer.pop();
  }
  EXPECT_EQ(r.consumer.peek(&len), nullptr);
}

TEST(ShmRing, GivenAPacketLongerThanASlotExpectRefusedAtOnce) {
  Ring r;
  std::vector<uint8_t> big(kSlotBytes - kSlotHeader + 1, 1);
  EXPECT_FALSE(r.producer.push_waiting(big.data(), big.size(), SlotKind::kPacket, 1s));
  EXPECT_EQ(r.consumer.dropped(), 0u);
}

// What a hostile consumer sees of its own ring: the shared header.
struct SharedHeader {
  explicit SharedHeader(int fd)
      : header(static_cast<RingHeader*>(
            mmap(nullptr, sizeof(RingHeader), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0))) {}
  ~SharedHeader() { munmap(header, sizeof(RingHeader)); }
  RingHeader* header;
};

TEST(ShmRing, GivenAValidRingInAMemfdWhoseSizeIsNotSealedExpectAttachRefused) {
  Ring r;
  struct stat st;
  ASSERT_EQ(fstat(r.consumer.fd(), &st), 0);
  std::vector<uint8_t> image(st.st_size);
  ASSERT_EQ(pread(r.consumer.fd(), image.data(), image.size(), 0), st.st_size);
  // The same ring, byte for byte, in a file its owner could still shrink.
  const int fd = memfd_create("unsealed-inbox", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, image.data(), image.size()), st.st_size);
  ShmRing producer;
  EXPECT_EQ(producer.attach(fd), EINVAL);
  close(fd);
}

TEST(ShmRing, GivenAConsumerThatRewritesItsGeometryExpectPushesToStayInsideTheRing) {
  Ring r;
  SharedHeader shared(r.consumer.fd());
  ASSERT_NE(shared.header, MAP_FAILED);
  // Slots of 1 GiB, a billion of them, and a tail far along: read live from
  // the header, they would put the next packet exabytes past the mapping.
  shared.header->slot_size = 1u << 30;
  shared.header->slot_count = 1u << 30;
  const uint64_t far = (1ull << 30) - 1;
  shared.header->tail = far;
  shared.header->head = far;
  EXPECT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));
  std::vector<uint8_t> big(kSlotBytes, 1);  // fits the forged slot size only
  EXPECT_FALSE(r.producer.push(big.data(), big.size()));
}

TEST(ShmRing, GivenALockThatIsNeverReleasedExpectThePushToGiveUp) {
  Ring r;
  SharedHeader shared(r.consumer.fd());
  ASSERT_NE(shared.header, MAP_FAILED);
  ASSERT_EQ(pthread_mutex_lock(&shared.header->producer_lock), 0);
  bool pushed = true;
  // Another thread: this one owns the lock.
  std::thread([&] { pushed = r.producer.push(r.packet.data(), r.packet.size()); }).join();
  EXPECT_FALSE(pushed);
  pthread_mutex_unlock(&shared.header->producer_lock);
  EXPECT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));
}

}  // namespace
}  // namespace ibemu::link
