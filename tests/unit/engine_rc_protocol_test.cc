// The RC transport end to end (IBA 9.7): two HCAs, one connected QP each, a
// fake link under the test's control. Given a message and a link behaviour,
// expect the data intact, every work request completed exactly once with the
// right status, and the QPs in the right state.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace std::chrono_literals;
using testing::ConnectParams;
using testing::Endpoint;
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
using testing::kQpnB;
using testing::kRemote;
using testing::Message;
using testing::Region;
using testing::Target;
using testing::WirePacket;

size_t count_naks(const std::vector<WirePacket>& acks, wire::AckType type) {
  return std::count_if(acks.begin(), acks.end(),
                       [type](const WirePacket& p) { return p.ack_type() == type; });
}

// Sends `m` from A to B as one SEND and waits until both sides completed it.
void send_and_wait(EnginePair& pair, const Message& m, uint64_t wr_id = 1) {
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(100 + wr_id, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(wr_id, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty() && !pair.b.recv_wcs.empty(); }));
}

// --- SEND at every size and path MTU ---

class RcSend : public ::testing::TestWithParam<std::tuple<uint32_t, int>> {};

TEST_P(RcSend, GivenMessageInSeveralSgesExpectDataIntactAndOneCompletionEachSide) {
  const auto [mtu_enum, kind] = GetParam();
  ConnectParams p;
  p.path_mtu = mtu_enum;
  EnginePair pair(p);
  const uint32_t mtu = pair.mtu();
  const size_t len = testing::size_for(mtu, kind);
  Message m(pair.a, pair.b, len, mtu_enum * 10 + kind);

  send_and_wait(pair, m, 7);
  pair.run_for(5ms);

  m.expect_delivered();
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  const Completion& s = pair.a.send_wcs[0];
  EXPECT_EQ(s.wr_id, 7u);
  EXPECT_EQ(s.status, WcStatus::kSuccess);
  EXPECT_EQ(s.opcode, WcOpcode::kSend);
  EXPECT_EQ(s.qp_num, kQpnA);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  const Completion& r = pair.b.recv_wcs[0];
  EXPECT_EQ(r.wr_id, 107u);
  EXPECT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(r.opcode, WcOpcode::kRecv);
  EXPECT_EQ(r.byte_len, len);
  EXPECT_EQ(r.qp_num, kQpnB);
  EXPECT_EQ(r.src_qp, kQpnA);
  EXPECT_EQ(r.slid, kLidA);
  EXPECT_EQ(r.wc_flags & kWcWithImm, 0u);
  EXPECT_TRUE(pair.b.send_wcs.empty());
  EXPECT_TRUE(pair.a.recv_wcs.empty());

  // On the wire: ceil(len / MTU) packets (one for an empty message), every
  // one but the last exactly one MTU (IBA 9.7.5.1.2), consecutive PSNs.
  const auto reqs = pair.requests_from(kLidA);
  const size_t npkts = len == 0 ? 1 : (len + mtu - 1) / mtu;
  ASSERT_EQ(reqs.size(), npkts);
  for (size_t i = 0; i < npkts; ++i) {
    EXPECT_EQ(reqs[i].psn(), wire::psn_add(p.sq_psn_a, static_cast<uint32_t>(i)));
    EXPECT_EQ(reqs[i].payload_len(), i + 1 < npkts ? mtu : len - (npkts - 1) * mtu);
    EXPECT_EQ(reqs[i].dest_qp, kQpnB);
  }
  using wire::Opcode;
  if (npkts == 1) {
    EXPECT_EQ(reqs[0].opcode(), uint8_t(Opcode::kRcSendOnly));
  } else {
    EXPECT_EQ(reqs.front().opcode(), uint8_t(Opcode::kRcSendFirst));
    EXPECT_EQ(reqs.back().opcode(), uint8_t(Opcode::kRcSendLast));
    if (npkts > 2) {
      EXPECT_EQ(reqs[1].opcode(), uint8_t(Opcode::kRcSendMiddle));
    }
  }
  const auto acks = pair.acks_from(kLidB);
  EXPECT_GE(acks.size(), 1u);
  EXPECT_EQ(count_naks(acks, wire::AckType::kAck), acks.size());
  EXPECT_EQ(acks.back().psn(), reqs.back().psn());
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

std::string send_name(const ::testing::TestParamInfo<std::tuple<uint32_t, int>>& info) {
  static const char* kinds[] = {"Empty", "OneByte", "MtuMinus1", "Mtu", "MtuPlus1", "OneMiB"};
  return "Mtu" + std::to_string(128u << std::get<0>(info.param)) + kinds[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(AllMtusAndSizes, RcSend,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u, 5u),
                                            ::testing::Range(0, 6)),
                         send_name);

TEST(RcProtocol, GivenSeveralSendsExpectReceivesConsumedInOrder) {
  EnginePair pair;
  std::vector<Message> msgs;
  for (int i = 0; i < 5; ++i) msgs.emplace_back(pair.a, pair.b, 1000 * i + 3, 50 + i, 2, 2);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(100 + i, msgs[i].recv_sges)), 0);
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, msgs[i].send_sges)),
              0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 5; }));
  pair.run_for(5ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(pair.b.recv_wcs[i].byte_len, 1000u * i + 3);
    msgs[i].expect_delivered();
  }
}

TEST(RcProtocol, GivenBothDirectionsAtOnceExpectBothDelivered) {
  EnginePair pair;
  Message ab(pair.a, pair.b, 10000, 1), ba(pair.b, pair.a, 7000, 2);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, ab.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::recv_wr(2, ba.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, ab.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::send_wr(4, WrOpcode::kSend, ba.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] {
    return pair.a.send_wcs.size() == 1 && pair.b.send_wcs.size() == 1 &&
           pair.a.recv_wcs.size() == 1 && pair.b.recv_wcs.size() == 1;
  }));
  ab.expect_delivered();
  ba.expect_delivered();
  EXPECT_EQ(pair.a.recv_wcs[0].byte_len, 7000u);
  EXPECT_EQ(pair.a.recv_wcs[0].src_qp, kQpnB);
  EXPECT_EQ(pair.a.recv_wcs[0].slid, kLidB);
}

TEST(RcProtocol, GivenSendWithImmediateExpectImmAndFlagInReceiveCompletion) {
  for (size_t len : {size_t{0}, size_t{5000}}) {
    EnginePair pair;
    Message m(pair.a, pair.b, len, 9);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
    SendWqe w = testing::send_wr(2, WrOpcode::kSendWithImm, m.send_sges);
    w.imm_or_rkey = 0x12345678;
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    m.expect_delivered();
    ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
    EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(pair.b.recv_wcs[0].opcode, WcOpcode::kRecv);
    EXPECT_EQ(pair.b.recv_wcs[0].imm_data, 0x12345678u);
    EXPECT_NE(pair.b.recv_wcs[0].wc_flags & kWcWithImm, 0u);
    EXPECT_EQ(pair.b.recv_wcs[0].byte_len, len);
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kSend);
  }
}

TEST(RcProtocol, GivenSolicitedSendExpectSolicitedArmedCqNotifiedOnlyThen) {
  EnginePair pair;
  Message m1(pair.a, pair.b, 100, 1), m2(pair.a, pair.b, 5000, 2);
  pair.b.recv_cq.arm(true);
  send_and_wait(pair, m1, 1);
  EXPECT_EQ(pair.b.recv_events, 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, m2.send_sges,
                                                       kSendSignaled | kSendSolicited)),
            0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 2; }));
  EXPECT_EQ(pair.b.recv_events, 1);
  // Only the last packet of a message carries SE (IBA 9.2).
  for (const WirePacket& p : pair.requests_from(kLidA))
    EXPECT_EQ(p.view().bth().se(), p.psn() == pair.requests_from(kLidA).back().psn());
}

// --- unsignaled work requests ---

