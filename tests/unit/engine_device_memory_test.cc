// Regions on device memory (GPU memory, transport/engine/device_memory.h):
// given a region whose bytes the HCA can reach only by copies, expect RDMA
// WRITE, READ, SEND and atomics to land there and be read from there, and
// memory that went away to end the request with an error, not a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace testing;

// A "device" whose memory lives at made-up addresses the CPU must never
// dereference; every access goes through read() and write().
class FakeDevice : public DeviceMemory {
 public:
  static constexpr uint64_t kBase = 0x7e0000000000ull;  // no host mapping
  explicit FakeDevice(size_t size) : bytes(size, 0) {}
  bool read(uint64_t at, void* to, size_t n) noexcept override {
    if (freed || at < kBase || at - kBase + n > bytes.size()) return false;
    std::memcpy(to, bytes.data() + (at - kBase), n);
    ++copies;
    return true;
  }
  bool write(uint64_t at, const void* from, size_t n) noexcept override {
    if (freed || at < kBase || at - kBase + n > bytes.size()) return false;
    std::memcpy(bytes.data() + (at - kBase), from, n);
    ++copies;
    return true;
  }
  const char* kind() const noexcept override { return "fake:0"; }
  std::vector<uint8_t> bytes;
  bool freed = false;
  int copies = 0;
};

struct DeviceRegion {
  DeviceRegion(Endpoint& e, size_t size, uint32_t access)
      : device(std::make_shared<FakeDevice>(size)),
        key(e.engine.mrs().add(kPd, reinterpret_cast<uint8_t*>(FakeDevice::kBase),
                               FakeDevice::kBase, size, access, device)) {}
  std::shared_ptr<FakeDevice> device;
  uint32_t key;
};

constexpr uint32_t kAll = kRemote | kAccessRemoteAtomic;

TEST(EngineDeviceMemory, GivenWriteIntoDeviceRegionExpectBytesCopiedToTheDevice) {
  EnginePair pair;
  DeviceRegion dst(pair.b, 3 * 4096 + 5, kAll);
  Region src = register_region(pair.a.engine, 3 * 4096 + 5, kLocal);
  std::vector<uint8_t> data = pattern(src.bytes.size(), 1);
  std::copy(data.begin(), data.end(), src.bytes.begin());
  ASSERT_EQ(post(*pair.a.qp, write_wr(1, {src.sge(0, data.size())}, FakeDevice::kBase, dst.key)),
            0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.device->bytes, data);
  EXPECT_GE(dst.device->copies, 4);
}

TEST(EngineDeviceMemory, GivenReadFromDeviceRegionExpectItsBytesAtTheRequester) {
  EnginePair pair;
  DeviceRegion src(pair.b, 10000, kAll);
  src.device->bytes = pattern(10000, 2);
  Region dst = register_region(pair.a.engine, 10000, kLocal);
  ASSERT_EQ(post(*pair.a.qp, read_wr(1, {dst.sge(0, 10000)}, FakeDevice::kBase, src.key)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(dst.bytes, src.device->bytes);
}

TEST(EngineDeviceMemory, GivenSendFromAndIntoDeviceBuffersExpectTheMessageOnTheDevice) {
  EnginePair pair;
  DeviceRegion from(pair.a, 6000, kLocal);
  from.device->bytes = pattern(6000, 3);
  DeviceRegion into(pair.b, 8192, kLocal);
  ASSERT_EQ(post(*pair.b.qp, recv_wr(7, {Sge{FakeDevice::kBase, 8192, into.key}})), 0);
  ASSERT_EQ(post(*pair.a.qp, send_wr(1, WrOpcode::kSend, {Sge{FakeDevice::kBase, 6000, from.key}})),
            0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, 6000u);
  EXPECT_TRUE(
      std::equal(from.device->bytes.begin(), from.device->bytes.end(), into.device->bytes.begin()));
}

TEST(EngineDeviceMemory, GivenAtomicsOnDeviceWordExpectOriginalValuesAndTheSum) {
  ConnectParams p;
  p.access_b = kAll;
  p.max_rd_atomic = 4;
  p.max_dest_rd_atomic = 4;
  EnginePair pair(p);
  DeviceRegion word(pair.b, 8, kAll);
  uint64_t v = 100;
  std::memcpy(word.device->bytes.data(), &v, 8);
  Region orig = register_region(pair.a.engine, 8 * 4, kLocal);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(post(*pair.a.qp, atomic_wr(i, WrOpcode::kAtomicFetchAndAdd, {orig.sge(8 * i, 8)},
                                         FakeDevice::kBase, word.key, 5)),
              0);
  ASSERT_EQ(post(*pair.a.qp, atomic_wr(3, WrOpcode::kAtomicCmpAndSwp, {orig.sge(24, 8)},
                                       FakeDevice::kBase, word.key, 115, 7)),
            0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 4; }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  uint64_t got[4];
  std::memcpy(got, orig.bytes.data(), sizeof(got));
  EXPECT_EQ(got[0], 100u);
  EXPECT_EQ(got[1], 105u);
  EXPECT_EQ(got[2], 110u);
  EXPECT_EQ(got[3], 115u);
  std::memcpy(&v, word.device->bytes.data(), 8);
  EXPECT_EQ(v, 7u);
}

TEST(EngineDeviceMemory, GivenDeviceMemoryFreedUnderTheRegionExpectRemoteAccessError) {
  EnginePair pair;
  DeviceRegion dst(pair.b, 4096, kAll);
  dst.device->freed = true;  // the program freed it before deregistering
  Region src = register_region(pair.a.engine, 64, kLocal);
  ASSERT_EQ(post(*pair.a.qp, write_wr(1, {src.sge(0, 64)}, FakeDevice::kBase, dst.key)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(pair.b.engine.mrs().device_regions().at("fake:0"), 1u);
}

}  // namespace
}  // namespace ibemu::engine
