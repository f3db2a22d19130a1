// Memory regions (IBA 10.6.3.2): a key is checked for existence, protection
// domain, bounds and access rights before memory is touched; regions are
// byte-granular; scatter/gather lists are walked piece by piece.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "transport/engine/mr_table.h"

namespace ibemu::engine {
namespace {

constexpr uint32_t kPd = 5;
constexpr uint32_t kOtherPd = 6;
constexpr uint32_t kQpn = 0x11;

uint64_t addr_of(const void* p) { return reinterpret_cast<uint64_t>(p); }

TEST(EngineMr, GivenRegisteredRegionExpectAccessInsideLandsAtTheRightByte) {
  MrTable mrs;
  std::vector<uint8_t> buf(4096);
  const uint32_t key = mrs.add(kPd, buf.data(), addr_of(buf.data()), buf.size(),
                               kAccessLocalWrite | kAccessRemoteWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.local(key, kPd, addr_of(buf.data()) + 100, 50, kAccessLocalWrite, &p),
            MrCheck::kOk);
  EXPECT_EQ(p, buf.data() + 100);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, addr_of(buf.data()), 4096, kAccessRemoteWrite, &p),
            MrCheck::kOk);
  EXPECT_EQ(p, buf.data());
}

TEST(EngineMr, GivenIovaDifferentFromAddressExpectTranslation) {
  // A zero-based or re-registered region: the peer's VA is not our pointer.
  MrTable mrs;
  std::vector<uint8_t> buf(64);
  const uint32_t key = mrs.add(kPd, buf.data(), 0x1000, buf.size(), kAccessRemoteWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, 0x1010, 8, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_EQ(p, buf.data() + 16);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, addr_of(buf.data()), 8, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
}

TEST(EngineMr, GivenAKeyChosenByItsOwnerExpectTheRegionUnderItAndItsIndexTakenOnce) {
  // ibemu.ko numbers kernel MRs itself: a DMA MR spans all addresses and
  // does not count against the byte limit.
  MrTable mrs;
  mrs.set_limits(8, 4096);
  std::vector<uint8_t> buf(64);
  ASSERT_EQ(mrs.add_with_key(0x1200, kPd, nullptr, 0, UINT64_MAX, kAccessLocalWrite, nullptr), 0);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.local(0x1200, kPd, addr_of(buf.data()), 64, kAccessLocalWrite, &p), MrCheck::kOk);
  EXPECT_EQ(p, buf.data());
  EXPECT_EQ(mrs.local(0x1200, kOtherPd, addr_of(buf.data()), 64, kAccessLocalWrite, &p),
            MrCheck::kBadPd);
  EXPECT_EQ(mrs.add_with_key(0x1234, kPd, nullptr, 0, 64, 0, nullptr), EEXIST);
  EXPECT_EQ(mrs.add_with_key(0x00ff, kPd, nullptr, 0, 64, 0, nullptr), EINVAL);
  // The limit of 4096 bytes still admits an ordinary region.
  EXPECT_NE(mrs.add(kPd, buf.data(), addr_of(buf.data()), buf.size(), 0), 0u);
  EXPECT_EQ(mrs.remove(0x1200), 0);
  EXPECT_EQ(mrs.add_with_key(0x1234, kPd, nullptr, 0, 64, 0, nullptr), 0);
}

TEST(EngineMr, GivenKeysExpectDistinctNonZeroAndLkeyEqualsRkey) {
  MrTable mrs;
  std::vector<uint8_t> buf(16);
  std::set<uint32_t> keys;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t k = mrs.add(kPd, buf.data(), addr_of(buf.data()), buf.size(), 0);
    EXPECT_NE(k, 0u);
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 1000u);
  EXPECT_EQ(mrs.size(), 1000u);
}

TEST(EngineMr, GivenUnknownOrRemovedKeyExpectBadKey) {
  MrTable mrs;
  std::vector<uint8_t> buf(16);
  const uint32_t key = mrs.add(kPd, buf.data(), addr_of(buf.data()), buf.size(), kAccessLocalWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.local(0, kPd, addr_of(buf.data()), 1, 0, &p), MrCheck::kBadKey);
  EXPECT_EQ(mrs.local(key + 1, kPd, addr_of(buf.data()), 1, 0, &p), MrCheck::kBadKey);
  EXPECT_EQ(mrs.remove(key), 0);
  EXPECT_EQ(mrs.remove(key), EINVAL);
  EXPECT_EQ(mrs.local(key, kPd, addr_of(buf.data()), 1, 0, &p), MrCheck::kBadKey);
  EXPECT_EQ(mrs.size(), 0u);
}

TEST(EngineMr, GivenOtherProtectionDomainExpectBadPd) {
  MrTable mrs;
  std::vector<uint8_t> buf(16);
  const uint32_t key =
      mrs.add(kPd, buf.data(), addr_of(buf.data()), buf.size(), kAccessRemoteWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(key, kOtherPd, kQpn, addr_of(buf.data()), 1, kAccessRemoteWrite, &p),
            MrCheck::kBadPd);
  EXPECT_EQ(mrs.local(key, kOtherPd, addr_of(buf.data()), 1, 0, &p), MrCheck::kBadPd);
}

