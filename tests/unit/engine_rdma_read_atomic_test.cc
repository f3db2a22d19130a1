// RDMA READ and atomics over RC (IBA 9.4.4, 9.4.5, 9.7.4.1.3, 9.7.5.1.3): two
// HCAs, one connected QP each, a fake link under the test's control. Given a
// READ or atomic and a link behaviour, expect the data where it belongs, the
// remote word changed exactly once, every work request completed exactly once
// with the right status, and the QPs in the right state.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::ConnectParams;
using testing::EnginePair;
using testing::expect_all;
using testing::Fate;
using testing::ids;
using testing::kGap;
using testing::kGuard;
using testing::kLidA;
using testing::kLidB;
using testing::kLocal;
using testing::kQpnA;
using testing::kRemote;
using testing::Message;
using testing::Region;
using testing::Target;
using testing::WirePacket;

constexpr uint32_t kAtomicAccess = kRemote | kAccessRemoteAtomic;

// --- what a packet is ---

bool is_read_request(const WirePacket& p) { return p.flags() & wire::kIsReadRequest; }
bool is_read_response(const WirePacket& p) { return p.flags() & wire::kIsReadResponse; }
bool is_atomic_request(const WirePacket& p) { return p.flags() & wire::kIsAtomic; }
bool is_atomic_ack(const WirePacket& p) { return p.flags() & wire::kIsAtomicAck; }
// A READ or atomic request: the requester waits for its response.
bool is_rd_atomic_request(const WirePacket& p) {
  return p.slid() == kLidA && (is_read_request(p) || is_atomic_request(p));
}
// The packet that ends a READ or atomic at the requester.
bool ends_rd_atomic(const WirePacket& p) {
  return p.slid() == kLidB &&
         ((is_read_response(p) && (p.flags() & wire::kIsLast)) || is_atomic_ack(p));
}

std::vector<WirePacket> packets_from(const EnginePair& pair, uint16_t lid,
                                     bool (*what)(const WirePacket&)) {
  std::vector<WirePacket> out;
  for (const WirePacket& p : pair.link.log())
    if (p.slid() == lid && what(p)) out.push_back(p);
  return out;
}

// Index in the link's log of the first (last) packet from `lid` that is `what`.
ptrdiff_t first_in_log(const EnginePair& pair, uint16_t lid, bool (*what)(const WirePacket&)) {
  const auto& log = pair.link.log();
  for (size_t i = 0; i < log.size(); ++i)
    if (log[i].slid() == lid && what(log[i])) return static_cast<ptrdiff_t>(i);
  return -1;
}
ptrdiff_t last_in_log(const EnginePair& pair, uint16_t lid, bool (*what)(const WirePacket&)) {
  const auto& log = pair.link.log();
  for (size_t i = log.size(); i-- > 0;)
    if (log[i].slid() == lid && what(log[i])) return static_cast<ptrdiff_t>(i);
  return -1;
}

// --- buffers ---

/// A READ laid out: `len` bytes in a registered region on the responder (the
/// source) and several SGEs on the requester (the destination), with guard
/// bytes between and around them.
struct ReadJob {
  ReadJob(testing::Endpoint& requester, testing::Endpoint& responder, size_t len, uint32_t seed,
          int parts = 3, uint32_t source_access = kRemote)
      : data(testing::pattern(len, seed)), source(responder, len, source_access) {
    std::copy(data.begin(), data.end(), source.region.bytes.begin() + kGap);
    local = testing::register_region(requester.engine, len + kGap * (parts + 1), kLocal, kGuard);
    size_t off = kGap;
    for (uint32_t n : testing::split(len, parts)) {
      sges.push_back(local.sge(off, n));
      off += n + kGap;
    }
  }

  SendWqe wr(uint64_t wr_id, uint32_t flags = kSendSignaled) const {
    return testing::read_wr(wr_id, sges, source.va(), source.rkey(), flags);
  }

  /// The local SGEs hold the source bytes in order; no other local byte was
  /// written, and the source is as it was.
  void expect_landed() const {
    std::vector<uint8_t> want(local.bytes.size(), kGuard);
    size_t pos = 0;
    for (const Sge& s : sges)
      for (uint32_t i = 0; i < s.length; ++i) want[s.addr - local.addr() + i] = data[pos++];
    EXPECT_TRUE(want == local.bytes) << "READ destination differs from the source";
    source.expect_holds(data);
  }
  void expect_untouched() const {
    EXPECT_TRUE(std::all_of(local.bytes.begin(), local.bytes.end(), [](uint8_t b) {
      return b == kGuard;
    })) << "READ destination written";
  }

  std::vector<uint8_t> data;
  Target source;
  Region local;
  std::vector<Sge> sges;
};

/// A naturally aligned 64-bit word on the responder, guard bytes around it.
struct RemoteWord {
  RemoteWord(testing::Endpoint& owner, uint64_t value, uint32_t access = kAtomicAccess)
      : region(testing::register_region(owner.engine, 24, access, kGuard)) {
    EXPECT_EQ(va() % 8, 0u);
    set(value);
  }
  uint64_t va() const { return region.addr(8); }
  uint32_t rkey() const { return region.key; }
  uint64_t get() const {
    uint64_t v;
    std::memcpy(&v, region.bytes.data() + 8, 8);
    return v;
  }
  void set(uint64_t v) { std::memcpy(region.bytes.data() + 8, &v, 8); }
  bool guards_intact() const {
    return std::all_of(region.bytes.begin(), region.bytes.begin() + 8,
                       [](uint8_t b) { return b == kGuard; }) &&
           std::all_of(region.bytes.begin() + 16, region.bytes.end(),
                       [](uint8_t b) { return b == kGuard; });
  }
  Region region;
};

/// Local 8-byte slots for atomic results (unaligned on purpose: the local
/// buffer need not be), guard bytes between them.
struct ResultSlots {
  ResultSlots(testing::Endpoint& owner, size_t count, uint32_t access = kLocal)
      : region(testing::register_region(owner.engine, count * (8 + kGap) + kGap, access, kGuard)) {}
  size_t offset(size_t i) const { return kGap + i * (8 + kGap); }
  Sge sge(size_t i = 0) const { return region.sge(offset(i), 8); }
  uint64_t value(size_t i = 0) const {
    uint64_t v;
    std::memcpy(&v, region.bytes.data() + offset(i), 8);
    return v;
  }
  bool untouched(size_t i = 0) const {
    return std::all_of(region.bytes.begin() + offset(i), region.bytes.begin() + offset(i) + 8,
                       [](uint8_t b) { return b == kGuard; });
  }
  bool guards_intact() const {
    for (size_t pos = 0; pos < region.bytes.size(); ++pos)
      if ((pos < kGap || (pos - kGap) % (8 + kGap) >= 8) && region.bytes[pos] != kGuard)
        return false;
    return true;
  }
  Region region;
};

