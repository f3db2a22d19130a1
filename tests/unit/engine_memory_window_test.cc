// Memory windows (IBA 10.6.7): given a window bound onto part of a region,
// expect remote accesses through its rkey to land inside that part with the
// rights the bind granted, and nowhere once it is invalidated; binds and
// invalidations run in send-queue order and complete exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using testing::EnginePair;
using testing::invalidate_wr;
using testing::kLocal;
using testing::kPd;
using testing::kQpnA;
using testing::kQpnB;
using testing::kRemote;
using testing::Region;

constexpr uint32_t kOtherPd = kPd + 1;
constexpr uint32_t kBindable = kRemote | kAccessMwBind;

uint32_t next_key(uint32_t rkey) { return (rkey & 0xffffff00u) | ((rkey + 1) & 0xffu); }

struct Table : ::testing::Test {
  Table() : bytes(4096, 0) { mr = mrs.add(kPd, bytes.data(), base(), bytes.size(), kBindable); }
  uint64_t base() const { return reinterpret_cast<uint64_t>(bytes.data()); }
  WindowBind bind_of(uint32_t mw, uint64_t off, uint64_t len, uint32_t access) const {
    return WindowBind{mw, next_key(mw), mr, base() + off, len, access};
  }

  MrTable mrs;
  std::vector<uint8_t> bytes;
  uint32_t mr = 0;
};

TEST_F(Table, GivenBoundWindowExpectAccessInsideItLandsInTheRegion) {
  const uint32_t mw = mrs.alloc_window(kPd, 1);
  const WindowBind b = bind_of(mw, 100, 200, kAccessRemoteWrite);
  ASSERT_EQ(mrs.bind_window(b, kPd, kQpnA), MrCheck::kOk);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnB, base() + 150, 50, kAccessRemoteWrite, &p),
            MrCheck::kOk);
  EXPECT_EQ(p, bytes.data() + 150);
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnB, base() + 99, 2, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnB, base() + 250, 51, kAccessRemoteWrite, &p),
            MrCheck::kOutOfBounds);
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnB, base() + 150, 8, kAccessRemoteRead, &p),
            MrCheck::kNoAccess);
  EXPECT_EQ(mrs.remote(mw, kPd, kQpnB, base() + 150, 8, kAccessRemoteWrite, &p), MrCheck::kBadKey)
      << "the key before the bind no longer opens the window";
  EXPECT_EQ(mrs.remote(b.new_rkey, kOtherPd, kQpnB, base() + 150, 8, kAccessRemoteWrite, &p),
            MrCheck::kBadPd);
}

TEST_F(Table, GivenZeroBasedWindowExpectOffsetsFromZero) {
  const uint32_t mw = mrs.alloc_window(kPd, 2);
  const WindowBind b = bind_of(mw, 1000, 16, kAccessRemoteRead | kAccessZeroBased);
  ASSERT_EQ(mrs.bind_window(b, kPd, kQpnA), MrCheck::kOk);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnA, 8, 8, kAccessRemoteRead, &p), MrCheck::kOk);
  EXPECT_EQ(p, bytes.data() + 1008);
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnA, 9, 8, kAccessRemoteRead, &p), MrCheck::kOutOfBounds);
}

struct BadBind {
  const char* why;
  uint32_t region_access;
  uint32_t window_access;
  uint64_t offset, length;
  uint32_t qp_pd;
  bool wrong_index;
};

class TableBadBind : public Table, public ::testing::WithParamInterface<BadBind> {};

TEST_P(TableBadBind, GivenBindBreakingARuleExpectRefusedAndWindowUnbound) {
  const BadBind& c = GetParam();
  const uint32_t key = mrs.add(kPd, bytes.data(), base(), bytes.size(), c.region_access);
  const uint32_t mw = mrs.alloc_window(kPd, 2);
  WindowBind b{mw, next_key(mw), key, base() + c.offset, c.length, c.window_access};
  if (c.wrong_index) b.new_rkey ^= 0x100;
  EXPECT_NE(mrs.bind_window(b, c.qp_pd, kQpnA), MrCheck::kOk) << c.why;
  MemoryWindow w;
  ASSERT_TRUE(mrs.find_window(mw, &w));
  EXPECT_FALSE(w.bound);
  EXPECT_EQ(mrs.remove(key), 0) << "no window holds the region";
}

INSTANTIATE_TEST_SUITE_P(
    Rules, TableBadBind,
    ::testing::Values(
        BadBind{"region without MW_BIND", kRemote, kAccessRemoteRead, 0, 64, kPd, false},
        BadBind{"writable window on a region the HCA may not write",
                kAccessRemoteRead | kAccessMwBind, kAccessRemoteWrite, 0, 64, kPd, false},
        BadBind{"window past the region's end", kBindable, kAccessRemoteRead, 4000, 97, kPd, false},
        BadBind{"QP of another PD", kBindable, kAccessRemoteRead, 0, 64, kOtherPd, false},
        BadBind{"new key with another index", kBindable, kAccessRemoteRead, 0, 64, kPd, true}));