TEST(RcProtocol, GivenUnsignaledSendsExpectNoSendCompletionForThem) {
  EnginePair pair;
  std::vector<Message> msgs;
  for (int i = 0; i < 4; ++i) msgs.emplace_back(pair.a, pair.b, 300, i, 1, 1);
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(100 + i, msgs[i].recv_sges)), 0);
  const uint32_t flags[] = {kSendSignaled, 0, 0, kSendSignaled};
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(testing::post(*pair.a.qp,
                            testing::send_wr(i, WrOpcode::kSend, msgs[i].send_sges, flags[i])),
              0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 4; }));
  pair.run_for(5ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{0, 3}));
  for (const Message& m : msgs) m.expect_delivered();
}

TEST(RcProtocol, GivenUnsignaledLastSendExpectNoCompletionButDataDelivered) {
  EnginePair pair;
  Message m(pair.a, pair.b, 5000, 3);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges, 0)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() == 1; }));
  pair.run_for(10ms);
  EXPECT_TRUE(pair.a.send_wcs.empty());
  m.expect_delivered();
}

TEST(RcProtocol, GivenSqSigAllExpectEveryWrCompletes) {
  ConnectParams p;
  p.sq_sig_all = true;
  EnginePair pair(p);
  Message m(pair.a, pair.b, 10, 3);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges, 0)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 1; }));
}

// --- RDMA WRITE ---

TEST(RcProtocol, GivenRdmaWriteExpectDataInTargetAndNoReceiveConsumed) {
  for (uint32_t mtu_enum : {1u, 3u, 5u}) {
    ConnectParams p;
    p.path_mtu = mtu_enum;
    EnginePair pair(p);
    const size_t len = 3 * pair.mtu() + 17;
    Message m(pair.a, pair.b, len, 21);
    Target t(pair.b, len);
    Message after(pair.a, pair.b, 64, 22);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, after.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(2, m.send_sges, t.va(), t.rkey())), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, after.send_sges)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    t.expect_holds(m.data);
    // The WRITE took no receive WQE: the SEND after it got the first one.
    ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
    EXPECT_EQ(pair.b.recv_wcs[0].wr_id, 1u);
    after.expect_delivered();
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kRdmaWrite);
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(pair.a.send_wcs[1].opcode, WcOpcode::kSend);
  }
}

TEST(RcProtocol, GivenRdmaWriteWithImmediateExpectDataAndImmInReceiveCompletion) {
  for (size_t len : {size_t{0}, size_t{1}, size_t{3 * 4096 + 1}}) {
    EnginePair pair;
    Message m(pair.a, pair.b, len, 31);
    Target t(pair.b, len);
    Region unused = testing::register_region(pair.b.engine, 16, kRemote, kGuard);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, {unused.sge(0, 16)})), 0);
    SendWqe w = testing::write_wr(2, m.send_sges, t.va(), t.rkey());
    w.opcode = WrOpcode::kRdmaWriteWithImm;
    w.imm_or_rkey = 0xcafef00d;
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
    t.expect_holds(m.data);
    const Completion& r = pair.b.recv_wcs[0];
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_EQ(r.opcode, WcOpcode::kRecvRdmaWithImm);
    EXPECT_EQ(r.imm_data, 0xcafef00du);
    EXPECT_NE(r.wc_flags & kWcWithImm, 0u);
    EXPECT_EQ(r.byte_len, len);
    EXPECT_EQ(r.wr_id, 1u);
    // The receive buffer itself is not written.
    EXPECT_TRUE(std::all_of(unused.bytes.begin(), unused.bytes.end(),
                            [](uint8_t b) { return b == kGuard; }));
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kRdmaWrite);
  }
}

TEST(RcProtocol, GivenZeroLengthWriteExpectNoRkeyCheckAndSuccess) {
  // IBA 9.4.3: a zero-length RDMA WRITE does not validate the R_Key or VA.
  EnginePair pair;
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(1, {}, 0xdead0000, 0x12345)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

// --- remote errors: the requester learns them through a NAK; both QPs end in ERR ---

struct AccessCase {
  const char* what;
  bool wrong_rkey;
  int64_t va_shift;
  uint32_t responder_qp_access;
  uint32_t region_access;
  bool with_imm;
};

TEST(RcProtocol, GivenRemoteAccessViolationExpectRemAccessErrAndBothQpsInError) {
  const AccessCase cases[] = {
      {"wrong rkey", true, 0, kRemote, kRemote, false},
      {"wrong rkey, WRITE with immediate", true, 0, kRemote, kRemote, true},
      {"QP without remote write access", false, 0, kAccessLocalWrite | kAccessRemoteRead, kRemote,
       false},
      {"region without remote write access", false, 0, kRemote, kLocal, false},
      {"range past the end of the region", false, int64_t{kGap} + 1, kRemote, kRemote, false},
      {"range before the region", false, -int64_t{kGap} - 1, kRemote, kRemote, false},
  };
  for (const AccessCase& c : cases) {
    SCOPED_TRACE(c.what);
    ConnectParams p;
    p.access_b = c.responder_qp_access;
    EnginePair pair(p);
    Message m(pair.a, pair.b, 2 * 4096 + 100, 41);
    Target t(pair.b, m.data.size(), c.region_access);
    Message later(pair.a, pair.b, 100, 42);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, later.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, later.recv_sges)), 0);
    SendWqe w = testing::write_wr(1, m.send_sges, t.va() + c.va_shift,
                                  c.wrong_rkey ? t.rkey() ^ 0x5a5a : t.rkey());
    if (c.with_imm) w.opcode = WrOpcode::kRdmaWriteWithImm;
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, later.send_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, later.send_sges, 0)),
              0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }));
    pair.run_for(5ms);

    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemAccessErr);
    EXPECT_EQ(pair.a.send_wcs[0].opcode, WcOpcode::kRdmaWrite);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.send_wcs[2].status, WcStatus::kWrFlushErr);  // even unsignaled
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    EXPECT_EQ(pair.b.state(), QpState::kErr);
    // The responder's receives are flushed, none consumed by the failed WRITE.
    EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{10, 11}));
    expect_all(pair.b.recv_wcs, WcStatus::kWrFlushErr);
    t.expect_untouched();
    later.expect_untouched();
    const auto acks = pair.acks_from(kLidB);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack_type(), wire::AckType::kNak);
    EXPECT_EQ(acks.back().ack_value(), uint8_t(wire::NakCode::kRemoteAccessError));
  }
}

TEST(RcProtocol, GivenReceiveBufferTooSmallExpectLocLenErrAtReceiverRemInvReqAtSender) {
  for (size_t len : {size_t{200}, size_t{3 * 4096}}) {
    SCOPED_TRACE(len);
    EnginePair pair;
    Message m(pair.a, pair.b, len, 51, 3, 2, 0);
    Region small = testing::register_region(pair.b.engine, 100, kRemote, kGuard);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, {small.sge(0, 64), small.sge(70, 30)})),
              0);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(4, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(5ms);
    ASSERT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kLocLenErr);
    EXPECT_EQ(pair.b.recv_wcs[1].status, WcStatus::kWrFlushErr);
    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{3, 4}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemInvReqErr);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    EXPECT_EQ(pair.b.state(), QpState::kErr);
  }
}

// --- local errors at the requester (IBA 10.7.2.2) ---

TEST(RcProtocol, GivenBadLkeyExpectLocProtErrOnThatWrAndTheOthersFlushed) {
  EnginePair pair;
  Message m1(pair.a, pair.b, 3 * 4096, 111), m3(pair.a, pair.b, 100, 113);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m1.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(12, m3.recv_sges)), 0);
  std::vector<Sge> bad = m3.send_sges;
  bad.push_back(Sge{bad[0].addr, 4, 0xdeadbeef});  // the second SGE has no valid lkey
  // Posting does not look at lkeys; processing the WR does.
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, bad)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, m3.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 3; }));
  pair.run_for(5ms);
  ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2, 3}));
  // WR 1 was on the wire when the QP failed: it may complete or be flushed.
  EXPECT_TRUE(pair.a.send_wcs[0].status == WcStatus::kSuccess ||
              pair.a.send_wcs[0].status == WcStatus::kWrFlushErr)
      << to_string(pair.a.send_wcs[0].status);
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kLocProtErr);
  EXPECT_EQ(pair.a.send_wcs[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  // Nothing of WR 2 left A: B saw WR 1 only and has no reason to fail.
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].status, WcStatus::kSuccess);
  m1.expect_delivered();
}