SendWqe fetch_add(uint64_t wr_id, const Sge& result, const RemoteWord& w, uint64_t add,
                  uint32_t flags = kSendSignaled) {
  return testing::atomic_wr(wr_id, WrOpcode::kAtomicFetchAndAdd, {result}, w.va(), w.rkey(), add, 0,
                            flags);
}
SendWqe cmp_swap(uint64_t wr_id, const Sge& result, const RemoteWord& w, uint64_t compare,
                 uint64_t swap, uint32_t flags = kSendSignaled) {
  return testing::atomic_wr(wr_id, WrOpcode::kAtomicCmpAndSwp, {result}, w.va(), w.rkey(), compare,
                            swap, flags);
}

ConnectParams atomic_params() {
  ConnectParams p;
  p.access_b |= kAccessRemoteAtomic;
  return p;
}

// For tests that lose nothing and count packets: a local ACK timeout
// (≈ 67 ms) no slow run reaches, so nothing is sent twice.
ConnectParams patient(ConnectParams p) {
  p.timeout = 14;
  return p;
}

/// Drops the first packet that matches; everything else passes.
struct DropFirst {
  std::function<bool(const WirePacket&)> match;
  bool dropped = false;
  Fate operator()(const WirePacket& p) {
    if (dropped || !match(p)) return Fate::kDeliver;
    dropped = true;
    return Fate::kDrop;
  }
};

template <typename Policy>
void install(EnginePair& pair, std::shared_ptr<Policy> policy) {
  pair.link.policy = [policy](const WirePacket& p) { return (*policy)(p); };
}

// --- READ at every size and path MTU ---

class RcRead : public ::testing::TestWithParam<std::tuple<uint32_t, int>> {};

TEST_P(RcRead, GivenReadIntoSeveralSgesExpectDataLandedAndOneCompletion) {
  const auto [mtu_enum, kind] = GetParam();
  ConnectParams p = patient({});
  p.path_mtu = mtu_enum;
  EnginePair pair(p);
  const uint32_t mtu = pair.mtu();
  const size_t len = testing::size_for(mtu, kind);
  ReadJob r(pair.a, pair.b, len, mtu_enum * 10 + kind, 4);

  ASSERT_EQ(testing::post(*pair.a.qp, r.wr(7)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));

  r.expect_landed();
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  const Completion& c = pair.a.send_wcs[0];
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(c.byte_len, len);
  EXPECT_EQ(c.qp_num, kQpnA);
  EXPECT_TRUE(pair.b.send_wcs.empty());
  EXPECT_TRUE(pair.b.recv_wcs.empty());

  // On the wire (IBA 9.7.4.1.3): one request with the whole range in its
  // RETH, answered by ceil(len / MTU) responses (one for an empty READ),
  // every one but the last exactly one MTU, on consecutive PSNs from the
  // request's on.
  const auto reqs = pair.requests_from(kLidA);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].opcode(), uint8_t(wire::Opcode::kRcReadRequest));
  EXPECT_EQ(reqs[0].psn(), p.sq_psn_a);
  EXPECT_EQ(reqs[0].payload_len(), 0u);
  EXPECT_EQ(reqs[0].view().reth().va(), r.source.va());
  EXPECT_EQ(reqs[0].view().reth().rkey(), r.source.rkey());
  EXPECT_EQ(reqs[0].view().reth().dma_len(), len);
  const auto resps = packets_from(pair, kLidB, is_read_response);
  const size_t npkts = len == 0 ? 1 : (len + mtu - 1) / mtu;
  ASSERT_EQ(resps.size(), npkts);
  using wire::Opcode;
  for (size_t i = 0; i < npkts; ++i) {
    EXPECT_EQ(resps[i].psn(), wire::psn_add(p.sq_psn_a, static_cast<uint32_t>(i)));
    EXPECT_EQ(resps[i].payload_len(), i + 1 < npkts ? mtu : len - (npkts - 1) * mtu);
    EXPECT_EQ(resps[i].dest_qp, kQpnA);
    const uint8_t want = npkts == 1      ? uint8_t(Opcode::kRcReadResponseOnly)
                         : i == 0        ? uint8_t(Opcode::kRcReadResponseFirst)
                         : i + 1 < npkts ? uint8_t(Opcode::kRcReadResponseMiddle)
                                         : uint8_t(Opcode::kRcReadResponseLast);
    EXPECT_EQ(resps[i].opcode(), want) << "response " << i;
  }
  EXPECT_TRUE(pair.acks_from(kLidB).empty()) << "the responses are the acknowledgement";

  // The READ used up its responses' PSNs on both sides: the next request
  // goes out after them and the responder expects it there.
  Message m(pair.a, pair.b, 10, 99);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(8, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  EXPECT_EQ(pair.requests_from(kLidA).back().psn(),
            wire::psn_add(p.sq_psn_a, static_cast<uint32_t>(npkts)));
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kSuccess);
  m.expect_delivered();
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

std::string read_name(const ::testing::TestParamInfo<std::tuple<uint32_t, int>>& info) {
  static const char* kinds[] = {"Empty", "OneByte", "MtuMinus1", "Mtu", "MtuPlus1", "OneMiB"};
  return "Mtu" + std::to_string(128u << std::get<0>(info.param)) + kinds[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(AllMtusAndSizes, RcRead,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u, 5u),
                                            ::testing::Range(0, 6)),
                         read_name);

TEST(RcRead, GivenZeroLengthReadExpectNoRkeyCheckAndSuccess) {
  // C9-88: a zero-length READ need not carry a valid R_Key or VA.
  EnginePair pair;
  ASSERT_EQ(testing::post(*pair.a.qp, testing::read_wr(1, {}, 0xdead0000, 0x12345)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.a.send_wcs[0].byte_len, 0u);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

// --- remote errors: the requester learns them through a NAK; both QPs end in ERR ---

struct ReadAccessCase {
  const char* what;
  bool wrong_rkey;
  int64_t va_shift;
  uint32_t responder_qp_access;
  uint32_t region_access;
};

TEST(RcRead, GivenRemoteAccessViolationExpectRemAccessErrBothQpsInErrorAndLaterWrsFlushed) {
  const ReadAccessCase cases[] = {
      {"wrong rkey", true, 0, kRemote, kRemote},
      {"range past the end of the region", false, int64_t{kGap} + 1, kRemote, kRemote},
      {"range before the region", false, -int64_t{kGap} - 1, kRemote, kRemote},
      {"region without remote read", false, 0, kRemote, kAccessLocalWrite | kAccessRemoteWrite},
      {"QP without remote read", false, 0, kAccessLocalWrite | kAccessRemoteWrite, kRemote},
  };
  for (const ReadAccessCase& c : cases) {
    SCOPED_TRACE(c.what);
    ConnectParams p;
    p.access_b = c.responder_qp_access;
    EnginePair pair(p);
    ReadJob r(pair.a, pair.b, 2 * 4096 + 100, 41, 3, c.region_access);
    Message later(pair.a, pair.b, 100, 42);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, later.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, later.recv_sges)), 0);
    SendWqe w = r.wr(1);
    w.remote_addr += c.va_shift;
    if (c.wrong_rkey) w.rkey ^= 0x5a5a;
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, later.send_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, later.send_sges, 0)),
              0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }));
    pair.run_for(2ms);

    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemAccessErr);
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.send_wcs[2].status, WcStatus::kWrFlushErr);  // even unsignaled
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    EXPECT_EQ(pair.b.state(), QpState::kErr);
    EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{10, 11}));
    expect_all(pair.b.recv_wcs, WcStatus::kWrFlushErr);
    r.expect_untouched();
    later.expect_untouched();
    EXPECT_TRUE(packets_from(pair, kLidB, is_read_response).empty());
    const auto acks = pair.acks_from(kLidB);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].ack_type(), wire::AckType::kNak);
    EXPECT_EQ(acks[0].ack_value(), uint8_t(wire::NakCode::kRemoteAccessError));
    EXPECT_EQ(acks[0].psn(), p.sq_psn_a);
  }
}

