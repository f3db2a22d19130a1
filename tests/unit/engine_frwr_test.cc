// Fast registration (kernel consumers' FRWR: ib_alloc_mr, IB_WR_REG_MR,
// IB_WR_LOCAL_INV, SEND with Invalidate): given a region allocated free,
// expect no key to open it until a REG_MR WQE registers it, accesses through
// the new key to land in the translation the registration named and within
// its bounds and rights, and none once it is invalidated; registrations that
// break a rule fail the WQE and put the QP in error.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <thread>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using testing::EnginePair;
using testing::invalidate_wr;
using testing::kLocal;
using testing::kPd;
using testing::kQpnA;
using testing::kRemote;
using testing::Region;

constexpr uint32_t kOtherPd = kPd + 1;
constexpr uint32_t kKey = 0x4321'00;  // the owner's choice, as ibemu.ko's
constexpr uint32_t kLength = 4096;

// Memory reached through translations its owner names by number, as an FRWR
// MR's is (the module's frozen page lists): each mapping is a buffer of its
// own behind the same iovas, and bind() picks the one accesses go to.
class Mappings : public DeviceMemory {
 public:
  static constexpr uint64_t kIova = 0x5000'0000'0000ull;  // no host mapping

  std::vector<uint8_t>& add(uint32_t mapping, uint8_t fill = 0) {
    return buffers[mapping] = std::vector<uint8_t>(kLength, fill);
  }
  bool read(uint64_t at, void* to, size_t n) noexcept override {
    uint8_t* from = locate(at, n);
    if (from) std::memcpy(to, from, n);
    return from != nullptr;
  }
  bool write(uint64_t at, const void* from, size_t n) noexcept override {
    uint8_t* to = locate(at, n);
    if (to) std::memcpy(to, from, n);
    return to != nullptr;
  }
  const char* kind() const noexcept override { return "mappings"; }
  void bind(uint32_t mapping) noexcept override { binds.push_back(mapping); }

  std::map<uint32_t, std::vector<uint8_t>> buffers;
  std::vector<uint32_t> binds;

 private:
  uint8_t* locate(uint64_t at, size_t n) {
    auto it = binds.empty() ? buffers.end() : buffers.find(binds.back());
    if (it == buffers.end() || at < kIova || at - kIova + n > it->second.size()) return nullptr;
    return it->second.data() + (at - kIova);
  }
};

FastReg registration(uint8_t key_byte, uint32_t mapping, uint32_t access = kRemote,
                     uint64_t length = kLength) {
  return FastReg{(kKey & ~0xffu) | key_byte, Mappings::kIova, length, access, mapping};
}

// --- the table ---

struct FastRegTable : ::testing::Test {
  FastRegTable() {
    device->add(1);
    device->add(2);
    EXPECT_EQ(mrs.alloc_fast_reg(kKey, kPd, device), 0);
  }
  MrCheck remote(uint32_t rkey, uint64_t offset, uint64_t len, uint32_t need = kAccessRemoteWrite) {
    MemorySpan span;
    return mrs.remote(rkey, kPd, kQpnA, Mappings::kIova + offset, len, need, &span);
  }

  MrTable mrs;
  std::shared_ptr<Mappings> device = std::make_shared<Mappings>();
};

TEST_F(FastRegTable, GivenAllocatedRegionExpectNoKeyOpensItUntilRegistered) {
  MemorySpan span;
  EXPECT_EQ(mrs.local(kKey, kPd, Mappings::kIova, 8, 0, &span), MrCheck::kBadKey);
  EXPECT_EQ(remote(kKey, 0, 8), MrCheck::kBadKey);
  const FastReg fr = registration(0x01, 1);
  ASSERT_EQ(mrs.fast_register(fr, kPd), MrCheck::kOk);
  EXPECT_EQ(device->binds, std::vector<uint32_t>{1});
  ASSERT_EQ(mrs.local(fr.key, kPd, Mappings::kIova + 8, 8, kAccessLocalWrite, &span), MrCheck::kOk);
  EXPECT_EQ(span.device, device.get());
  EXPECT_EQ(reinterpret_cast<uint64_t>(span.addr), Mappings::kIova + 8) << "the device translates";
  EXPECT_EQ(remote(fr.key, 0, 8), MrCheck::kOk);
  EXPECT_EQ(remote(kKey, 0, 8), MrCheck::kBadKey) << "the key before the registration";
}