TEST(RcProtocol, GivenBadLkeyOnTheOnlyWrExpectLocProtErrAndNothingSent) {
  EnginePair pair;
  ASSERT_EQ(
      testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, {Sge{0x1000, 64, 0x1234}})),
      0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kLocProtErr);
  EXPECT_TRUE(pair.requests_from(kLidA).empty());
  EXPECT_EQ(pair.a.state(), QpState::kErr);
}

// --- send queue drained (IBA 10.3.1) ---

TEST(RcProtocol, GivenSqdExpectWrsInFlightFinishedAndNewOnesHeldUntilRts) {
  EnginePair pair;
  Message m1(pair.a, pair.b, 2 * 4096, 121), m2(pair.a, pair.b, 100, 122);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m1.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(12, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  QpAttr a;
  a.qp_state = QpState::kSqd;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(5ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1}));
  EXPECT_EQ(pair.requests_from(kLidA).size(), 2u) << "WR 2 started in SQD";
  EXPECT_EQ(pair.a.state(), QpState::kSqd);
  a.qp_state = QpState::kRts;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{11, 12}));
  m1.expect_delivered();
  m2.expect_delivered();
}

TEST(RcProtocol, GivenSqdWithAsyncNotifyExpectSqDrainedOnceWhenTheLastMessageCompletes) {
  EnginePair pair;
  Message m(pair.a, pair.b, 3 * 4096, 123);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  QpAttr a;
  a.qp_state = QpState::kSqd;
  a.en_sqd_async_notify = true;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState | kQpEnSqdAsyncNotify), 0);
  EXPECT_TRUE(pair.a.qp->query().sq_draining) << "the SEND is not acknowledged yet";
  EXPECT_TRUE(pair.a.events.empty());
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(2ms);
  EXPECT_EQ(pair.a.events, std::vector<QpEvent>{QpEvent::kSqDrained});
  EXPECT_FALSE(pair.a.qp->query().sq_draining);
  // Back to RTS and into SQD again with nothing in flight: drained at once.
  a.qp_state = QpState::kRts;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState), 0);
  a.qp_state = QpState::kSqd;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState | kQpEnSqdAsyncNotify), 0);
  EXPECT_EQ(pair.a.events.size(), 2u);
  // Without asking for it, no event.
  a.qp_state = QpState::kRts;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState), 0);
  a.qp_state = QpState::kSqd;
  ASSERT_EQ(pair.a.qp->modify(a, kQpState), 0);
  EXPECT_EQ(pair.a.events.size(), 2u);
}

// --- reuse after an error ---

TEST(RcProtocol, GivenQpsResetAndReconnectedAfterAnErrorExpectACleanNewConnection) {
  EnginePair pair;
  Message m(pair.a, pair.b, 3 * 4096 + 5, 131);
  Target t(pair.b, 64);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(2, m.send_sges, t.va(), 0x77)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  pair.run_for(2ms);
  ASSERT_EQ(pair.a.state(), QpState::kErr);
  ASSERT_EQ(pair.b.state(), QpState::kErr);

  ConnectParams p;
  p.sq_psn_a = 0x00beef;
  p.sq_psn_b = 0x00cafe;
  for (Endpoint* e : {&pair.a, &pair.b}) {
    QpAttr reset;
    reset.qp_state = QpState::kReset;
    ASSERT_EQ(e->qp->modify(reset, kQpState), 0);
    e->send_wcs.clear();
    e->recv_wcs.clear();
  }
  testing::connect_qp(pair.a, p, kLidB, kQpnB, p.sq_psn_b, p.sq_psn_a, kRemote);
  testing::connect_qp(pair.b, p, kLidA, kQpnA, p.sq_psn_a, p.sq_psn_b, kRemote);
  pair.link.clear_log();
  send_and_wait(pair, m, 4);
  pair.run_for(5ms);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{4}));
  EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{104}));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
  m.expect_delivered();
  EXPECT_EQ(pair.requests_from(kLidA).front().psn(), 0x00beefu);
}

// --- receiver not ready (IBA 9.7.5.2.8) ---

TEST(RcProtocol, GivenNoReceiveAndRnrRetryZeroExpectRnrRetryExceeded) {
  ConnectParams p;
  p.rnr_retry = 0;
  EnginePair pair(p);
  Message m(pair.a, pair.b, 6000, 61);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  // RNR is no error at the responder.
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  const auto acks = pair.acks_from(kLidB);
  EXPECT_EQ(count_naks(acks, wire::AckType::kRnrNak), 1u);
  EXPECT_EQ(acks[0].ack_value(), p.min_rnr_timer);  // the responder's RNR timer
}

TEST(RcProtocol, GivenNoReceiveAndRnrRetryTwoExpectThreeRnrNaksThenError) {
  ConnectParams p;
  p.rnr_retry = 2;
  EnginePair pair(p);
  Message m(pair.a, pair.b, 10, 62);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(count_naks(pair.acks_from(kLidB), wire::AckType::kRnrNak), 3u);
  EXPECT_EQ(pair.requests_from(kLidA).size(), 3u);
}

TEST(RcProtocol, GivenNoReceiveAndInfiniteRnrRetryExpectSuccessOnceReceivePosted) {
  ConnectParams p;
  p.rnr_retry = 7;
  EnginePair pair(p);
  Message m(pair.a, pair.b, 3 * 4096 + 5, 63);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  // More RNR NAKs than any finite rnr_retry below 7 would allow, and more
  // than the transport retry count: rnr_retry 7 means "retry forever".
  ASSERT_TRUE(pair.run_until(
      [&] { return count_naks(pair.acks_from(kLidB), wire::AckType::kRnrNak) >= 10; }));
  pair.run_for(10ms);
  EXPECT_TRUE(pair.a.send_wcs.empty());
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, m.recv_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(5ms);
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, m.data.size());
  m.expect_delivered();
}

TEST(RcProtocol, GivenWriteWithImmediateAndNoReceiveExpectRnrThenSuccess) {
  EnginePair pair;
  Message m(pair.a, pair.b, 2 * 4096 + 3, 64);
  Target t(pair.b, m.data.size());
  SendWqe w = testing::write_wr(1, m.send_sges, t.va(), t.rkey());
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.imm_or_rkey = 77;
  ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
  pair.run_for(10ms);
  EXPECT_TRUE(pair.a.send_wcs.empty());
  EXPECT_GE(count_naks(pair.acks_from(kLidB), wire::AckType::kRnrNak), 1u);
  Region r = testing::register_region(pair.b.engine, 8, kRemote);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, {r.sge(0, 8)})), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(5ms);
  EXPECT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].imm_data, 77u);
  t.expect_holds(m.data);
}

// --- loss, duplication, reordering ---

/// A link policy that drops the `n`-th (0-based) first transmission of a
/// packet matching `match`; retransmissions pass.
struct DropNth {
  std::function<bool(const WirePacket&)> match;
  size_t n;
  size_t seen = 0;
  bool dropped = false;
  Fate operator()(const WirePacket& p) {
    if (dropped || !match(p)) return Fate::kDeliver;
    if (seen++ == n) {
      dropped = true;
      return Fate::kDrop;
    }
    return Fate::kDeliver;
  }
};

struct LossCase {
  const char* what;
  std::function<bool(const WirePacket&)> match;  // the kind of packet to lose
  size_t n;                                      // lose the n-th of that kind
  bool expect_resend;  // recovery needs a retransmission (a lost ACK may not)
  bool expect_nak;     // recovery through a PSN sequence NAK (else a local ACK timeout)
};