// --- local errors at the requester (IBA 10.7.2.2) ---

struct LocalKeyCase {
  const char* what;
  std::function<Sge(testing::Endpoint&, const Sge& good, std::vector<Region>& keep)> bad_sge;
};

TEST(RcRead, GivenLocalSgeThatFailsItsCheckExpectLocProtErrAndTheRestFlushed) {
  const LocalKeyCase cases[] = {
      {"unknown lkey",
       [](testing::Endpoint&, const Sge& g, std::vector<Region>&) {
         return Sge{g.addr, g.length, 0xdeadbeef};
       }},
      {"region without local write",
       [](testing::Endpoint& e, const Sge& g, std::vector<Region>& keep) {
         keep.push_back(testing::register_region(e.engine, g.length, kAccessRemoteRead, kGuard));
         return keep.back().sge(0, g.length);
       }},
      {"region of another protection domain",
       [](testing::Endpoint& e, const Sge& g, std::vector<Region>& keep) {
         Region r;
         r.bytes.assign(g.length, kGuard);
         r.key = e.engine.mrs().add(testing::kPd + 1, r.bytes.data(), r.addr(), g.length, kLocal);
         r.mrs = &e.engine.mrs();
         keep.push_back(std::move(r));
         return keep.back().sge(0, g.length);
       }},
      {"SGE running past its region",
       [](testing::Endpoint& e, const Sge& g, std::vector<Region>& keep) {
         keep.push_back(testing::register_region(e.engine, g.length - 1, kLocal, kGuard));
         return Sge{keep.back().addr(), g.length, keep.back().key};
       }},
  };
  for (const LocalKeyCase& c : cases) {
    SCOPED_TRACE(c.what);
    EnginePair pair;
    ReadJob r(pair.a, pair.b, 3 * 4096, 43, 3), next(pair.a, pair.b, 100, 44);
    std::vector<Region> keep;
    SendWqe w = r.wr(1);
    w.sge[1] = c.bad_sge(pair.a, w.sge[1], keep);
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);  // posting does not look at lkeys
    ASSERT_EQ(testing::post(*pair.a.qp, next.wr(2)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(2ms);
    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kLocProtErr);
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kRdmaRead);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    // The responder did its part: nothing to fail for.
    EXPECT_EQ(pair.b.state(), QpState::kRts);
    // What landed of READ 1 is undefined (IBA 10.7.2.2); READ 2 never ran.
    next.expect_untouched();
  }
}

// --- max_rd_atomic and fences (IBA 9.7.4.1.3, C9-49; 10.8.3.3) ---

/// Watches the link: how many READs/atomics the requester has outstanding
/// (requests it has put on the link, less those whose last response has been
/// handed to it) each time a packet is taken off the link.
struct OutstandingWatch {
  const testing::FakeLink* link;
  size_t finished = 0;
  size_t peak = 0;
  size_t peak_requests_queued = 0;
  Fate operator()(const WirePacket& p) {
    const auto& log = link->log();
    const size_t requested = std::count_if(log.begin(), log.end(), is_rd_atomic_request);
    const auto& q = link->queued();
    const size_t queued =
        std::count_if(q.begin(), q.end(), is_rd_atomic_request) + (is_rd_atomic_request(p) ? 1 : 0);
    peak = std::max(peak, requested - finished);
    peak_requests_queued = std::max(peak_requests_queued, queued);
    if (ends_rd_atomic(p)) ++finished;
    return Fate::kDeliver;
  }
};

TEST(RcRead, GivenManyReadsAndAtomicsPostedExpectAtMostMaxRdAtomicOutstandingAndInOrder) {
  for (uint8_t max : {uint8_t{1}, uint8_t{4}}) {
    SCOPED_TRACE(int(max));
    ConnectParams p = patient(atomic_params());
    p.path_mtu = 1;
    p.max_rd_atomic = max;
    p.max_dest_rd_atomic = max;
    EnginePair pair(p);
    auto watch = std::make_shared<OutstandingWatch>();
    watch->link = &pair.link;
    install(pair, watch);
    constexpr int kCount = 16;
    std::vector<std::unique_ptr<ReadJob>> reads;
    RemoteWord word(pair.b, 1000);
    ResultSlots results(pair.a, kCount);
    for (int i = 0; i < kCount; ++i) {
      if (i % 4 == 3) {
        ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(i, results.sge(i), word, i)), 0);
        reads.push_back(nullptr);
        continue;
      }
      reads.push_back(std::make_unique<ReadJob>(pair.a, pair.b, (i % 3) * 256 + 7 * i + 1, i, 2));
      ASSERT_EQ(testing::post(*pair.a.qp, reads.back()->wr(i)), 0);
    }
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == kCount; }));
    pair.run_for(2ms);
    EXPECT_EQ(watch->peak, max);
    EXPECT_LE(watch->peak_requests_queued, max);
    std::vector<uint64_t> want(kCount);
    for (int i = 0; i < kCount; ++i) want[i] = i;
    EXPECT_EQ(ids(pair.a.send_wcs), want);
    expect_all(pair.a.send_wcs, WcStatus::kSuccess);
    uint64_t expect_word = 1000;
    for (int i = 0; i < kCount; ++i) {
      if (reads[i]) {
        reads[i]->expect_landed();
        EXPECT_EQ(pair.a.send_wcs[i].byte_len, reads[i]->data.size());
      } else {
        EXPECT_EQ(results.value(i), expect_word);
        EXPECT_EQ(pair.a.send_wcs[i].byte_len, 8u);
        expect_word += i;
      }
    }
    EXPECT_EQ(word.get(), expect_word);
    // No request was lost, so none was sent twice.
    EXPECT_EQ(pair.requests_from(kLidA).size(), size_t(kCount));
  }
}