TEST(EngineMr, GivenMissingAccessFlagExpectNoAccess) {
  MrTable mrs;
  std::vector<uint8_t> buf(16);
  const uint64_t a = addr_of(buf.data());
  uint8_t* p = nullptr;
  const uint32_t ro = mrs.add(kPd, buf.data(), a, 16, 0);  // local read only
  EXPECT_EQ(mrs.local(ro, kPd, a, 16, 0, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.local(ro, kPd, a, 16, kAccessLocalWrite, &p), MrCheck::kNoAccess);
  EXPECT_EQ(mrs.remote(ro, kPd, kQpn, a, 16, kAccessRemoteWrite, &p), MrCheck::kNoAccess);
  EXPECT_EQ(mrs.remote(ro, kPd, kQpn, a, 16, kAccessRemoteRead, &p), MrCheck::kNoAccess);
  const uint32_t rr = mrs.add(kPd, buf.data(), a, 16, kAccessRemoteRead);
  EXPECT_EQ(mrs.remote(rr, kPd, kQpn, a, 16, kAccessRemoteRead, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.remote(rr, kPd, kQpn, a, 16, kAccessRemoteWrite, &p), MrCheck::kNoAccess);
  EXPECT_EQ(mrs.remote(rr, kPd, kQpn, a, 16, kAccessRemoteWrite | kAccessRemoteRead, &p),
            MrCheck::kNoAccess);
}

TEST(EngineMr, GivenFifteenByteRegionExpectEveryByteAndNothingMore) {
  // The RDMA Aware Programming manual's RC example registers a 15-byte malloc.
  MrTable mrs;
  std::vector<uint8_t> backing(64);
  uint8_t* buf = backing.data() + 17;  // not aligned to anything
  const uint64_t a = addr_of(buf);
  const uint32_t key = mrs.add(kPd, buf, a, 15, kAccessLocalWrite | kAccessRemoteWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a, 15, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a + 14, 1, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_EQ(p, buf + 14);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a, 16, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a + 15, 1, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a - 1, 1, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(key, kPd, kQpn, a - 1, 2, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.local(key, kPd, a + 1, 15, 0, &p), MrCheck::kOutOfBounds);
}

TEST(EngineMr, GivenZeroLengthExpectAcceptedOnlyInsideOrAtTheEnd) {
  MrTable mrs;
  std::vector<uint8_t> buf(32);
  const uint64_t a = addr_of(buf.data());
  const uint32_t key = mrs.add(kPd, buf.data(), a, 32, kAccessLocalWrite);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.local(key, kPd, a, 0, 0, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.local(key, kPd, a + 32, 0, 0, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.local(key, kPd, a + 33, 0, 0, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.local(key, kPd, a - 1, 0, 0, &p), MrCheck::kOutOfBounds);
}

TEST(EngineMr, GivenValuesThatOverflowExpectOutOfBoundsNeverWrapAround) {
  MrTable mrs;
  std::vector<uint8_t> buf(0x1000);
  uint8_t* p = nullptr;
  const uint32_t low = mrs.add(kPd, buf.data(), 0x1000, 0x1000, kAccessRemoteWrite);
  // va + len wraps to a small number that looks in bounds.
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, 0x1800, UINT64_MAX - 0x7ff, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, 0x1800, UINT64_MAX, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, UINT64_MAX, 2, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, UINT64_MAX - 0xfff, 0x1000, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, 0x1fff, 2, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(low, kPd, kQpn, 0x1fff, 1, kAccessRemoteWrite, &p), MrCheck::kOk);

  // A region whose last byte is the last address there is.
  const uint64_t top = UINT64_MAX - 0xfff;
  const uint32_t high = mrs.add(kPd, buf.data(), top, 0x1000, kAccessRemoteWrite);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, top, 0x1000, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, UINT64_MAX, 1, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_EQ(p, buf.data() + 0xfff);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, UINT64_MAX, 2, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, top, 0x1001, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, 0, 1, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(high, kPd, kQpn, top - 1, 1, kAccessRemoteWrite, &p), MrCheck::kOutOfBounds);
}

// --- scatter/gather ---

class SgeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < mem_.size(); ++i) mem_[i] = static_cast<uint8_t>(i * 7 + 3);
    key_ = mrs_.add(kPd, mem_.data(), addr_of(mem_.data()), mem_.size(), kAccessLocalWrite);
    ro_key_ = mrs_.add(kPd, mem_.data(), addr_of(mem_.data()), mem_.size(), 0);
  }
  Sge sge(size_t off, uint32_t len, uint32_t key = 0) const {
    return Sge{addr_of(mem_.data()) + off, len, key ? key : key_};
  }

  MrTable mrs_;
  std::vector<uint8_t> mem_ = std::vector<uint8_t>(256);
  uint32_t key_ = 0, ro_key_ = 0;
};

