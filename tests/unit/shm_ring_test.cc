// The inbox ring between contexts: producers claim slots without a lock, a
// full ring refuses at once (the sender keeps the packet: ring_sender), a
// producer that died mid-copy costs one slot after a while, and an owner
// that tampers with its ring cannot make a producer fault, hang or write
// outside the ring.
#include "transport/link/shm_ring.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace ibemu::link {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kSlots = 4;
constexpr uint32_t kSlotBytes = 64;  // a multiple of 64: create() keeps it
constexpr size_t kHeaderBytes = 4096;

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

// What a hostile owner sees of its own ring: all of it, writable.
struct SharedImage {
  explicit SharedImage(int fd) {
    struct stat st;
    fstat(fd, &st);
    len = size_t(st.st_size);
    base = static_cast<uint8_t*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  ~SharedImage() { munmap(base, len); }
  RingHeader* header() { return reinterpret_cast<RingHeader*>(base); }
  std::atomic<uint64_t>& state(uint32_t i) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(base + kHeaderBytes + i * kSlotBytes);
  }
  uint8_t* base;
  size_t len;
};

TEST(ShmRing, GivenAFullRingExpectThePushRefusedAtOnceAndTakenOnceTheConsumerPops) {
  Ring r;
  r.fill();
  size_t len = 0;
  ASSERT_NE(r.consumer.peek(&len), nullptr);
  r.consumer.pop();
  EXPECT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));
  EXPECT_FALSE(r.producer.push(r.packet.data(), r.packet.size()));
  for (uint32_t i = 0; i < kSlots; ++i) {
    ASSERT_NE(r.consumer.peek(&len), nullptr);
    EXPECT_EQ(len, r.packet.size());
    r.consumer.pop();
  }
  EXPECT_EQ(r.consumer.peek(&len), nullptr);
  EXPECT_EQ(r.producer.consumed_hint(), kSlots + 1);
}

TEST(ShmRing, GivenManyProducerThreadsExpectEveryPacketOnceAndEachProducersInOrder) {
  ShmRing consumer;
  ASSERT_EQ(consumer.create(64, 16), 0);
  constexpr int kProducers = 4;
  constexpr uint32_t kEach = 20000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      ShmRing ring;
      ASSERT_EQ(ring.attach(dup(consumer.fd())), 0);
      for (uint32_t i = 0; i < kEach;) {
        const uint32_t msg[2] = {uint32_t(p), i};
        if (ring.push(reinterpret_cast<const uint8_t*>(msg), sizeof(msg)))
          ++i;
        else
          std::this_thread::yield();
      }
    });
  std::vector<uint32_t> next(kProducers, 0);
  for (uint32_t taken = 0; taken < kProducers * kEach;) {
    size_t len;
    const uint8_t* data = consumer.peek(&len);
    if (!data) continue;
    ASSERT_EQ(len, 8u);
    uint32_t msg[2];
    std::memcpy(msg, data, sizeof(msg));
    ASSERT_LT(msg[0], uint32_t(kProducers));
    ASSERT_EQ(msg[1], next[msg[0]]) << "producer " << msg[0];
    ++next[msg[0]];
    consumer.pop();
    ++taken;
  }
  for (auto& t : producers) t.join();
  size_t len;
  EXPECT_EQ(consumer.peek(&len), nullptr);
}

TEST(ShmRing, GivenAPacketLongerThanASlotExpectRefusedAtOnce) {
  Ring r;
  std::vector<uint8_t> big(kSlotBytes - kSlotHeader + 1, 1);
  EXPECT_FALSE(r.producer.fits(big.size()));
  EXPECT_FALSE(r.producer.push(big.data(), big.size()));
}

TEST(ShmRing, GivenAProducerThatDiedMidCopyExpectTheConsumerToGiveItsSlotUpAndGoOn) {
  Ring r;
  r.consumer.set_abandon_after(20ms);
  SharedImage image(r.consumer.fd());
  // Position 0 claimed and never finished, as by a producer killed mid-copy.
  image.state(0).store(0 << 2 | 1);
  image.header()->tail = 1;
  ASSERT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));  // position 1
  size_t len = 0;
  EXPECT_EQ(r.consumer.peek(&len), nullptr);  // a live producer may be copying still
  std::this_thread::sleep_for(30ms);
  ASSERT_NE(r.consumer.peek(&len), nullptr);
  EXPECT_EQ(len, r.packet.size());
  EXPECT_EQ(r.consumer.abandoned(), 1u);
  r.consumer.pop();
  // The slot given up serves again.
  for (uint32_t i = 0; i < kSlots; ++i)
    EXPECT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));
}

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

TEST(ShmRing, GivenAnOwnerThatRewritesItsGeometryExpectPushesToStayInsideTheRing) {
  Ring r;
  SharedImage image(r.consumer.fd());
  // Slots of 1 GiB, a billion of them, and a tail far along: read live from
  // the header, they would put the next packet exabytes past the mapping.
  image.header()->slot_size = 1u << 30;
  image.header()->slot_count = 1u << 30;
  const uint64_t far = (1ull << 30) - 1;
  image.header()->tail = far;
  image.state(far % kSlots).store(far << 2);  // free for that position
  EXPECT_TRUE(r.producer.push(r.packet.data(), r.packet.size()));
  std::vector<uint8_t> big(kSlotBytes, 1);  // fits the forged slot size only
  EXPECT_FALSE(r.producer.push(big.data(), big.size()));
}

// Whatever the owner writes into the words producers read, a push ends at
// once, inside the ring, without a fault.
TEST(ShmRing, GivenAnOwnerThatForgesEverySharedWordExpectPushesToEndQuicklyAndSafely) {
  Ring r;
  SharedImage image(r.consumer.fd());
  const uint64_t forgeries[] = {0,         ~0ull,      1,          2,           3,
                                0x5555555, 1ull << 62, ~0ull >> 2, (5ull << 2), 7};
  for (uint64_t tail : forgeries)
    for (uint64_t state : forgeries) {
      image.header()->tail = tail;
      for (uint32_t i = 0; i < kSlots; ++i) image.state(i).store(state + i);
      image.header()->consumer_sleeping = uint32_t(state);
      const auto start = std::chrono::steady_clock::now();
      r.producer.push(r.packet.data(), r.packet.size());
      EXPECT_LT(std::chrono::steady_clock::now() - start, 100ms);
    }
  // Nothing outside the slots was written: the header keeps the geometry.
  EXPECT_EQ(image.header()->slot_size, kSlotBytes);
  EXPECT_EQ(image.header()->slot_count, kSlots);
}

TEST(ShmRing, GivenProducersThatForgeSlotStatesExpectTheConsumerToReadOnlyWhatItExpects) {
  Ring r;
  SharedImage image(r.consumer.fd());
  // Ready, but for another position: not the consumer's next packet.
  image.state(0).store(uint64_t{kSlots} << 2 | 2);
  size_t len = 0;
  EXPECT_EQ(r.consumer.peek(&len), nullptr);
  // A length past the slot is cut to the slot.
  image.state(0).store(0 << 2 | 2);
  std::memset(image.base + kHeaderBytes + 8, 0xff, 4);
  ASSERT_NE(r.consumer.peek(&len), nullptr);
  EXPECT_EQ(len, kSlotBytes - kSlotHeader);
}

}  // namespace
}  // namespace ibemu::link