TEST(RcProtocol, GivenOnePacketLostExpectRetransmissionAndEveryWrCompletedOnce) {
  // Two SENDs of 10 and 5 packets: PSNs first .. first+9 and first+10 .. first+14.
  const uint32_t first = ConnectParams{}.sq_psn_a;
  auto request = [](const WirePacket& p) { return p.slid() == kLidA && p.is_request(); };
  auto request_psn = [first](uint32_t i) {
    return [=](const WirePacket& p) {
      return p.slid() == kLidA && p.is_request() && p.psn() == wire::psn_add(first, i);
    };
  };
  auto ack_psn = [first](uint32_t i) {
    return [=](const WirePacket& p) {
      return p.slid() == kLidB && p.is_ack() && p.psn() == wire::psn_add(first, i);
    };
  };
  auto ack = [](const WirePacket& p) { return p.slid() == kLidB && p.is_ack(); };
  const LossCase cases[] = {
      {"first packet", request, 0, true, true},
      {"a middle packet", request, 4, true, true},
      {"last packet of the first message", request_psn(9), 0, true, true},
      {"last packet of the last message", request_psn(14), 0, true, false},
      {"the last ACK", ack_psn(14), 0, true, false},
      // ACKs are cumulative: the next one makes up for a lost one.
      {"the first ACK", ack, 0, false, false},
  };
  for (const LossCase& c : cases) {
    SCOPED_TRACE(c.what);
    EnginePair pair;
    Message m1(pair.a, pair.b, 10 * 4096, 71), m2(pair.a, pair.b, 5 * 4096 - 7, 72);
    auto policy = std::make_shared<DropNth>();
    policy->n = c.n;
    policy->match = c.match;
    pair.link.policy = [policy](const WirePacket& p) { return (*policy)(p); };
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m1.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(12, m2.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(10ms);
    EXPECT_TRUE(policy->dropped);
    EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{11, 12}));
    expect_all(pair.a.send_wcs, WcStatus::kSuccess);
    expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
    m1.expect_delivered();
    m2.expect_delivered();
    if (c.expect_resend) {
      EXPECT_GT(pair.requests_from(kLidA).size(), 15u);
    } else {
      EXPECT_EQ(pair.requests_from(kLidA).size(), 15u);
    }
    EXPECT_EQ(count_naks(pair.acks_from(kLidB), wire::AckType::kNak), c.expect_nak ? 1u : 0u);
    EXPECT_EQ(pair.a.state(), QpState::kRts);
    EXPECT_EQ(pair.b.state(), QpState::kRts);
  }
}

// A ring that stays full refuses a packet; a hardware responder's ACK would
// wait for link credits instead (held_acks.h).
struct RefusedAckCase {
  const char* what;
  bool destroy_responder;  // the responder's program is done and destroys its QP
};

TEST(RcProtocol,
     GivenTheLinkRefusesTheLastAckExpectTheResponderToDeliverItLaterWithoutRetransmission) {
  const RefusedAckCase cases[] = {{"the timer scan offers it again", false},
                                  {"destroying the QP offers it once more", true}};
  for (const RefusedAckCase& c : cases) {
    SCOPED_TRACE(c.what);
    ConnectParams p;
    p.timeout = 16;  // 268 ms: the requester must not be the one that recovers
    EnginePair pair(p);
    Message m(pair.a, pair.b, 3 * 4096, 81);
    const uint32_t last_psn = wire::psn_add(p.sq_psn_a, 2);
    bool refused = false;
    pair.link.refuse = [&](const WirePacket& w) {
      if (refused || w.slid() != kLidB || !w.is_ack() || w.psn() != last_psn) return false;
      return refused = true;
    };
    auto last_acks = [&] {
      size_t n = 0;
      for (const WirePacket& w : pair.acks_from(kLidB)) n += w.psn() == last_psn;
      return n;
    };
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
    pair.link.deliver_all();
    pair.b.poll();
    ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
    ASSERT_TRUE(refused);
    EXPECT_EQ(last_acks(), 0u);
    if (c.destroy_responder) {
      pair.b.qp.reset();
      pair.b.engine.destroy_qp(kQpnB);
      pair.link.deliver_all();
      pair.a.poll();
    } else {
      ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 1; }, 100ms));
    }
    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(pair.requests_from(kLidA).size(), 3u);  // nothing was sent twice
    EXPECT_EQ(last_acks(), 1u);
    m.expect_delivered();
  }
}

TEST(RcProtocol, GivenARefusedAckSupersededByANewerOneExpectOnlyTheNewerSent) {
  ConnectParams p;
  p.timeout = 16;
  EnginePair pair(p);
  Message m1(pair.a, pair.b, 100, 82), m2(pair.a, pair.b, 100, 83);
  size_t acks_seen = 0;
  pair.link.refuse = [&](const WirePacket& w) {
    return w.slid() == kLidB && w.is_ack() && acks_seen++ == 0;
  };
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m1.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(12, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  pair.link.deliver_all();
  ASSERT_EQ(pair.link.refused, 1u);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }, 100ms));
  pair.run_for(5ms);  // timer scans: nothing is held any more
  const auto acks = pair.acks_from(kLidB);
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].psn(), wire::psn_add(p.sq_psn_a, 1));
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2}));
}

/// Sends a mix of SENDs, SENDs with immediate and RDMA WRITEs (with and
/// without immediate) of assorted sizes from A to B, and checks that every
/// one arrives intact and completes exactly once, in order, on both sides.
void run_mixed_traffic(EnginePair& pair, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t mtu = pair.mtu();
  struct Op {
    std::unique_ptr<Message> msg;
    std::unique_ptr<Target> target;
    WrOpcode op;
  };
  std::vector<Op> ops;
  std::vector<uint64_t> want_recv;
  for (int i = 0; i < count; ++i) {
    const size_t sizes[] = {0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu + 5, rng() % (8 * mtu)};
    const size_t len = sizes[rng() % 7];
    const WrOpcode kinds[] = {WrOpcode::kSend, WrOpcode::kSendWithImm, WrOpcode::kRdmaWrite,
                              WrOpcode::kRdmaWriteWithImm};
    Op o{std::make_unique<Message>(pair.a, pair.b, len, seed * 1000 + i, 1 + rng() % 4,
                                   1 + rng() % 4),
         nullptr, kinds[rng() % 4]};
    SendWqe w;
    if (o.op == WrOpcode::kRdmaWrite || o.op == WrOpcode::kRdmaWriteWithImm) {
      o.target = std::make_unique<Target>(pair.b, len);
      w = testing::write_wr(i, o.msg->send_sges, o.target->va(), o.target->rkey());
      w.opcode = o.op;
    } else {
      w = testing::send_wr(i, o.op, o.msg->send_sges);
    }
    w.imm_or_rkey = 0x1000 + i;
    if (o.op != WrOpcode::kRdmaWrite) {
      ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(i, o.msg->recv_sges)), 0);
      want_recv.push_back(i);
    }
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ops.push_back(std::move(o));
  }
  ASSERT_TRUE(pair.run_until([&] {
    return pair.a.send_wcs.size() == size_t(count) && pair.b.recv_wcs.size() == want_recv.size();
  })) << pair.a.send_wcs.size()
      << " send and " << pair.b.recv_wcs.size() << " receive completions";
  pair.run_for(10ms);
  std::vector<uint64_t> want_send(count);
  for (int i = 0; i < count; ++i) want_send[i] = i;
  EXPECT_EQ(ids(pair.a.send_wcs), want_send);
  EXPECT_EQ(ids(pair.b.recv_wcs), want_recv);
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  expect_all(pair.b.recv_wcs, WcStatus::kSuccess);
  size_t r = 0;
  for (int i = 0; i < count; ++i) {
    const Op& o = ops[i];
    if (o.target) {
      o.target->expect_holds(o.msg->data);
    } else {
      o.msg->expect_delivered();
    }
    if (o.op == WrOpcode::kRdmaWrite) continue;
    const Completion& c = pair.b.recv_wcs[r++];
    EXPECT_EQ(c.byte_len, o.msg->data.size());
    const bool imm = o.op == WrOpcode::kSendWithImm || o.op == WrOpcode::kRdmaWriteWithImm;
    EXPECT_EQ((c.wc_flags & kWcWithImm) != 0, imm);
    if (imm) {
      EXPECT_EQ(c.imm_data, 0x1000u + i);
    }
  }
  EXPECT_EQ(pair.a.state(), QpState::kRts);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(RcProtocol, GivenEveryPacketDuplicatedExpectNoDuplicateCompletions) {
  EnginePair pair;
  pair.link.policy = [](const WirePacket&) { return Fate::kDuplicate; };
  run_mixed_traffic(pair, 30, 1);
}