TEST_F(FastRegTable, GivenRegistrationExpectAccessOnlyWithinItsBoundsAndRights) {
  const FastReg fr = registration(0x02, 1, kAccessRemoteRead, 1000);
  ASSERT_EQ(mrs.fast_register(fr, kPd), MrCheck::kOk);
  EXPECT_EQ(remote(fr.key, 992, 8, kAccessRemoteRead), MrCheck::kOk);
  EXPECT_EQ(remote(fr.key, 993, 8, kAccessRemoteRead), MrCheck::kOutOfBounds);
  EXPECT_EQ(remote(fr.key, 0, 8, kAccessRemoteWrite), MrCheck::kNoAccess);
  MemorySpan span;
  EXPECT_EQ(mrs.remote(fr.key, kOtherPd, kQpnA, Mappings::kIova, 8, kAccessRemoteRead, &span),
            MrCheck::kBadPd);
}

TEST_F(FastRegTable, GivenValidRegionExpectSecondRegistrationRefusedAndFirstKept) {
  const FastReg first = registration(0x01, 1);
  ASSERT_EQ(mrs.fast_register(first, kPd), MrCheck::kOk);
  EXPECT_EQ(mrs.fast_register(registration(0x02, 2), kPd), MrCheck::kBadKey);
  EXPECT_EQ(device->binds, std::vector<uint32_t>{1});
  EXPECT_EQ(remote(first.key, 0, 8), MrCheck::kOk);
}

struct BadRegistration {
  const char* why;
  FastReg fr;
  uint32_t qp_pd;
  MrCheck expected;
};

void PrintTo(const BadRegistration& c, std::ostream* os) { *os << c.why; }

class FastRegTableBad : public FastRegTable,
                        public ::testing::WithParamInterface<BadRegistration> {};

TEST_P(FastRegTableBad, GivenRegistrationBreakingARuleExpectRefusedAndRegionStillFree) {
  const BadRegistration& c = GetParam();
  EXPECT_EQ(mrs.fast_register(c.fr, c.qp_pd), c.expected) << c.why;
  EXPECT_TRUE(device->binds.empty());
  EXPECT_EQ(remote(c.fr.key, 0, 8, 0), MrCheck::kBadKey);
  EXPECT_EQ(mrs.fast_register(registration(0x07, 1), kPd), MrCheck::kOk) << "still free";
}

INSTANTIATE_TEST_SUITE_P(
    Rules, FastRegTableBad,
    ::testing::Values(
        BadRegistration{"QP of another PD", registration(0x01, 1), kOtherPd, MrCheck::kBadPd},
        BadRegistration{"key of no region", FastReg{0x777700, Mappings::kIova, 8, kRemote, 1}, kPd,
                        MrCheck::kBadKey},
        BadRegistration{"remote write without local write",
                        registration(0x01, 1, kAccessRemoteWrite), kPd, MrCheck::kNoAccess},
        BadRegistration{"a right windows would need",
                        registration(0x01, 1, kRemote | kAccessMwBind), kPd, MrCheck::kNoAccess},
        BadRegistration{"bounds that wrap", FastReg{kKey, ~0ull - 8, 64, kAccessRemoteRead, 1}, kPd,
                        MrCheck::kOutOfBounds}));

TEST_F(FastRegTable, GivenOrdinaryRegionExpectNeitherRegisteredNorInvalidated) {
  std::vector<uint8_t> bytes(64);
  const uint32_t key =
      mrs.add(kPd, bytes.data(), reinterpret_cast<uint64_t>(bytes.data()), bytes.size(), kRemote);
  FastReg fr = registration(0x01, 1);
  fr.key = key;
  EXPECT_EQ(mrs.fast_register(fr, kPd), MrCheck::kBadKey);
  EXPECT_EQ(mrs.invalidate(key, kPd, 0), MrCheck::kBadKey);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(key, kPd, kQpnA, reinterpret_cast<uint64_t>(bytes.data()), 8,
                       kAccessRemoteWrite, &p),
            MrCheck::kOk)
      << "still registered";
  EXPECT_EQ(mrs.free_fast_reg(key), EINVAL);
}