TEST_F(Table, GivenType2WindowExpectOnlyItsOwnQpUsesItAndOneBindAtATime) {
  const uint32_t mw = mrs.alloc_window(kPd, 2);
  const WindowBind b = bind_of(mw, 0, 64, kAccessRemoteWrite);
  ASSERT_EQ(mrs.bind_window(b, kPd, kQpnA), MrCheck::kOk);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnA, base(), 8, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_NE(mrs.remote(b.new_rkey, kPd, kQpnB, base(), 8, kAccessRemoteWrite, &p), MrCheck::kOk);
  EXPECT_NE(mrs.bind_window(bind_of(b.new_rkey, 0, 64, kAccessRemoteWrite), kPd, kQpnA),
            MrCheck::kOk)
      << "a bound type 2 window is invalidated before it is bound again";
  EXPECT_NE(mrs.invalidate(b.new_rkey, kPd, kQpnB), MrCheck::kOk)
      << "SEND with Invalidate from another QP";
  EXPECT_EQ(mrs.invalidate(b.new_rkey, kPd, kQpnA), MrCheck::kOk);
  EXPECT_EQ(mrs.remote(b.new_rkey, kPd, kQpnA, base(), 8, kAccessRemoteWrite, &p),
            MrCheck::kBadKey);
  EXPECT_NE(mrs.invalidate(b.new_rkey, kPd, 0), MrCheck::kOk) << "already invalid";
  EXPECT_EQ(mrs.bind_window(bind_of(b.new_rkey, 0, 64, kAccessRemoteRead), kPd, kQpnB),
            MrCheck::kOk);
}

TEST_F(Table, GivenType1WindowExpectZeroLengthBindTakesItBackAndNoInvalidate) {
  const uint32_t mw = mrs.alloc_window(kPd, 1);
  const WindowBind b = bind_of(mw, 0, 64, kAccessRemoteRead);
  ASSERT_EQ(mrs.bind_window(b, kPd, kQpnA), MrCheck::kOk);
  EXPECT_NE(mrs.invalidate(b.new_rkey, kPd, 0), MrCheck::kOk);
  const WindowBind unbind = bind_of(b.new_rkey, 0, 0, 0);
  ASSERT_EQ(mrs.bind_window(unbind, kPd, kQpnA), MrCheck::kOk);
  uint8_t* p = nullptr;
  EXPECT_EQ(mrs.remote(unbind.new_rkey, kPd, kQpnA, base(), 1, kAccessRemoteRead, &p),
            MrCheck::kBadKey);
}

TEST_F(Table, GivenWindowBoundToRegionExpectDeregistrationRefusedUntilItGoes) {
  const uint32_t mw = mrs.alloc_window(kPd, 1);
  ASSERT_EQ(mrs.bind_window(bind_of(mw, 0, 64, kAccessRemoteRead), kPd, kQpnA), MrCheck::kOk);
  EXPECT_EQ(mrs.remove(mr), EBUSY);
  EXPECT_TRUE(mrs.free_window(next_key(mw)));
  EXPECT_EQ(mrs.remove(mr), 0);
  EXPECT_FALSE(mrs.free_window(next_key(mw)));
}

TEST_F(Table, GivenManyKeysExpectRegionsAndWindowsNeverShareAnIndex) {
  std::vector<uint32_t> keys{mr};
  for (int i = 0; i < 2000; ++i)
    keys.push_back(i % 2 ? mrs.alloc_window(kPd, 2)
                         : mrs.add(kPd, bytes.data(), base(), bytes.size(), kLocal));
  std::vector<uint32_t> indices;
  for (uint32_t k : keys) indices.push_back(k >> 8);
  std::sort(indices.begin(), indices.end());
  EXPECT_EQ(std::adjacent_find(indices.begin(), indices.end()), indices.end());
  EXPECT_EQ(std::count(indices.begin(), indices.end(), 0u), 0);
}

// --- through the queue pairs ---

SendWqe bind_wr(uint64_t wr_id, const WindowBind& b, uint32_t flags = kSendSignaled) {
  SendWqe w = testing::send_wr(wr_id, WrOpcode::kBindMw, {}, flags);
  w.bind = b;
  return w;
}

struct Windows : ::testing::Test {
  Windows() {
    target = testing::register_region(pair.b.engine, 256, kBindable, 0);
    source = testing::register_region(pair.a.engine, 256, kLocal, 0x5a);
    mw = pair.b.engine.mrs().alloc_window(kPd, 2);
  }
  WindowBind bind_of(uint32_t window, uint32_t access = kAccessRemoteWrite) const {
    return WindowBind{window, next_key(window), target.key, target.addr(), 128, access};
  }
  bool write_through(uint32_t rkey, uint64_t wr_id) {
    const size_t before = pair.a.send_wcs.size();
    EXPECT_EQ(testing::post(*pair.a.qp,
                            testing::write_wr(wr_id, {source.sge(0, 16)}, target.addr(16), rkey)),
              0);
    EXPECT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() > before; }));
    return pair.a.send_wcs.back().status == WcStatus::kSuccess;
  }

  EnginePair pair;
  Region target, source;
  uint32_t mw = 0;
};

