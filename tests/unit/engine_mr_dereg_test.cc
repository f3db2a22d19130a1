// Deregistration while the responder writes (IBA 10.6.3.2; what a hardware
// HCA guarantees by finishing its DMA first): ibv_dereg_mr returns only once
// no access through the region is in flight, so a program may free or unmap
// the memory right after it. Later requests for the key are refused.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::EnginePair;
using testing::kLocal;
using testing::kPd;
using testing::kRemote;

// Device memory whose writes wait at a gate: a copy the test holds in flight.
class GatedMemory : public DeviceMemory {
 public:
  explicit GatedMemory(size_t size) : bytes(size) {}
  bool read(uint64_t at, void* to, size_t n) noexcept override {
    std::memcpy(to, bytes.data() + at, n);
    return true;
  }
  bool write(uint64_t at, const void* from, size_t n) noexcept override {
    std::unique_lock lock(mutex);
    entered = true;
    changed.notify_all();
    changed.wait(lock, [&] { return open; });
    std::memcpy(bytes.data() + at, from, n);
    return true;
  }
  const char* kind() const noexcept override { return "gated"; }

  void wait_entered() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return entered; });
  }
  void release() {
    std::lock_guard lock(mutex);
    open = true;
    changed.notify_all();
  }

  std::vector<uint8_t> bytes;
  std::mutex mutex;
  std::condition_variable changed;
  bool entered = false, open = false;
};

TEST(MrDeregistration, GivenAWriteBeingPlacedExpectDeregistrationToWaitForItAndLaterWritesRefused) {
  EnginePair pair;
  constexpr size_t kLen = 256;
  auto memory = std::make_shared<GatedMemory>(kLen);
  const uint32_t rkey = pair.b.engine.mrs().add(kPd, nullptr, 0, kLen, kRemote, memory);
  ASSERT_NE(rkey, 0u);
  const std::vector<uint8_t> data = testing::pattern(kLen, 1);
  auto src = testing::register_region(pair.a.engine, kLen, kLocal);
  std::copy(data.begin(), data.end(), src.bytes.begin());
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(1, {src.sge(0, kLen)}, 0, rkey)), 0);
  std::thread placing([&] { pair.link.deliver_all(); });  // B's responder writes ... and waits
  memory->wait_entered();
  std::atomic<bool> removed{false};
  std::thread deregistering([&] {
    EXPECT_EQ(pair.b.engine.mrs().remove(rkey), 0);
    removed = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(removed) << "deregistration returned while a write was being placed";
  memory->release();
  placing.join();
  deregistering.join();
  EXPECT_TRUE(removed);
  EXPECT_EQ(memory->bytes, data) << "the write in flight was placed whole";
  // The key is gone: a WRITE that comes now is a remote access error.
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(2, {src.sge(0, kLen)}, 0, rkey)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kRemAccessErr);
}

}  // namespace
}  // namespace ibemu::engine