TEST_F(FastRegTable, GivenInvalidationExpectKeyClosedAndNextRegistrationWithNewKeyAndMapping) {
  const FastReg first = registration(0x01, 1);
  ASSERT_EQ(mrs.fast_register(first, kPd), MrCheck::kOk);
  EXPECT_EQ(mrs.invalidate(first.key ^ 0x10, kPd, 0), MrCheck::kBadKey) << "another key byte";
  EXPECT_EQ(mrs.invalidate(first.key, kOtherPd, 0), MrCheck::kBadPd);
  EXPECT_EQ(remote(first.key, 0, 8), MrCheck::kOk) << "still valid";
  ASSERT_EQ(mrs.invalidate(first.key, kPd, kQpnA), MrCheck::kOk) << "SEND with Invalidate";
  EXPECT_EQ(remote(first.key, 0, 8), MrCheck::kBadKey);
  EXPECT_EQ(mrs.invalidate(first.key, kPd, 0), MrCheck::kBadKey) << "already free";
  const FastReg second = registration(0x02, 2);
  ASSERT_EQ(mrs.fast_register(second, kPd), MrCheck::kOk);
  EXPECT_EQ(device->binds, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(remote(first.key, 0, 8), MrCheck::kBadKey);
  EXPECT_EQ(remote(second.key, 0, 8), MrCheck::kOk);
}

TEST_F(FastRegTable, GivenAccessInFlightExpectInvalidationToCompleteOnlyAfterIt) {
  const FastReg fr = registration(0x01, 1);
  ASSERT_EQ(mrs.fast_register(fr, kPd), MrCheck::kOk);
  auto access = std::make_unique<MemorySpan>();  // a packet's copy under way
  ASSERT_EQ(mrs.remote(fr.key, kPd, kQpnA, Mappings::kIova, 8, kAccessRemoteWrite, access.get()),
            MrCheck::kOk);
  std::atomic<bool> invalidated{false};
  std::thread invalidating([&] {
    EXPECT_EQ(mrs.invalidate(fr.key, kPd, 0), MrCheck::kOk);
    invalidated = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(invalidated) << "the consumer could unmap pages a copy is still writing";
  EXPECT_EQ(remote(fr.key, 0, 8), MrCheck::kBadKey) << "no new access starts meanwhile";
  access.reset();
  invalidating.join();
  EXPECT_TRUE(invalidated);
}

TEST_F(FastRegTable, GivenFreeFastRegExpectIndexReleasedWhateverItsKeyByte) {
  ASSERT_EQ(mrs.fast_register(registration(0x09, 1), kPd), MrCheck::kOk);
  EXPECT_EQ(mrs.alloc_fast_reg(kKey | 0x55, kPd, device), EEXIST) << "the index is taken";
  EXPECT_EQ(mrs.remove(kKey), EINVAL) << "an ordinary deregistration names the current key";
  EXPECT_EQ(mrs.free_fast_reg(kKey), 0);
  EXPECT_EQ(mrs.size(), 0u);
  EXPECT_EQ(mrs.free_fast_reg(kKey), EINVAL);
  EXPECT_EQ(mrs.alloc_fast_reg(kKey, kPd, device), 0);
  EXPECT_EQ(mrs.alloc_fast_reg(0x42, kPd, device), EINVAL) << "index 0 is never a key";
}

// --- through the queue pairs ---

SendWqe reg_wr(uint64_t wr_id, const FastReg& fr, uint32_t flags = kSendSignaled) {
  SendWqe w = testing::send_wr(wr_id, WrOpcode::kRegMr, {}, flags);
  w.fast_reg = fr;
  return w;
}

// B owns an FRWR region behind two mappings; A accesses it.
struct FastRegQps : ::testing::Test {
  explicit FastRegQps(testing::ConnectParams params = {}) : pair(params) {
    device->add(1);
    device->add(2);
    EXPECT_EQ(pair.b.engine.mrs().alloc_fast_reg(kKey, kPd, device), 0);
    source = testing::register_region(pair.a.engine, 256, kLocal, 0x5a);
    sink = testing::register_region(pair.a.engine, 256, kLocal, 0);
  }
  // Posts on B's send queue and runs until it completes; its status.
  WcStatus b_runs(const SendWqe& w) {
    const size_t before = pair.b.send_wcs.size();
    EXPECT_EQ(testing::post(*pair.b.qp, w), 0);
    EXPECT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() > before; }));
    return pair.b.send_wcs.back().status;
  }
  // A's WRITE of 16 bytes (0x5a) or READ into `sink` at offset 16 of the region.
  WcStatus a_runs(const SendWqe& w) {
    const size_t before = pair.a.send_wcs.size();
    EXPECT_EQ(testing::post(*pair.a.qp, w), 0);
    EXPECT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() > before; }));
    return pair.a.send_wcs.back().status;
  }
  WcStatus a_writes(uint32_t rkey, uint64_t offset = 16) {
    return a_runs(testing::write_wr(9, {source.sge(0, 16)}, Mappings::kIova + offset, rkey));
  }
  WcStatus a_reads(uint32_t rkey) {
    return a_runs(testing::read_wr(10, {sink.sge(0, 16)}, Mappings::kIova + 16, rkey));
  }

  EnginePair pair;
  std::shared_ptr<Mappings> device = std::make_shared<Mappings>();
  Region source, sink;
};