TEST(RcProtocol, GivenPacketsReorderedExpectDataIntactAndCompletionsInOrder) {
  ConnectParams p;
  p.path_mtu = 1;
  EnginePair pair(p);
  size_t n = 0;
  pair.link.policy = [&n](const WirePacket&) {
    return ++n % 3 == 0 ? Fate::kDelay : Fate::kDeliver;
  };
  run_mixed_traffic(pair, 30, 2);
}

TEST(RcProtocol, GivenRandomLossDuplicationAndReorderingExpectEverythingDeliveredOnce) {
  for (uint32_t mtu_enum : {1u, 3u, 5u}) {
    SCOPED_TRACE(mtu_enum);
    ConnectParams p;
    p.path_mtu = mtu_enum;
    EnginePair pair(p);
    auto rng = std::make_shared<std::mt19937>(mtu_enum);
    pair.link.policy = [rng](const WirePacket&) {
      const uint32_t x = (*rng)() % 100;
      return x < 5    ? Fate::kDrop
             : x < 10 ? Fate::kDuplicate
             : x < 15 ? Fate::kDelay
                      : Fate::kDeliver;
    };
    run_mixed_traffic(pair, 40, 10 + mtu_enum);
  }
}

// --- transport retry exhausted (IBA 9.7.6.1.3) ---

TEST(RcProtocol, GivenLinkLosingEverythingExpectRetryExceededAfterRetryCntPlusOneTimeouts) {
  for (uint8_t retry_cnt : {uint8_t{0}, uint8_t{3}, uint8_t{7}}) {
    SCOPED_TRACE(int(retry_cnt));
    ConnectParams p;
    p.timeout = 10;  // 4.096 µs × 2^10 ≈ 4.2 ms
    p.retry_cnt = retry_cnt;
    EnginePair pair(p);
    pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
    Message m(pair.a, pair.b, 2 * 4096, 81);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
    const Nanos start = pair.clock.now();
    for (uint64_t i = 1; i <= 3; ++i)
      ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    const Nanos elapsed = pair.clock.now() - start;
    pair.run_for(5ms);

    // In virtual time each timeout expires within one step of being due.
    const Nanos timeout = local_ack_timeout_ns(p.timeout);
    EXPECT_GE(elapsed, timeout * (retry_cnt + 1));
    EXPECT_LE(elapsed, (timeout + EnginePair::kStep) * (retry_cnt + 1));
    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRetryExcErr);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.send_wcs[2].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    // The first packet went out once and was retried retry_cnt times.
    const auto reqs = pair.requests_from(kLidA);
    EXPECT_EQ(std::count_if(reqs.begin(), reqs.end(),
                            [&](const WirePacket& r) { return r.psn() == p.sq_psn_a; }),
              retry_cnt + 1);
    // B never heard of it.
    EXPECT_TRUE(pair.b.recv_wcs.empty());
    EXPECT_EQ(pair.b.state(), QpState::kRts);
  }
}