TEST_F(Windows, GivenType2BindExpectBindCompletionThenWritesLandThroughTheWindow) {
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(1, bind_of(mw))), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 1; }));
  EXPECT_EQ(pair.b.send_wcs[0].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(pair.b.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(write_through(next_key(mw), 7));
  EXPECT_EQ(target.bytes[16], 0x5a);
  EXPECT_EQ(target.bytes[15], 0);
}

TEST_F(Windows, GivenSendWithInvalidateExpectReceiverToldAndWindowClosed) {
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(1, bind_of(mw))), 0);
  const uint32_t rkey = next_key(mw);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, {target.sge(200, 56)})), 0);
  ASSERT_EQ(
      testing::post(*pair.a.qp, invalidate_wr(3, WrOpcode::kSendWithInv, rkey, {source.sge(0, 8)})),
      0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 1; }));
  const Completion& rc = pair.b.recv_wcs[0];
  EXPECT_EQ(rc.status, WcStatus::kSuccess);
  EXPECT_TRUE(rc.wc_flags & kWcWithInv);
  EXPECT_EQ(rc.imm_data, rkey) << "invalidated_rkey";
  EXPECT_FALSE(write_through(rkey, 4));
  EXPECT_EQ(pair.a.send_wcs.back().status, WcStatus::kRemAccessErr);
}

TEST_F(Windows, GivenSendWithInvalidateOfUnknownKeyExpectInvalidRequestAtBothEnds) {
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, {target.sge(200, 56)})), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, invalidate_wr(3, WrOpcode::kSendWithInv, mw ^ 0x10000,
                                                    {source.sge(0, 8)})),
            0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  EXPECT_EQ(pair.b.state(), QpState::kErr);
}

TEST_F(Windows, GivenLocalInvalidateExpectCompletionInOrderAndWindowClosed) {
  const uint32_t rkey = next_key(mw);
  // The bind and the invalidate complete after the SEND before them, which
  // waits for its ACK.
  ASSERT_EQ(testing::post(*pair.a.qp, testing::recv_wr(9, {source.sge(100, 50)})), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::send_wr(1, WrOpcode::kSend, {target.sge(0, 8)})), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(2, bind_of(mw))), 0);
  ASSERT_TRUE(pair.b.send_wcs.empty()) << "the bind waits for the SEND before it";
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 2; }));
  EXPECT_TRUE(write_through(rkey, 5));
  ASSERT_EQ(testing::post(*pair.b.qp, invalidate_wr(3, WrOpcode::kLocalInv, rkey)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 3; }));
  EXPECT_EQ(testing::ids(pair.b.send_wcs), (std::vector<uint64_t>{1, 2, 3}));
  testing::expect_all(pair.b.send_wcs, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.send_wcs[2].opcode, WcOpcode::kLocalInv);
  EXPECT_FALSE(write_through(rkey, 6));
}

TEST_F(Windows, GivenBadBindExpectBindErrorAndTheRestFlushed) {
  WindowBind b = bind_of(mw);
  b.length = 1 << 20;  // past the region
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(1, b)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(2, bind_of(mw))), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 2; }));
  EXPECT_EQ(pair.b.send_wcs[0].status, WcStatus::kMwBindErr);
  EXPECT_EQ(pair.b.send_wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.b.state(), QpState::kErr);
}

TEST_F(Windows, GivenLocalInvalidateOfType1WindowExpectOperationError) {
  const uint32_t type1 = pair.b.engine.mrs().alloc_window(kPd, 1);
  ASSERT_EQ(testing::post(*pair.b.qp, bind_wr(1, bind_of(type1))), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, invalidate_wr(2, WrOpcode::kLocalInv, next_key(type1))), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 2; }));
  EXPECT_EQ(pair.b.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.send_wcs[1].status, WcStatus::kLocQpOpErr);
}

TEST_F(Windows, GivenWindowOfOtherQpExpectRemoteAccessError) {
  // Bound through a second QP of B: the window belongs to a QP the writer is
  // not connected to (type 2B, IBA 10.6.7.2.2).
  auto other = pair.b.create_qp(0x33, pair.params);
  testing::connect_qp(*other, pair.params, testing::kLidA, 0x44, 0, 0, kRemote);
  ASSERT_EQ(testing::post(*other, bind_wr(1, bind_of(mw))), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.send_wcs.size() == 1; }));
  ASSERT_EQ(pair.b.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_FALSE(write_through(next_key(mw), 8));
  EXPECT_EQ(pair.a.send_wcs.back().status, WcStatus::kRemAccessErr);
}

}  // namespace
}  // namespace ibemu::engine