TEST_F(FastRegQps,
       GivenRegistrationExpectWriteAndReadThroughNewKeyThenNothingAfterLocalInvalidate) {
  const FastReg fr = registration(0x01, 1);
  ASSERT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kSuccess);
  EXPECT_EQ(pair.b.send_wcs[0].opcode, WcOpcode::kRegMr);
  ASSERT_EQ(a_writes(fr.key), WcStatus::kSuccess);
  EXPECT_EQ(device->buffers[1][16], 0x5a);
  EXPECT_EQ(device->buffers[1][15], 0);
  ASSERT_EQ(a_reads(fr.key), WcStatus::kSuccess);
  EXPECT_EQ(sink.bytes[15], 0x5a);
  ASSERT_EQ(b_runs(invalidate_wr(2, WrOpcode::kLocalInv, fr.key)), WcStatus::kSuccess);
  EXPECT_EQ(pair.b.send_wcs[1].opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(a_writes(fr.key), WcStatus::kRemAccessErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
}

TEST_F(FastRegQps, GivenAccessPastTheRegisteredLengthExpectRemoteAccessError) {
  const FastReg fr = registration(0x01, 1, kRemote, 100);
  ASSERT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kSuccess);
  EXPECT_EQ(a_writes(fr.key, 84), WcStatus::kSuccess);
  EXPECT_EQ(a_writes(fr.key, 85), WcStatus::kRemAccessErr);
  EXPECT_EQ(device->buffers[1][99], 0x5a);
}

TEST_F(FastRegQps, GivenSendWithInvalidateExpectReceiverToldAndRegionFree) {
  const FastReg fr = registration(0x03, 1);
  ASSERT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kSuccess);
  Region inbox = testing::register_region(pair.b.engine, 64, kLocal);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, {inbox.sge(0, 64)})), 0);
  ASSERT_EQ(a_runs(invalidate_wr(3, WrOpcode::kSendWithInv, fr.key, {source.sge(0, 8)})),
            WcStatus::kSuccess);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 1; }));
  const Completion& rc = pair.b.recv_wcs[0];
  EXPECT_EQ(rc.status, WcStatus::kSuccess);
  EXPECT_TRUE(rc.wc_flags & kWcWithInv);
  EXPECT_EQ(rc.imm_data, fr.key) << "invalidated_rkey";
  EXPECT_EQ(a_writes(fr.key), WcStatus::kRemAccessErr);
}

TEST_F(FastRegQps, GivenReRegistrationWithNewKeyByteExpectItsMappingUsedAndOldKeyRefused) {
  const FastReg first = registration(0x01, 1);
  const FastReg second = registration(0x02, 2);
  ASSERT_EQ(b_runs(reg_wr(1, first)), WcStatus::kSuccess);
  ASSERT_EQ(b_runs(invalidate_wr(2, WrOpcode::kLocalInv, first.key)), WcStatus::kSuccess);
  ASSERT_EQ(b_runs(reg_wr(3, second)), WcStatus::kSuccess);
  ASSERT_EQ(a_writes(second.key), WcStatus::kSuccess);
  EXPECT_EQ(device->buffers[2][16], 0x5a);
  EXPECT_EQ(device->buffers[1][16], 0) << "the first mapping is no longer reached";
  EXPECT_EQ(a_writes(first.key), WcStatus::kRemAccessErr);
}

TEST_F(FastRegQps, GivenDoubleRegistrationExpectOperationErrorAndTheRestFlushed) {
  ASSERT_EQ(b_runs(reg_wr(1, registration(0x01, 1))), WcStatus::kSuccess);
  ASSERT_EQ(testing::post(*pair.b.qp, reg_wr(2, registration(0x02, 2))), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, invalidate_wr(3, WrOpcode::kLocalInv, kKey | 0x01)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 3; }));
  EXPECT_EQ(pair.b.send_wcs[1].status, WcStatus::kLocQpOpErr);
  EXPECT_EQ(pair.b.send_wcs[1].opcode, WcOpcode::kRegMr);
  EXPECT_EQ(pair.b.send_wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.b.state(), QpState::kErr);
  EXPECT_EQ(device->binds, std::vector<uint32_t>{1});
}