TEST(RcRead, GivenFencedSendAfterReadOrAtomicExpectItLeavesOnlyOnceThatCompleted) {
  for (const bool atomic : {false, true}) {
    for (const bool fenced : {true, false}) {
      SCOPED_TRACE(std::string(atomic ? "atomic" : "READ") + (fenced ? ", fenced" : ", unfenced"));
      ConnectParams p = atomic_params();
      p.path_mtu = 1;
      EnginePair pair(p);
      ReadJob r(pair.a, pair.b, 5 * 256 + 3, 1);
      RemoteWord word(pair.b, 5);
      ResultSlots result(pair.a, 1);
      Message m(pair.a, pair.b, 100, 2);
      // The response that ends the READ/atomic is lost once: the fenced SEND
      // must wait through the retry as well.
      auto drop = std::make_shared<DropFirst>();
      drop->match = ends_rd_atomic;
      install(pair, drop);
      ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
      ASSERT_EQ(testing::post(*pair.a.qp, atomic ? fetch_add(1, result.sge(), word, 1) : r.wr(1)),
                0);
      ASSERT_EQ(
          testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges,
                                                     kSendSignaled | (fenced ? kSendFence : 0u))),
          0);
      EXPECT_EQ(pair.requests_from(kLidA).size(), fenced ? 1u : 2u);
      ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
      pair.run_for(2ms);
      EXPECT_TRUE(drop->dropped);
      EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
      expect_all(pair.a.send_wcs, WcStatus::kSuccess);
      const auto is_send = [](const WirePacket& w) { return (w.flags() & wire::kIsSend) != 0; };
      const ptrdiff_t first_send = first_in_log(pair, kLidA, is_send);
      const ptrdiff_t last_end = last_in_log(pair, kLidB, ends_rd_atomic);
      ASSERT_GE(first_send, 0);
      ASSERT_GE(last_end, 0);
      if (fenced) {
        EXPECT_GT(first_send, last_end) << "the fenced SEND left before the response";
        EXPECT_EQ(packets_from(pair, kLidA, is_send).size(), 1u);
      } else {
        EXPECT_LT(first_send, last_end);
      }
      if (atomic) {
        EXPECT_EQ(word.get(), 6u);
        EXPECT_EQ(result.value(), 5u);
      } else {
        r.expect_landed();
      }
      m.expect_delivered();
    }
  }
}

TEST(RcRead, GivenFencedSendAfterWriteExpectNoWait) {
  // The fence orders after READs and atomics only (IBA 10.8.3.3).
  EnginePair pair;
  Message w(pair.a, pair.b, 3 * 4096, 3), m(pair.a, pair.b, 100, 4);
  Target t(pair.b, w.data.size());
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(1, w.send_sges, t.va(), t.rkey())), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges,
                                                       kSendSignaled | kSendFence)),
            0);
  EXPECT_EQ(pair.requests_from(kLidA).size(), 4u);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  t.expect_holds(w.data);
  m.expect_delivered();
}

// --- loss, duplication, reordering ---

struct ReadLossCase {
  const char* what;
  std::function<bool(const WirePacket&, uint32_t first_psn)> match;
  uint32_t resume;  // the response index the retried request asks for
};

TEST(RcRead, GivenOneReadPacketLostExpectRetryForWhatIsMissingAndOneCompletionEach) {
  // A READ of 5 responses at PMTU 256: PSNs first .. first+4.
  auto response = [](uint32_t i) {
    return [i](const WirePacket& p, uint32_t first) {
      return is_read_response(p) && p.psn() == wire::psn_add(first, i);
    };
  };
  const ReadLossCase cases[] = {
      {"the READ request", [](const WirePacket& p, uint32_t) { return is_read_request(p); }, 0},
      {"the first response", response(0), 0},
      {"a middle response", response(2), 2},
      {"the last response", response(4), 4},
  };
  for (const ReadLossCase& c : cases) {
    // Without a SEND behind it the READ recovers through the local ACK
    // timeout; with one, through the SEND's PSN sequence NAK or its ACK
    // (an implied NAK of the missing responses, IBA 9.7.5.1.4).
    for (const bool trailing_send : {false, true}) {
      SCOPED_TRACE(std::string(c.what) + (trailing_send ? ", SEND behind" : ""));
      ConnectParams p;
      p.path_mtu = 1;
      EnginePair pair(p);
      const uint32_t first = p.sq_psn_a;
      ReadJob r(pair.a, pair.b, 5 * 256 - 9, 61);
      Message m(pair.a, pair.b, 300, 62);
      auto drop = std::make_shared<DropFirst>();
      drop->match = [&c, first](const WirePacket& w) { return c.match(w, first); };
      install(pair, drop);
      ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
      ASSERT_EQ(testing::post(*pair.a.qp, r.wr(1)), 0);
      if (trailing_send) {
        ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
      }
      const std::vector<uint64_t> want =
          trailing_send ? std::vector<uint64_t>{1, 2} : std::vector<uint64_t>{1};
      const size_t wrs = want.size();
      ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == wrs; }));
      pair.run_for(3ms);
      EXPECT_TRUE(drop->dropped);
      EXPECT_EQ(ids(pair.a.send_wcs), want);
      expect_all(pair.a.send_wcs, WcStatus::kSuccess);
      EXPECT_EQ(pair.a.send_wcs[0].byte_len, r.data.size());
      r.expect_landed();
      if (trailing_send) {
        ASSERT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{10}));
        EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
        m.expect_delivered();
      }
      const auto reads = packets_from(pair, kLidA, is_read_request);
      ASSERT_GE(reads.size(), 2u);
      // The retry asks for the missing part only: its PSN and its RETH start
      // at the first response that did not arrive.
      const wire::Reth reth = reads[1].view().reth();
      EXPECT_EQ(reads[1].psn(), wire::psn_add(first, c.resume));
      EXPECT_EQ(reth.va(), r.source.va() + c.resume * 256);
      EXPECT_EQ(reth.dma_len(), r.data.size() - c.resume * 256);
      EXPECT_EQ(reth.rkey(), r.source.rkey());
      EXPECT_EQ(pair.a.state(), QpState::kRts);
      EXPECT_EQ(pair.b.state(), QpState::kRts);
    }
  }
}

TEST(RcRead, GivenSendBeforeReadOrAtomicWhoseAckIsLostExpectTheResponseAcknowledgesIt) {
  // IBA 9.7.5.1.2: a READ response or atomic ACK acknowledges every request
  // before it as well.
  for (const bool atomic : {false, true}) {
    SCOPED_TRACE(atomic ? "atomic" : "READ");
    EnginePair pair(patient(atomic_params()));
    Message m(pair.a, pair.b, 5000, 1);
    ReadJob r(pair.a, pair.b, 3 * 4096 + 1, 2);
    RemoteWord word(pair.b, 77);
    ResultSlots result(pair.a, 1);
    pair.link.policy = [](const WirePacket& w) {
      return w.is_ack() ? Fate::kDrop : Fate::kDeliver;
    };
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, atomic ? fetch_add(2, result.sge(), word, 3) : r.wr(2)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(3ms);
    EXPECT_FALSE(pair.acks_from(kLidB).empty()) << "the SEND's ACK was never sent";
    EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
    expect_all(pair.a.send_wcs, WcStatus::kSuccess);
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kSend);
    EXPECT_EQ(pair.requests_from(kLidA).size(), 3u) << "something was sent again";
    m.expect_delivered();
    if (atomic) {
      EXPECT_EQ(result.value(), 77u);
      EXPECT_EQ(word.get(), 80u);
    } else {
      r.expect_landed();
    }
  }
}