// The host stops running the fabric (a VM's CPU taken away) for longer than
// retry_cnt + 1 timeouts while the requester's timers run on: meanwhile every
// packet waits in the link, or is lost (the far end took the link for down).
// With no stall tolerance the QP gives up as IBA says; with one it keeps
// resending and completes the WQE once the fabric runs again.
TEST(RcProtocol, GivenFabricFrozenPastTheRetriesExpectSuccessOnlyWithinTheStallTolerance) {
  for (const bool lost : {false, true}) {
    for (const Nanos tolerance : {Nanos{0}, Nanos{1'000'000'000}}) {
      SCOPED_TRACE(::testing::Message() << "lost " << lost << ", tolerance " << tolerance);
      ConnectParams p;
      p.timeout = 10;  // 4.2 ms: all retries spent within about 17 ms
      p.retry_cnt = 3;
      p.stall_tolerance = tolerance;
      EnginePair pair(p);
      Message m(pair.a, pair.b, 4096, 82);
      ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
      ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
      if (lost) pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
      for (Nanos frozen = 0; frozen < 100'000'000; frozen += 200'000) {
        if (lost) pair.link.deliver_all();
        pair.a.engine.run_timers(pair.clock.now());
        pair.b.engine.run_timers(pair.clock.now());
        pair.clock.advance(200us);
      }
      pair.link.policy = nullptr;
      ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
      if (tolerance == 0) {
        EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRetryExcErr);
        EXPECT_EQ(pair.a.state(), QpState::kErr);
      } else {
        EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
        EXPECT_EQ(pair.a.state(), QpState::kRts);
        m.expect_delivered();
      }
    }
  }
}

// The retries a host stall spent are not the link's fault: when the fabric
// runs again and the first resent packet is lost, the responder's PSN
// sequence NAK asks for a resend, and within the stall tolerance the
// requester resends as the timer path would, rather than fail the QP on a
// healthy peer.
TEST(RcProtocol, GivenRetriesSpentInAStallThenASequenceNakExpectSuccessWithinTheStallTolerance) {
  for (const Nanos tolerance : {Nanos{0}, Nanos{1'000'000'000}}) {
    SCOPED_TRACE(::testing::Message() << "tolerance " << tolerance);
    ConnectParams p;
    p.timeout = 10;
    p.retry_cnt = 3;
    p.path_mtu = 3;  // 1024: the message is four packets
    p.stall_tolerance = tolerance;
    EnginePair pair(p);
    Message m(pair.a, pair.b, 4096, 84);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(10, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
    pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
    // Frozen for long enough to spend every retry, not the tolerance.
    for (Nanos frozen = 0; frozen < 30'000'000; frozen += 200'000) {
      pair.link.deliver_all();
      pair.a.engine.run_timers(pair.clock.now());
      pair.b.engine.run_timers(pair.clock.now());
      pair.clock.advance(200us);
    }
    if (tolerance == 0) {
      ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
      EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRetryExcErr);
      continue;
    }
    ASSERT_TRUE(pair.a.send_wcs.empty());
    // The fabric runs again; the first packet of the next resend is lost,
    // so the second reaches the responder out of sequence.
    bool first_lost = false;
    pair.link.policy = [&](const WirePacket& w) {
      if (first_lost || w.psn() != p.sq_psn_a) return Fate::kDeliver;
      first_lost = true;
      return Fate::kDrop;
    };
    ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
    EXPECT_TRUE(first_lost);
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(pair.a.state(), QpState::kRts);
    m.expect_delivered();
  }
}

// A peer that is really gone: the retransmissions keep IBA's timing, and
// go on past retry_cnt until the peer has been silent for the tolerance.
TEST(RcProtocol, GivenStallToleranceAndLinkLosingEverythingExpectRetryExceededAfterTheTolerance) {
  ConnectParams p;
  p.timeout = 10;
  p.retry_cnt = 3;
  p.stall_tolerance = 300'000'000;
  EnginePair pair(p);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  Message m(pair.a, pair.b, 4096, 83);
  const Nanos start = pair.clock.now();
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_GE(pair.clock.now() - start, p.stall_tolerance);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  // 300 ms of 4.2 ms timeouts: far more than retry_cnt resends.
  EXPECT_GT(pair.requests_from(kLidA).size(), 4u * (p.retry_cnt + 1u));
}

TEST(RcProtocol, GivenLinkRecoversBeforeRetriesRunOutExpectSuccess) {
  ConnectParams p;
  p.retry_cnt = 7;
  EnginePair pair(p);
  int drops = 0;
  pair.link.policy = [&drops](const WirePacket& w) {
    return w.is_request() && drops++ < 5 ? Fate::kDrop : Fate::kDeliver;
  };
  Message m(pair.a, pair.b, 100, 82);
  send_and_wait(pair, m);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  m.expect_delivered();
}

// --- PSN wrap-around ---

TEST(RcProtocol, GivenPsnsNearTheTopExpectTransferAcrossTheWrap) {
  ConnectParams p;
  p.path_mtu = 1;
  p.sq_psn_a = 0xfffffb;
  p.sq_psn_b = 0xffffff;
  EnginePair pair(p);
  // 20 packets from A (PSNs 0xfffffb … 0x00000e) and 3 from B (0xffffff … 1).
  Message ab(pair.a, pair.b, 20 * 256, 91), ba(pair.b, pair.a, 2 * 256 + 1, 92);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, ab.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::recv_wr(2, ba.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(3, WrOpcode::kSend, ab.send_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::send_wr(4, WrOpcode::kSend, ba.send_sges)), 0);
  ASSERT_TRUE(
      pair.run_until([&] { return pair.a.send_wcs.size() == 1 && pair.b.send_wcs.size() == 1; }));
  ab.expect_delivered();
  ba.expect_delivered();
  EXPECT_EQ(pair.requests_from(kLidA).back().psn(), 0x00000eu);
  EXPECT_EQ(pair.acks_from(kLidB).back().psn(), 0x00000eu);
}

TEST(RcProtocol, GivenLossRightAtTheWrapExpectRecovery) {
  for (uint32_t lost_psn : {0xffffffu, 0x000000u, 0x000001u}) {
    SCOPED_TRACE(lost_psn);
    ConnectParams p;
    p.path_mtu = 1;
    p.sq_psn_a = 0xfffffa;
    EnginePair pair(p);
    bool dropped = false;
    pair.link.policy = [&](const WirePacket& w) {
      if (!dropped && w.is_request() && w.psn() == lost_psn) {
        dropped = true;
        return Fate::kDrop;
      }
      return Fate::kDeliver;
    };
    Message m(pair.a, pair.b, 12 * 256, 93);
    send_and_wait(pair, m);
    pair.run_for(5ms);
    EXPECT_TRUE(dropped);
    ASSERT_EQ(pair.a.send_wcs.size(), 1u);
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(pair.b.recv_wcs.size(), 1u);
    m.expect_delivered();
  }
}

// --- more than the send window in flight ---

TEST(RcProtocol, GivenManyMoreWrsThanTheWindowExpectAllCompleteInOrder) {
  ConnectParams p;
  p.path_mtu = 1;
  p.max_send_wr = 1024;
  p.max_recv_wr = 1024;
  EnginePair pair(p);
  constexpr int kCount = 600;  // 600 SENDs of 1 to 3 packets: ~1200 packets
  Region src = testing::register_region(pair.a.engine, kCount * 768, kLocal);
  Region dst = testing::register_region(pair.b.engine, kCount * 768, kRemote);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = uint8_t(i * 31 + i / 251);
  auto len_of = [](int i) { return uint32_t(1 + (i * 97) % 768); };
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(i, {dst.sge(i * 768, 768)})), 0);
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(testing::post(*pair.a.qp,
                            testing::send_wr(i, WrOpcode::kSend, {src.sge(i * 768, len_of(i))})),
              0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == kCount; }));
  pair.run_for(5ms);
  std::vector<uint64_t> want(kCount);
  for (int i = 0; i < kCount; ++i) want[i] = i;
  EXPECT_EQ(ids(pair.a.send_wcs), want);
  EXPECT_EQ(ids(pair.b.recv_wcs), want);
  for (int i = 0; i < kCount; ++i) {
    EXPECT_EQ(pair.b.recv_wcs[i].byte_len, len_of(i));
    EXPECT_TRUE(std::equal(src.bytes.begin() + i * 768, src.bytes.begin() + i * 768 + len_of(i),
                           dst.bytes.begin() + i * 768))
        << "message " << i;
  }
}

TEST(RcProtocol, GivenManyWrsInFlightAndLossExpectAllCompleteExactlyOnce) {
  ConnectParams p;
  p.max_send_wr = 1024;
  p.max_recv_wr = 1024;
  EnginePair pair(p);
  auto rng = std::make_shared<std::mt19937>(5);
  pair.link.policy = [rng](const WirePacket&) {
    return (*rng)() % 50 == 0 ? Fate::kDrop : Fate::kDeliver;
  };
  constexpr int kCount = 400;
  Region src = testing::register_region(pair.a.engine, kCount * 64, kLocal);
  Region dst = testing::register_region(pair.b.engine, kCount * 64, kRemote);
  for (size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = uint8_t(i * 7 + 1);
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(i, {dst.sge(i * 64, 64)})), 0);
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(
        testing::post(*pair.a.qp, testing::send_wr(i, WrOpcode::kSend, {src.sge(i * 64, 64)})), 0);
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == kCount; }));
  pair.run_for(10ms);
  EXPECT_EQ(pair.a.send_wcs.size(), size_t(kCount));
  EXPECT_EQ(pair.b.recv_wcs.size(), size_t(kCount));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_EQ(src.bytes, dst.bytes);
}

// --- packets that are not from the connected peer (IBA 9.6.1) ---

TEST(RcProtocol, GivenRequestFromAnotherLidExpectIgnored) {
  EnginePair pair;
  Message m(pair.a, pair.b, 100, 101);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  // Capture A's request without delivering it.
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  const WirePacket original = pair.requests_from(kLidA).at(0);

  std::vector<uint8_t> forged = original.bytes;
  wire::Lrh lrh = wire::Lrh::from(forged.data());
  lrh.set_slid(testing::kLidStranger);
  lrh.to(forged.data());
  testing::reseal(forged);
  pair.link.clear_log();
  pair.b.engine.receive(forged.data(), forged.size());
  pair.link.deliver_all();
  pair.b.poll();
  EXPECT_TRUE(pair.link.log().empty()) << "B answered a stranger";
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  m.expect_untouched();

  // The real packet, same PSN, still goes through.
  pair.b.engine.receive(original.bytes.data(), original.bytes.size());
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  m.expect_delivered();
}

TEST(RcProtocol, GivenThirdHcaSendingToAConnectedQpExpectItIgnored) {
  EnginePair pair;
  ConnectParams p;
  Endpoint c(pair.link, testing::kLidStranger, 0x0002c90300000301ull, 0x000033, p, pair.clock);
  testing::connect_qp(c, p, kLidB, kQpnB, p.sq_psn_b, p.sq_psn_a, kRemote);  // same PSNs as A
  pair.extra.push_back(&c);
  Message from_a(pair.a, pair.b, 100, 102), from_c(c, pair.b, 100, 103);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, from_a.recv_sges)), 0);
  ASSERT_EQ(testing::post(*c.qp, testing::send_wr(5, WrOpcode::kSend, from_c.send_sges)), 0);
  pair.run_for(5ms);
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  EXPECT_TRUE(pair.acks_from(kLidB).empty());
  from_a.expect_untouched();
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, from_a.send_sges)), 0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  ASSERT_EQ(pair.b.recv_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs[0].src_qp, kQpnA);
  from_a.expect_delivered();
  // Nobody acknowledges C: it runs out of retries.
  ASSERT_TRUE(pair.run_until([&] { return !c.send_wcs.empty(); }));
  EXPECT_EQ(c.send_wcs[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(pair.b.state(), QpState::kRts);
}

TEST(RcProtocol, GivenAckFromAnotherLidExpectIgnored) {
  EnginePair pair;
  Message m(pair.a, pair.b, 100, 104);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  // Let the request reach B but hold B's ACK back.
  pair.link.policy = [](const WirePacket& w) { return w.is_ack() ? Fate::kDrop : Fate::kDeliver; };
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  std::vector<uint8_t> forged = pair.acks_from(kLidB).at(0).bytes;
  wire::Lrh lrh = wire::Lrh::from(forged.data());
  lrh.set_slid(testing::kLidStranger);
  lrh.to(forged.data());
  testing::reseal(forged);
  pair.a.engine.receive(forged.data(), forged.size());
  pair.a.poll();
  EXPECT_TRUE(pair.a.send_wcs.empty());
  // A's timer resends; B acknowledges the duplicate; A completes once.
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  pair.run_for(5ms);
  EXPECT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.b.recv_wcs.size(), 1u);
}