TEST_F(FastRegQps, GivenRegionOfAnotherPdExpectOperationError) {
  ASSERT_EQ(pair.b.engine.mrs().alloc_fast_reg(0x6500, kOtherPd, device), 0);
  FastReg fr = registration(0x01, 1);
  fr.key = 0x6501;
  EXPECT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kLocQpOpErr);
  EXPECT_EQ(pair.b.state(), QpState::kErr);
}

TEST_F(FastRegQps, GivenLocalAccessThroughInvalidatedRegionExpectLocalProtectionError) {
  const FastReg fr = registration(0x04, 1);
  device->buffers[1].assign(kLength, 0x77);
  Region inbox = testing::register_region(pair.a.engine, 64, kLocal);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::recv_wr(5, {inbox.sge(0, 64)})), 0);
  ASSERT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kSuccess);
  const Sge from_region{Mappings::kIova, 8, fr.key};
  ASSERT_EQ(b_runs(testing::send_wr(2, WrOpcode::kSend, {from_region})), WcStatus::kSuccess);
  EXPECT_EQ(inbox.bytes[7], 0x77);
  ASSERT_EQ(b_runs(invalidate_wr(3, WrOpcode::kLocalInv, fr.key)), WcStatus::kSuccess);
  EXPECT_EQ(b_runs(testing::send_wr(4, WrOpcode::kSend, {from_region})), WcStatus::kLocProtErr);
}

TEST_F(FastRegQps, GivenFencedRegistrationExpectItWaitsForTheReadBefore) {
  ASSERT_EQ(b_runs(reg_wr(1, registration(0x01, 1))), WcStatus::kSuccess);
  ASSERT_EQ(b_runs(invalidate_wr(2, WrOpcode::kLocalInv, kKey | 0x01)), WcStatus::kSuccess);
  Region far = testing::register_region(pair.a.engine, 64, kRemote, 0x33);
  Region near = testing::register_region(pair.b.engine, 64, kLocal);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::read_wr(3, {near.sge(0, 64)}, far.addr(), far.key)),
            0);
  const FastReg fr = registration(0x02, 2);
  ASSERT_EQ(testing::post(*pair.b.qp, reg_wr(4, fr, kSendSignaled | kSendFence)), 0);
  MemoryRegion r;
  EXPECT_FALSE(pair.b.engine.mrs().find_region(fr.key, &r)) << "the READ is outstanding";
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 4; }));
  EXPECT_EQ(testing::ids(pair.b.send_wcs), (std::vector<uint64_t>{1, 2, 3, 4}));
  testing::expect_all(pair.b.send_wcs, WcStatus::kSuccess);
  ASSERT_TRUE(pair.b.engine.mrs().find_region(fr.key, &r));
  EXPECT_TRUE(r.valid);
}

struct FastRegUc : FastRegQps {
  static testing::ConnectParams uc() {
    testing::ConnectParams p;
    p.type = QpType::kUc;
    return p;
  }
  FastRegUc() : FastRegQps(uc()) {}
};

TEST_F(FastRegUc, GivenUcQpExpectRegistrationAndWriteThroughIt) {
  const FastReg fr = registration(0x05, 1);
  ASSERT_EQ(b_runs(reg_wr(1, fr)), WcStatus::kSuccess);
  ASSERT_EQ(a_writes(fr.key), WcStatus::kSuccess);
  ASSERT_TRUE(pair.run_until([&] { return device->buffers[1][16] == 0x5a; }));
}

TEST(EngineFastReg, GivenUdQpExpectRegistrationRefusedAtPost) {
  testing::ConnectParams p;
  p.type = QpType::kUd;
  testing::FakeLink link;
  testing::Endpoint e(link, testing::kLidA, testing::kGuidA, kQpnA, p);
  ASSERT_EQ(testing::bring_to(*e.qp, QpState::kRts, testing::full_attr(0, 0)), 0);
  EXPECT_EQ(testing::post(*e.qp, reg_wr(1, registration(0x01, 1))), EINVAL);
}

}  // namespace
}  // namespace ibemu::engine