/// A mix of READs, FetchAdds on one shared word, RDMA WRITEs and SENDs from
/// A to B. Checks that every one completes exactly once, in order, with its
/// data in place, and that the FetchAdds executed exactly once each, in
/// order: each returns the sum of the addends before it.
void run_mixed_rd_atomic_traffic(EnginePair& pair, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t mtu = pair.mtu();
  enum class Kind { kRead, kFetchAdd, kWrite, kSend };
  struct Op {
    Kind kind;
    std::unique_ptr<ReadJob> read;
    std::unique_ptr<Message> msg;
    std::unique_ptr<Target> target;
    uint64_t add = 0;
  };
  const uint64_t start = 0xfffffffffffff000ull;  // the sum wraps around
  RemoteWord word(pair.b, start);
  ResultSlots results(pair.a, count);
  std::vector<Op> ops;
  std::vector<uint64_t> want_recv;
  for (int i = 0; i < count; ++i) {
    const size_t sizes[] = {0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 5, rng() % (8 * mtu)};
    const size_t len = sizes[rng() % 7];
    Op o{static_cast<Kind>(rng() % 4), nullptr, nullptr, nullptr, 0};
    SendWqe w;
    switch (o.kind) {
      case Kind::kRead:
        o.read = std::make_unique<ReadJob>(pair.a, pair.b, len, seed * 1000 + i, 1 + rng() % 4);
        w = o.read->wr(i);
        break;
      case Kind::kFetchAdd:
        o.add = rng() % 5000 + 1;
        w = fetch_add(i, results.sge(i), word, o.add);
        break;
      case Kind::kWrite:
        o.msg = std::make_unique<Message>(pair.a, pair.b, len, seed * 1000 + i, 1 + rng() % 4);
        o.target = std::make_unique<Target>(pair.b, len);
        w = testing::write_wr(i, o.msg->send_sges, o.target->va(), o.target->rkey());
        break;
      case Kind::kSend:
        o.msg = std::make_unique<Message>(pair.a, pair.b, len, seed * 1000 + i, 1 + rng() % 4);
        w = testing::send_wr(i, WrOpcode::kSend, o.msg->send_sges);
        ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(i, o.msg->recv_sges)), 0);
        want_recv.push_back(i);
        break;
    }
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ops.push_back(std::move(o));
  }
  ASSERT_TRUE(pair.run_until([&] {
    return pair.a.send_wcs.size() == size_t(count) && pair.b.recv_wcs.size() == want_recv.size();
  })) << pair.a.send_wcs.size()
      << " send and " << pair.b.recv_wcs.size() << " receive completions";
  pair.run_for(3ms);
  std::vector<uint64_t> want_send(count);
  for (int i = 0; i < count; ++i) want_send[i] = i;
  EXPECT_EQ(ids(pair.a.send_wcs), want_send);
  EXPECT_EQ(ids(pair.b.recv_wcs), want_recv);
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
  uint64_t sum = start;
  for (int i = 0; i < count && i < int(pair.a.send_wcs.size()); ++i) {
    SCOPED_TRACE(i);
    const Op& o = ops[i];
    switch (o.kind) {
      case Kind::kRead:
        o.read->expect_landed();
        EXPECT_EQ(pair.a.send_wcs[i].byte_len, o.read->data.size());
        EXPECT_EQ(pair.a.send_wcs[i].opcode, WcOpcode::kRdmaRead);
        break;
      case Kind::kFetchAdd:
        EXPECT_EQ(results.value(i), sum);
        EXPECT_EQ(pair.a.send_wcs[i].byte_len, 8u);
        EXPECT_EQ(pair.a.send_wcs[i].opcode, WcOpcode::kFetchAdd);
        sum += o.add;
        break;
      case Kind::kWrite:
        o.target->expect_holds(o.msg->data);
        break;
      case Kind::kSend:
        o.msg->expect_delivered();
        break;
    }
  }
  EXPECT_EQ(word.get(), sum);
  EXPECT_TRUE(word.guards_intact());
  EXPECT_TRUE(results.guards_intact());
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(RcRead, GivenEveryPacketDuplicatedExpectEachReadAndAtomicCompletedAndExecutedOnce) {
  ConnectParams p = atomic_params();
  p.path_mtu = 2;
  p.max_rd_atomic = 4;
  p.max_dest_rd_atomic = 4;
  EnginePair pair(p);
  pair.link.policy = [](const WirePacket&) { return Fate::kDuplicate; };
  run_mixed_rd_atomic_traffic(pair, 30, 1);
}

TEST(RcRead, GivenPacketsReorderedExpectDataIntactAndCompletionsInOrder) {
  ConnectParams p = atomic_params();
  p.path_mtu = 1;
  p.max_rd_atomic = 4;
  p.max_dest_rd_atomic = 4;
  EnginePair pair(p);
  size_t n = 0;
  pair.link.policy = [&n](const WirePacket&) {
    return ++n % 3 == 0 ? Fate::kDelay : Fate::kDeliver;
  };
  run_mixed_rd_atomic_traffic(pair, 30, 2);
}