TEST(RcProtocol, GivenPacketForAnotherDlidOrUnknownQpExpectDroppedAndCounted) {
  EnginePair pair;
  Message m(pair.a, pair.b, 100, 105);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  const std::vector<uint8_t> original = pair.requests_from(kLidA).at(0).bytes;
  pair.link.clear_log();

  // The link layer's DLID check (C7-66): a port takes only its own LIDs.
  std::vector<uint8_t> other_dlid = original;
  wire::Lrh lrh = wire::Lrh::from(other_dlid.data());
  lrh.set_dlid(5);
  lrh.to(other_dlid.data());
  testing::reseal(other_dlid);
  pair.b.engine.receive(other_dlid.data(), other_dlid.size());
  EXPECT_EQ(pair.b.engine.counters().rcv_wrong_dlid.load(), 1u);

  std::vector<uint8_t> unknown_qp = original;
  const size_t bth = wire::Lrh::kSize;
  wire::Bth b = wire::Bth::from(unknown_qp.data() + bth);
  b.set_dest_qp(0x000999);
  b.to(unknown_qp.data() + bth);
  testing::reseal(unknown_qp);
  pair.b.engine.receive(unknown_qp.data(), unknown_qp.size());
  EXPECT_EQ(pair.b.engine.counters().at(1).rcv_unknown_qp.load(), 1u);

  std::vector<uint8_t> corrupt = original;
  corrupt[corrupt.size() - 12] ^= 0x40;  // a payload bit: the ICRC no longer matches
  pair.b.engine.receive(corrupt.data(), corrupt.size());
  EXPECT_EQ(pair.b.engine.counters().rcv_malformed.load(), 1u);

  pair.link.deliver_all();
  pair.b.poll();
  EXPECT_TRUE(pair.link.log().empty());
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  m.expect_untouched();
  pair.b.engine.receive(original.data(), original.size());
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  m.expect_delivered();
}

TEST(RcProtocol, GivenUcPacketForAnRcQpExpectIgnored) {
  // IBA 9.6.1: the opcode's transport must be the QP's.
  EnginePair pair;
  Message m(pair.a, pair.b, 100, 107);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  const std::vector<uint8_t> original = pair.requests_from(kLidA).at(0).bytes;
  std::vector<uint8_t> uc = original;
  uc[wire::Lrh::kSize] |= 0x20;  // RC_SEND_ONLY → UC_SEND_ONLY
  testing::reseal(uc);
  pair.link.clear_log();
  pair.b.engine.receive(uc.data(), uc.size());
  pair.link.deliver_all();
  pair.b.poll();
  EXPECT_TRUE(pair.link.log().empty()) << "B answered a UC packet";
  EXPECT_TRUE(pair.b.recv_wcs.empty());
  m.expect_untouched();
  pair.b.engine.receive(original.data(), original.size());
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  m.expect_delivered();
}

TEST(RcProtocol, GivenPortWithLmcExpectEveryLidOfItsRangeAccepted) {
  EnginePair pair;
  pair.b.ports.set_lmc(1);  // B answers to LIDs 2 and 3
  Message m(pair.a, pair.b, 100, 108);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  auto to_dlid = [&](uint16_t dlid) {
    std::vector<uint8_t> p = pair.requests_from(kLidA).at(0).bytes;
    wire::Lrh lrh = wire::Lrh::from(p.data());
    lrh.set_dlid(dlid);
    lrh.to(p.data());
    testing::reseal(p);
    return p;
  };
  const auto beyond = to_dlid(4), in_range = to_dlid(3);
  pair.b.engine.receive(beyond.data(), beyond.size());
  EXPECT_EQ(pair.b.engine.counters().rcv_wrong_dlid.load(), 1u);
  pair.b.engine.receive(in_range.data(), in_range.size());
  EXPECT_EQ(pair.b.engine.counters().rcv_wrong_dlid.load(), 1u);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  m.expect_delivered();
}

// --- malformed requests from the connected peer (IBA 9.7.5.1) ---

struct LengthCase {
  const char* what;
  WrOpcode op;
  size_t len;       // message length at PMTU 256
  uint32_t packet;  // which request packet of the message to rewrite
  int resize_by;    // payload bytes added (or removed, when negative)
  bool empty;       // the payload removed altogether
};

TEST(RcProtocol, GivenPacketLengthsThatBreakTheRulesExpectInvalidRequestAndBothQpsInError) {
  const LengthCase cases[] = {
      {"first packet shorter than the PMTU", WrOpcode::kSend, 3 * 256 - 10, 0, -4, false},
      {"middle packet shorter than the PMTU", WrOpcode::kSend, 3 * 256 - 10, 1, -4, false},
      {"middle packet longer than the PMTU", WrOpcode::kSend, 3 * 256 - 10, 1, 4, false},
      {"last packet empty", WrOpcode::kSend, 3 * 256 - 10, 2, 0, true},
      {"last packet longer than the PMTU", WrOpcode::kSend, 3 * 256 - 10, 2, 20, false},
      {"only packet longer than the PMTU", WrOpcode::kSend, 200, 0, 100, false},
      {"WRITE shorter than its DMA length", WrOpcode::kRdmaWrite, 3 * 256 - 10, 2, -4, false},
      {"WRITE ONLY shorter than its DMA length", WrOpcode::kRdmaWrite, 200, 0, -4, false},
      {"WRITE first packet shorter than the PMTU", WrOpcode::kRdmaWrite, 600, 0, -8, false},
  };
  for (const LengthCase& c : cases) {
    SCOPED_TRACE(c.what);
    ConnectParams p;
    p.path_mtu = 1;
    EnginePair pair(p);
    Message m(pair.a, pair.b, c.len, 109, 1, 1, 512);
    Target t(pair.b, c.len + 512);
    const uint32_t victim = wire::psn_add(p.sq_psn_a, c.packet);
    pair.link.policy = [&](const WirePacket& w) {
      if (!w.is_request() || w.psn() != victim) return Fate::kDeliver;
      const wire::PacketView v = w.view();
      std::vector<uint8_t> payload(v.payload(), v.payload() + v.payload_len);
      if (c.empty)
        payload.clear();
      else
        payload.resize(payload.size() + c.resize_by, 0x5a);
      const auto bad = testing::with_payload(w.bytes, payload);
      pair.b.engine.receive(bad.data(), bad.size());
      return Fate::kDrop;
    };
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
    ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(2, m.recv_sges)), 0);
    SendWqe w = c.op == WrOpcode::kSend ? testing::send_wr(3, WrOpcode::kSend, m.send_sges)
                                        : testing::write_wr(3, m.send_sges, t.va(), t.rkey());
    ASSERT_EQ(testing::post(*pair.a.qp, w), 0);
    ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(4, WrOpcode::kSend, m.send_sges)), 0);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
    pair.run_for(5ms);
    ASSERT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{3, 4}));
    EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemInvReqErr);
    EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
    EXPECT_EQ(pair.a.state(), QpState::kErr);
    EXPECT_EQ(pair.b.state(), QpState::kErr);
    ASSERT_EQ(ids(pair.b.recv_wcs), (std::vector<uint64_t>{1, 2}));
    for (const Completion& r : pair.b.recv_wcs) EXPECT_NE(r.status, WcStatus::kSuccess);
    const auto acks = pair.acks_from(kLidB);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack_type(), wire::AckType::kNak);
    EXPECT_EQ(acks.back().ack_value(), uint8_t(wire::NakCode::kInvalidRequest));
    EXPECT_EQ(acks.back().psn(), victim);
  }
}