TEST_F(SgeFixture, GivenSeveralSgesExpectGatherConcatenatesThem) {
  const Sge sges[] = {sge(10, 5), sge(100, 0), sge(40, 3), sge(200, 8)};
  std::vector<uint8_t> out(16, 0xee);
  ASSERT_EQ(copy_from_sges(mrs_, kPd, sges, 4, 0, out.data(), 16), MrCheck::kOk);
  std::vector<uint8_t> want;
  for (size_t o : {10, 11, 12, 13, 14, 40, 41, 42, 200, 201, 202, 203, 204, 205, 206, 207})
    want.push_back(mem_[o]);
  EXPECT_EQ(out, want);
}

TEST_F(SgeFixture, GivenMessageOffsetExpectGatherStartsInTheRightSge) {
  const Sge sges[] = {sge(10, 5), sge(40, 3), sge(200, 8)};
  // Message bytes 4..9: last byte of SGE 0, all of SGE 1, first two of SGE 2.
  std::vector<uint8_t> out(6);
  ASSERT_EQ(copy_from_sges(mrs_, kPd, sges, 3, 4, out.data(), 6), MrCheck::kOk);
  EXPECT_EQ(out,
            (std::vector<uint8_t>{mem_[14], mem_[40], mem_[41], mem_[42], mem_[200], mem_[201]}));
}

TEST_F(SgeFixture, GivenSeveralSgesAndOffsetsExpectScatterWritesOnlyInsideThem) {
  const Sge sges[] = {sge(0, 4), sge(50, 6), sge(128, 10)};
  const std::vector<uint8_t> before = mem_;
  std::vector<uint8_t> src(20);
  std::iota(src.begin(), src.end(), uint8_t{0x80});
  // Two pieces: message bytes 0..6, then 7..19, as packets would bring them.
  ASSERT_EQ(copy_to_sges(mrs_, kPd, sges, 3, 0, src.data(), 7), MrCheck::kOk);
  ASSERT_EQ(copy_to_sges(mrs_, kPd, sges, 3, 7, src.data() + 7, 13), MrCheck::kOk);
  std::vector<uint8_t> want = before;
  size_t k = 0;
  for (const Sge& s : sges)
    for (uint32_t i = 0; i < s.length; ++i) want[s.addr - addr_of(mem_.data()) + i] = src[k++];
  EXPECT_EQ(mem_, want);
}

TEST_F(SgeFixture, GivenMoreBytesThanTheSgesHoldExpectOutOfBounds) {
  const Sge sges[] = {sge(0, 4), sge(50, 6)};
  std::vector<uint8_t> src(11);
  EXPECT_EQ(copy_to_sges(mrs_, kPd, sges, 2, 0, src.data(), 11), MrCheck::kOutOfBounds);
  EXPECT_EQ(copy_to_sges(mrs_, kPd, sges, 2, 5, src.data(), 6), MrCheck::kOutOfBounds);
  EXPECT_EQ(copy_to_sges(mrs_, kPd, sges, 2, 10, src.data(), 0), MrCheck::kOk);
  EXPECT_EQ(copy_from_sges(mrs_, kPd, sges, 2, 0, src.data(), 11), MrCheck::kOutOfBounds);
}

TEST_F(SgeFixture, GivenBadSgeExpectItsFailureReported) {
  std::vector<uint8_t> src(8);
  const Sge bad_key[] = {sge(0, 4), Sge{addr_of(mem_.data()), 4, 0xdeadbeef}};
  EXPECT_EQ(copy_to_sges(mrs_, kPd, bad_key, 2, 0, src.data(), 8), MrCheck::kBadKey);
  std::vector<uint8_t> dst(12);
  const Sge outside[] = {sge(0, 4), sge(250, 8)};  // ends 2 bytes past the region
  EXPECT_EQ(copy_from_sges(mrs_, kPd, outside, 2, 0, dst.data(), 12), MrCheck::kOutOfBounds);
  EXPECT_EQ(copy_from_sges(mrs_, kPd, outside, 2, 0, dst.data(), 10), MrCheck::kOk);
  const Sge wrong_pd[] = {sge(0, 8)};
  EXPECT_EQ(copy_from_sges(mrs_, kOtherPd, wrong_pd, 1, 0, src.data(), 8), MrCheck::kBadPd);
  // Scattering needs local write; gathering does not.
  const Sge read_only[] = {sge(0, 8, ro_key_)};
  EXPECT_EQ(copy_to_sges(mrs_, kPd, read_only, 1, 0, src.data(), 8), MrCheck::kNoAccess);
  EXPECT_EQ(copy_from_sges(mrs_, kPd, read_only, 1, 0, src.data(), 8), MrCheck::kOk);
}

}  // namespace
}  // namespace ibemu::engine