TEST(RcRead, GivenReadResponsesDuplicatedAndReorderedExpectOneCompletionAndDataIntact) {
  ConnectParams p;
  p.path_mtu = 1;
  EnginePair pair(p);
  ReadJob r1(pair.a, pair.b, 9 * 256 + 1, 71), r2(pair.a, pair.b, 4 * 256, 72);
  size_t n = 0;
  pair.link.policy = [&n](const WirePacket& w) {
    if (!is_read_response(w)) return Fate::kDeliver;
    ++n;
    return n % 4 == 1 ? Fate::kDuplicate : n % 4 == 2 ? Fate::kDelay : Fate::kDeliver;
  };
  ASSERT_EQ(testing::post(*pair.a.qp, r1.wr(1)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, r2.wr(2)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  pair.run_for(3ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  r1.expect_landed();
  r2.expect_landed();
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(RcRead, GivenRandomLossDuplicationAndReorderingExpectEverythingOnce) {
  for (uint32_t mtu_enum : {1u, 5u}) {
    SCOPED_TRACE(mtu_enum);
    ConnectParams p = atomic_params();
    p.path_mtu = mtu_enum;
    p.max_rd_atomic = 3;
    p.max_dest_rd_atomic = 3;
    EnginePair pair(p);
    auto rng = std::make_shared<std::mt19937>(mtu_enum + 100);
    pair.link.policy = [rng](const WirePacket&) {
      const uint32_t x = (*rng)() % 100;
      return x < 4    ? Fate::kDrop
             : x < 8  ? Fate::kDuplicate
             : x < 12 ? Fate::kDelay
                      : Fate::kDeliver;
    };
    run_mixed_rd_atomic_traffic(pair, 40, 20 + mtu_enum);
  }
}

TEST(RcRead, GivenPsnsAcrossTheWrapAndALostResponseExpectRecovery) {
  ConnectParams p = atomic_params();
  p.path_mtu = 1;
  p.sq_psn_a = 0xfffffd;
  EnginePair pair(p);
  ReadJob r(pair.a, pair.b, 6 * 256, 81);  // responses 0xfffffd … 0x000002
  RemoteWord word(pair.b, 7);
  ResultSlots result(pair.a, 1);
  auto drop = std::make_shared<DropFirst>();
  drop->match = [](const WirePacket& w) { return is_read_response(w) && w.psn() == 0; };
  install(pair, drop);
  ASSERT_EQ(testing::post(*pair.a.qp, r.wr(1)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(2, result.sge(), word, 1)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  pair.run_for(2ms);
  EXPECT_TRUE(drop->dropped);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  r.expect_landed();
  EXPECT_EQ(result.value(), 7u);
  EXPECT_EQ(word.get(), 8u);
  const auto reads = packets_from(pair, kLidA, is_read_request);
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[1].psn(), 0u);
  EXPECT_EQ(reads[1].view().reth().va(), r.source.va() + 3 * 256);
  const auto atomics = packets_from(pair, kLidA, is_atomic_request);
  ASSERT_EQ(atomics.size(), 1u);
  EXPECT_EQ(atomics[0].psn(), 3u);
}

// --- atomics (IBA 9.4.5) ---

TEST(RcAtomic, GivenCompareSwapThatMatchesExpectSwapAndOriginalInHostOrder) {
  EnginePair pair(patient(atomic_params()));
  RemoteWord word(pair.b, 0x1122334455667788ull);
  ResultSlots result(pair.a, 1);
  ASSERT_EQ(testing::post(*pair.a.qp, cmp_swap(1, result.sge(), word, 0x1122334455667788ull,
                                               0xdeadbeefcafef00dull)),
            0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(2ms);
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  const Completion& c = pair.a.send_wcs[0];
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kCompSwap);
  EXPECT_EQ(c.byte_len, 8u);
  EXPECT_EQ(word.get(), 0xdeadbeefcafef00dull);
  EXPECT_EQ(result.value(), 0x1122334455667788ull);
  EXPECT_TRUE(word.guards_intact());
  EXPECT_TRUE(result.guards_intact());
  // On the wire: CmpSwap carries the swap value in SwapAdd and the compare
  // value in Compare; the ACK carries the original.
  const auto reqs = pair.requests_from(kLidA);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].opcode(), uint8_t(wire::Opcode::kRcCompareSwap));
  const wire::AtomicEth a = reqs[0].view().atomic_eth();
  EXPECT_EQ(a.va(), word.va());
  EXPECT_EQ(a.rkey(), word.rkey());
  EXPECT_EQ(a.swap_add(), 0xdeadbeefcafef00dull);
  EXPECT_EQ(a.compare(), 0x1122334455667788ull);
  const auto acks = packets_from(pair, kLidB, is_atomic_ack);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].psn(), reqs[0].psn());
  EXPECT_EQ(acks[0].view().atomic_ack_eth().orig_data(), 0x1122334455667788ull);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(RcAtomic, GivenCompareSwapThatDiffersExpectMemoryUnchangedAndCurrentValueReturned) {
  EnginePair pair(atomic_params());
  RemoteWord word(pair.b, 42);
  ResultSlots result(pair.a, 1);
  ASSERT_EQ(testing::post(*pair.a.qp, cmp_swap(1, result.sge(), word, 41, 7)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.a.send_wcs[0].byte_len, 8u);
  EXPECT_EQ(word.get(), 42u);
  EXPECT_EQ(result.value(), 42u);
  EXPECT_TRUE(word.guards_intact());
}

TEST(RcAtomic, GivenFetchAddsExpectEachReturnsTheValueBeforeItAndTheSumWraps) {
  EnginePair pair(patient(atomic_params()));
  RemoteWord word(pair.b, 0xfffffffffffffffeull);
  ResultSlots results(pair.a, 3);
  const uint64_t adds[] = {5, 0x100, 0x8000000000000000ull};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(i, results.sge(i), word, adds[i])), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }));
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{0, 1, 2}));
  for (const Completion& c : pair.a.send_wcs) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(c.opcode, WcOpcode::kFetchAdd);
    EXPECT_EQ(c.byte_len, 8u);
  }
  EXPECT_EQ(results.value(0), 0xfffffffffffffffeull);
  EXPECT_EQ(results.value(1), 3u);
  EXPECT_EQ(results.value(2), 0x103u);
  EXPECT_EQ(word.get(), 0x8000000000000103ull);
  EXPECT_TRUE(word.guards_intact());
  EXPECT_TRUE(results.guards_intact());
  const auto reqs = pair.requests_from(kLidA);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].opcode(), uint8_t(wire::Opcode::kRcFetchAdd));
  EXPECT_EQ(reqs[0].view().atomic_eth().swap_add(), 5u);
  // Each atomic takes one PSN.
  for (uint32_t i = 0; i < 3; ++i)
    EXPECT_EQ(reqs[i].psn(), wire::psn_add(ConnectParams{}.sq_psn_a, i));
}

struct AtomicErrorCase {
  const char* what;
  WcStatus status;
  wire::NakCode nak;
  int64_t va_shift;
  bool wrong_rkey;
  uint32_t responder_qp_access;
  uint32_t region_access;
};

TEST(RcAtomic, GivenAtomicTheResponderRefusesExpectRemoteErrorBothQpsInErrorWordUnchanged) {
  const AtomicErrorCase cases[] = {
      // C9-87 / IBA 9.4.5: the VA of an atomic must be 8-byte aligned.
      {"misaligned by 4", WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest, 4, false,
       kAtomicAccess, kAtomicAccess},
      {"misaligned by 1", WcStatus::kRemInvReqErr, wire::NakCode::kInvalidRequest, 1, false,
       kAtomicAccess, kAtomicAccess},
      {"QP without remote atomic", WcStatus::kRemAccessErr, wire::NakCode::kRemoteAccessError, 0,
       false, kRemote, kAtomicAccess},
      {"region without remote atomic", WcStatus::kRemAccessErr, wire::NakCode::kRemoteAccessError,
       0, false, kAtomicAccess, kRemote},
      {"wrong rkey", WcStatus::kRemAccessErr, wire::NakCode::kRemoteAccessError, 0, true,
       kAtomicAccess, kAtomicAccess},
      {"past the end of the region", WcStatus::kRemAccessErr, wire::NakCode::kRemoteAccessError, 16,
       false, kAtomicAccess, kAtomicAccess},
  };
  for (const AtomicErrorCase& c : cases) {
    for (const WrOpcode op : {WrOpcode::kAtomicFetchAndAdd, WrOpcode::kAtomicCmpAndSwp}) {
      SCOPED_TRACE(std::string(c.what) +
                   (op == WrOpcode::kAtomicFetchAndAdd ? ", FetchAdd" : ", CmpSwap"));
      ConnectParams p;
      p.access_b = c.responder_qp_access;
      EnginePair pair(p);
      RemoteWord word(pair.b, 9, c.region_access);
      ResultSlots results(pair.a, 2);
      SendWqe w = op == WrOpcode::kAtomicFetchAndAdd ? fetch_add(1, results.sge(0), word, 1)
                                                     : cmp_swap(1, results.sge(0), word, 9, 10);
      w.remote_addr += c.va_shift;
      if (c.wrong_rkey) w.rkey ^= 0x5a5a;
      ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
      ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(2, results.sge(1), word, 1)), 0);
      ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
      pair.run_for(2ms);
      ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
      EXPECT_EQ(pair.a.send_wcs[0].status, c.status);
      EXPECT_EQ(pair.a.send_wcs[0].opcode,
                op == WrOpcode::kAtomicFetchAndAdd ? WcOpcode::kFetchAdd : WcOpcode::kCompSwap);
      EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
      EXPECT_EQ(pair.a.state(), QpState::kErr);
      EXPECT_EQ(pair.b.state(), QpState::kErr);
      EXPECT_EQ(word.get(), 9u);
      EXPECT_TRUE(word.guards_intact());
      EXPECT_TRUE(results.untouched(0));
      EXPECT_TRUE(results.untouched(1));
      EXPECT_TRUE(packets_from(pair, kLidB, is_atomic_ack).empty());
      const auto acks = pair.acks_from(kLidB);
      ASSERT_EQ(acks.size(), 1u);
      EXPECT_EQ(acks[0].ack_type(), wire::AckType::kNak);
      EXPECT_EQ(acks[0].ack_value(), uint8_t(c.nak));
    }
  }
}