// --- stale and ghost responses (IBA 9.7.5.1.3) ---

TEST(RcProtocol, GivenAckForAPsnNotYetSentExpectIgnored) {
  EnginePair pair;
  Message m(pair.a, pair.b, 3 * 4096, 106);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(1, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket& w) { return w.is_ack() ? Fate::kDrop : Fate::kDeliver; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  pair.link.policy = nullptr;
  std::vector<uint8_t> ghost = pair.acks_from(kLidB).back().bytes;
  wire::Bth b = wire::Bth::from(ghost.data() + wire::Lrh::kSize);
  b.set_psn(wire::psn_add(b.psn(), 1000));
  b.to(ghost.data() + wire::Lrh::kSize);
  testing::reseal(ghost);
  pair.a.engine.receive(ghost.data(), ghost.size());
  pair.a.poll();
  EXPECT_TRUE(pair.a.send_wcs.empty());
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
}

/// An ACK or NAK from B made from one B sent: the same packet with `psn` and
/// `syndrome`.
std::vector<uint8_t> forged_response(const WirePacket& from_b, uint32_t psn, uint8_t syndrome) {
  std::vector<uint8_t> bytes = from_b.bytes;
  const size_t bth_at = wire::Lrh::kSize;
  wire::Bth b = wire::Bth::from(bytes.data() + bth_at);
  b.set_psn(psn);
  b.to(bytes.data() + bth_at);
  wire::Aeth a = wire::Aeth::from(bytes.data() + bth_at + wire::Bth::kSize);
  a.set_syndrome(syndrome);
  a.to(bytes.data() + bth_at + wire::Bth::kSize);
  testing::reseal(bytes);
  return bytes;
}

const uint8_t kSequenceNak = wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError);

TEST(RcProtocol, GivenStaleNakForAnAcknowledgedPsnExpectIgnoredAndNoRetryUsed) {
  // retry_cnt 0: a NAK taken as a retry would end the QP in error.
  ConnectParams p;
  p.retry_cnt = 0;
  EnginePair pair(p);
  Message m1(pair.a, pair.b, 3 * 4096, 107), m2(pair.a, pair.b, 2 * 4096, 108);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m1.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(12, m2.recv_sges)), 0);
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m1.send_sges)), 0);
  pair.link.deliver_all();
  pair.a.poll();
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  // The second message is on the wire when a NAK for a PSN of the first,
  // overtaken by the ACK that completed it, arrives.
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(2, WrOpcode::kSend, m2.send_sges)), 0);
  const std::vector<uint8_t> stale =
      forged_response(pair.acks_from(kLidB).back(), wire::psn_add(p.sq_psn_a, 1), kSequenceNak);
  pair.a.engine.receive(stale.data(), stale.size());
  ASSERT_TRUE(pair.run_until([&] { return pair.a.send_wcs.size() == 2; }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_EQ(pair.requests_from(kLidA).size(), 5u);  // nothing resent
  m2.expect_delivered();
}

TEST(RcProtocol, GivenSequenceNakDuplicatedOnTheWireExpectOneRetransmission) {
  // retry_cnt 1: the copy, taken as a second retry, would exhaust it.
  ConnectParams p;
  p.retry_cnt = 1;
  EnginePair pair(p);
  const uint32_t lost = wire::psn_add(p.sq_psn_a, 2);
  bool dropped = false;
  pair.link.policy = [&](const WirePacket& w) {
    if (w.is_request() && w.psn() == lost && !dropped) {
      dropped = true;
      return Fate::kDrop;
    }
    return w.is_ack() && w.ack_type() == wire::AckType::kNak ? Fate::kDuplicate : Fate::kDeliver;
  };
  Message m(pair.a, pair.b, 6 * 4096, 109);
  send_and_wait(pair, m);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  m.expect_delivered();
  const auto reqs = pair.requests_from(kLidA);
  EXPECT_EQ(
      std::count_if(reqs.begin(), reqs.end(), [&](const WirePacket& r) { return r.psn() == lost; }),
      2);
}

TEST(RcProtocol, GivenAckForPacketsSentBeforeATimeoutExpectItCompletesTheWr) {
  // 100 packets arrive, their ACKs are lost; the local ACK timeout resends
  // from the first, with a window halved. The ACK that B sent for all 100
  // then arrives late: it covers PSNs beyond those resent so far and still
  // counts (IBA 9.7.5.1.1: any PSN sent and not acknowledged).
  ConnectParams p;
  p.timeout = 10;  // about 4 ms
  EnginePair pair(p);
  Message m(pair.a, pair.b, 100 * 4096, 110);
  ASSERT_EQ(testing::post(*pair.b.qp, testing::recv_wr(11, m.recv_sges)), 0);
  pair.link.policy = [](const WirePacket& w) { return w.is_ack() ? Fate::kDrop : Fate::kDeliver; };
  ASSERT_EQ(testing::post(*pair.a.qp, testing::send_wr(1, WrOpcode::kSend, m.send_sges)), 0);
  pair.link.deliver_all();
  const WirePacket last_ack = pair.acks_from(kLidB).back();
  ASSERT_EQ(last_ack.psn(), wire::psn_add(p.sq_psn_a, 99));
  pair.link.policy = [](const WirePacket&) { return Fate::kDrop; };
  const size_t before = pair.requests_from(kLidA).size();
  ASSERT_TRUE(pair.run_until([&] { return pair.requests_from(kLidA).size() > before; }));
  const auto resent = pair.requests_from(kLidA).size() - before;
  EXPECT_LT(resent, 100u);  // a window, halved
  // The resend burst's last packet asks for an ACK.
  EXPECT_TRUE(pair.requests_from(kLidA).back().view().bth().ack_req());
  pair.link.discard_queued();
  pair.link.policy = nullptr;
  pair.a.engine.receive(last_ack.bytes.data(), last_ack.bytes.size());
  pair.a.poll();
  ASSERT_EQ(pair.a.send_wcs.size(), 1u);
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kSuccess);
  pair.run_for(10ms);
  EXPECT_EQ(pair.requests_from(kLidA).size(), before + resent);  // nothing more
  EXPECT_EQ(pair.a.state(), QpState::kRts);
}

// IBA 11.4.2.1: the completion an ACK produces overruns the send CQ; the
// QP goes to ERR and flushes its send queue right under the completer,
// which must not take the completed WR off the emptied queue a second time.
TEST(EngineRc, GivenCqOverrunByAckedWritesExpectQpInErrorStillTakingWrs) {
  ConnectParams p;
  p.cq_capacity = 2;
  EnginePair pair(p);
  testing::Region src = testing::register_region(pair.a.engine, 64, kAccessLocalWrite, 7);
  testing::Region dst =
      testing::register_region(pair.b.engine, 64, kAccessLocalWrite | kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(testing::post(*pair.a.qp, testing::write_wr(i, {src.sge(0, 8)}, dst.addr(), dst.key)),
              0);
  pair.link.deliver_all();
  ASSERT_TRUE(pair.a.send_cq.overrun());
  EXPECT_EQ(pair.a.state(), QpState::kErr);
  EXPECT_EQ(testing::post(*pair.a.qp, testing::send_wr(9, WrOpcode::kSend, {src.sge(0, 8)})), 0);
}

}  // namespace
}  // namespace ibemu::engine