TEST(RcAtomic, GivenBadLocalKeyExpectLocProtErrAfterTheRemoteExecutedOnce) {
  EnginePair pair(atomic_params());
  RemoteWord word(pair.b, 100);
  ResultSlots results(pair.a, 2);
  Sge bad = results.sge(0);
  bad.lkey ^= 0x77;
  ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(1, bad, word, 1)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(2, results.sge(1), word, 1)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  pair.run_for(2ms);
  ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  // Whether the requester checks the lkey before sending or when the result
  // comes back, the remote word changed at most once.
  EXPECT_GE(word.get(), 100u);
  EXPECT_LE(word.get(), 101u);
  EXPECT_TRUE(results.untouched(0));
  EXPECT_TRUE(results.untouched(1));
}

// --- duplicates (IBA 9.7.5.1.3, C9-102): executed once, the saved result replayed ---

TEST(RcAtomic, GivenAtomicRequestDeliveredTwiceExpectExecutedOnceAndTheSavedResultReplayed) {
  for (const WrOpcode op : {WrOpcode::kAtomicFetchAndAdd, WrOpcode::kAtomicCmpAndSwp}) {
    SCOPED_TRACE(op == WrOpcode::kAtomicFetchAndAdd ? "FetchAdd" : "CmpSwap");
    EnginePair pair(patient(atomic_params()));
    RemoteWord word(pair.b, 41);
    ResultSlots result(pair.a, 1);
    pair.link.policy = [](const WirePacket& w) {
      return is_atomic_request(w) ? Fate::kDuplicate : Fate::kDeliver;
    };
    // Executed twice, FetchAdd would leave 43, and CmpSwap 41 -> 42 would
    // fail the second time and report 42.
    ASSERT_EQ(testing::post(*pair.a.qp, op == WrOpcode::kAtomicFetchAndAdd
                                            ? fetch_add(1, result.sge(), word, 1)
                                            : cmp_swap(1, result.sge(), word, 41, 42)),
              0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    pair.run_for(2ms);
    ASSERT_EQ(pair.a.send_wcs.size(), 1u);
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(word.get(), 42u);
    EXPECT_EQ(result.value(), 41u);
    const auto acks = packets_from(pair, kLidB, is_atomic_ack);
    ASSERT_EQ(acks.size(), 2u);
    for (const WirePacket& a : acks) {
      EXPECT_EQ(a.psn(), ConnectParams{}.sq_psn_a);
      EXPECT_EQ(a.view().atomic_ack_eth().orig_data(), 41u);
    }
    EXPECT_EQ(pair.b.state(), QpState::kRts);
  }
}

TEST(RcAtomic, GivenAtomicAckLostExpectRetryAnsweredFromTheSavedResult) {
  for (const WrOpcode op : {WrOpcode::kAtomicFetchAndAdd, WrOpcode::kAtomicCmpAndSwp}) {
    SCOPED_TRACE(op == WrOpcode::kAtomicFetchAndAdd ? "FetchAdd" : "CmpSwap");
    EnginePair pair(atomic_params());
    RemoteWord word(pair.b, 41);
    ResultSlots result(pair.a, 1);
    auto drop = std::make_shared<DropFirst>();
    drop->match = is_atomic_ack;
    install(pair, drop);
    ASSERT_EQ(testing::post(*pair.a.qp, op == WrOpcode::kAtomicFetchAndAdd
                                            ? fetch_add(1, result.sge(), word, 1)
                                            : cmp_swap(1, result.sge(), word, 41, 42)),
              0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    pair.run_for(3ms);
    EXPECT_TRUE(drop->dropped);
    ASSERT_EQ(pair.a.send_wcs.size(), 1u);
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(word.get(), 42u);
    EXPECT_EQ(result.value(), 41u);
    EXPECT_EQ(pair.requests_from(kLidA).size(), 2u) << "the atomic was not retried";
    EXPECT_EQ(pair.requests_from(kLidA)[1].psn(), ConnectParams{}.sq_psn_a);
    EXPECT_EQ(pair.a.state(), QpState::kRts);
    EXPECT_EQ(pair.b.state(), QpState::kRts);
  }
}

TEST(RcAtomic, GivenFirstOfTwoAtomicAcksLostOrLateExpectEachExecutedOnceWithItsOwnResult) {
  for (const Fate fate : {Fate::kDrop, Fate::kDelay}) {
    SCOPED_TRACE(fate == Fate::kDrop ? "lost" : "late");
    ConnectParams p = atomic_params();
    p.max_rd_atomic = 2;
    p.max_dest_rd_atomic = 2;
    EnginePair pair(p);
    RemoteWord word(pair.b, 1000);
    ResultSlots results(pair.a, 2);
    bool done = false;
    pair.link.policy = [&](const WirePacket& w) {
      if (done || !is_atomic_ack(w)) return Fate::kDeliver;
      done = true;
      return fate;
    };
    ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(1, results.sge(0), word, 1)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(2, results.sge(1), word, 10)), 0);
    EXPECT_EQ(pair.requests_from(kLidA).size(), 2u) << "max_rd_atomic 2: both go out at once";
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(3ms);
    EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
    expect_all(pair.a.send_wcs, WcStatus::kSuccess);
    EXPECT_EQ(word.get(), 1011u);
    EXPECT_EQ(results.value(0), 1000u);
    EXPECT_EQ(results.value(1), 1001u);
    EXPECT_EQ(pair.a.state(), QpState::kRts);
    EXPECT_EQ(pair.b.state(), QpState::kRts);
  }
}

TEST(RcAtomic, GivenManyFetchAddsFromTwoQpsOnOneWordExpectTheExactSum) {
  ConnectParams p = atomic_params();
  p.max_rd_atomic = 4;
  p.max_dest_rd_atomic = 4;
  EnginePair pair(p);
  // A second connection between the same HCAs, on the same CQs.
  constexpr uint32_t kQpnA2 = 0x000013, kQpnB2 = 0x000024;
  constexpr uint32_t kPsnA2 = 0x7ffff0, kPsnB2 = 0x123456;
  std::shared_ptr<Qp> a2 = pair.a.create_qp(kQpnA2, p), b2 = pair.b.create_qp(kQpnB2, p);
  testing::connect_qp(*a2, p, kLidB, kQpnB2, kPsnB2, kPsnA2, p.access_a);
  testing::connect_qp(*b2, p, kLidA, kQpnA2, kPsnA2, kPsnB2, p.access_b);
  auto rng = std::make_shared<std::mt19937>(7);
  pair.link.policy = [rng](const WirePacket&) {
    const uint32_t x = (*rng)() % 100;
    return x < 3 ? Fate::kDrop : x < 6 ? Fate::kDuplicate : x < 9 ? Fate::kDelay : Fate::kDeliver;
  };
  constexpr int kPerQp = 100;
  const uint64_t start = 5000;
  RemoteWord word(pair.b, start);
  ResultSlots results(pair.a, 2 * kPerQp);
  for (int i = 0; i < kPerQp; ++i) {
    ASSERT_EQ(testing::post(*pair.a.qp, fetch_add(i, results.sge(i), word, 1)), 0);
    ASSERT_EQ(testing::post(*a2, fetch_add(kPerQp + i, results.sge(kPerQp + i), word, 1)), 0);
  }
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2 * kPerQp; }));
  pair.run_for(3ms);
  ASSERT_EQ(pair.a.send_wcs.size(), size_t(2 * kPerQp));
  EXPECT_EQ(word.get(), start + 2 * kPerQp);
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  // Each QP's completions in its posting order; each FetchAdd saw a value no
  // other did, and together they saw every value from start on.
  std::vector<uint64_t> from_a, from_a2;
  for (const Completion& c : pair.a.send_wcs)
    (c.qp_num == kQpnA ? from_a : from_a2).push_back(c.wr_id);
  std::vector<uint64_t> want_a(kPerQp), want_a2(kPerQp);
  for (int i = 0; i < kPerQp; ++i) {
    want_a[i] = i;
    want_a2[i] = kPerQp + i;
  }
  EXPECT_EQ(from_a, want_a);
  EXPECT_EQ(from_a2, want_a2);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2 * kPerQp; ++i) seen.insert(results.value(i));
  EXPECT_EQ(seen.size(), size_t(2 * kPerQp));
  EXPECT_EQ(*seen.begin(), start);
  EXPECT_EQ(*seen.rbegin(), start + 2 * kPerQp - 1);
  for (int i = 1; i < kPerQp; ++i) {
    EXPECT_LT(results.value(i - 1), results.value(i));
    EXPECT_LT(results.value(kPerQp + i - 1), results.value(kPerQp + i));
  }
  EXPECT_TRUE(word.guards_intact());
  EXPECT_TRUE(results.guards_intact());
  EXPECT_EQ(a2->state(), QpState::kRts);
  EXPECT_EQ(b2->state(), QpState::kRts);
}

// --- refused at post time ---

TEST(RcAtomic, GivenReadOrAtomicOnUcQpExpectEinvalAtPostAndNothingSent) {
  // READ and atomics are RC operations (IBA 9.8, table 84).
  ConnectParams p;
  p.type = QpType::kUc;
  EnginePair pair(p);
  RemoteWord word(pair.b, 1, kRemote);
  ResultSlots result(pair.a, 1);
  ReadJob r(pair.a, pair.b, 100, 1);
  for (const SendWqe& w :
       {r.wr(1), fetch_add(2, result.sge(), word, 1), cmp_swap(3, result.sge(), word, 1, 2)}) {
    SCOPED_TRACE(w.wr_id);
    int bad = -1;
    EXPECT_EQ(pair.a.qp->post_send(&w, 1, &bad), EINVAL);
    EXPECT_EQ(bad, 0);
  }
  // In a list, the WRs before the refused one are posted.
  Message m(pair.a, pair.b, 10, 2);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
  const SendWqe list[] = {testing::send_wr(4, WrOpcode::kSend, m.send_sges), r.wr(5)};
  int bad = -1;
  EXPECT_EQ(pair.a.qp->post_send(list, 2, &bad), EINVAL);
  EXPECT_EQ(bad, 1);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  pair.run_for(1ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{4}));
  EXPECT_EQ(pair.requests_from(kLidA).size(), 1u);
  m.expect_delivered();
  r.expect_untouched();
  EXPECT_EQ(word.get(), 1u);
  EXPECT_EQ(pair.a.state(), QpState::kRts);
}

TEST(RcAtomic, GivenInlineReadOrAtomicOrShortAtomicBufferExpectEinvalAtPost) {
  EnginePair pair(atomic_params());
  RemoteWord word(pair.b, 1);
  ResultSlots result(pair.a, 1);
  ReadJob r(pair.a, pair.b, 16, 1);
  const Sge seven{result.sge().addr, 7, result.sge().lkey};
  struct Case {
    const char* what;
    SendWqe w;
  };
  const Case cases[] = {
      {"inline FetchAdd", fetch_add(1, result.sge(), word, 1, kSendSignaled | kSendInline)},
      {"inline CmpSwap", cmp_swap(2, result.sge(), word, 1, 2, kSendSignaled | kSendInline)},
      {"inline READ", r.wr(3, kSendSignaled | kSendInline)},
      // An atomic returns 8 bytes (IBA 9.4.5): a smaller local buffer cannot hold them.
      {"FetchAdd into 7 bytes", fetch_add(4, seven, word, 1)},
      {"CmpSwap into 7 bytes", cmp_swap(5, seven, word, 1, 2)},
      {"FetchAdd without a local buffer",
       testing::atomic_wr(6, WrOpcode::kAtomicFetchAndAdd, {}, word.va(), word.rkey(), 1)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    int bad = -1;
    EXPECT_EQ(pair.a.qp->post_send(&c.w, 1, &bad), EINVAL);
    EXPECT_EQ(bad, 0);
  }
  pair.run_for(1ms);
  EXPECT_TRUE(pair.link.log().empty());
  EXPECT_TRUE(pair.a.send_wcs.empty());
  EXPECT_EQ(word.get(), 1u);
  EXPECT_TRUE(result.untouched());
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  // The QP is fine: in a list, the atomic before a refused one is posted
  // and carried out at once.
  const SendWqe list[] = {fetch_add(7, result.sge(), word, 1),
                          fetch_add(8, result.sge(), word, 1, kSendSignaled | kSendInline)};
  int bad = -1;
  EXPECT_EQ(pair.a.qp->post_send(list, 2, &bad), EINVAL);
  EXPECT_EQ(bad, 1);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(1ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{7}));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(result.value(), 1u);
  EXPECT_EQ(word.get(), 2u);
}

}  // namespace
}  // namespace ibemu::engine
