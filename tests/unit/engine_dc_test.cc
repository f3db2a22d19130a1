// The Dynamically Connected transport (docs/dc.md): one DCI reaching DCTs on
// several HCAs, each WR naming its target; given lost packets, wrong keys,
// missing or destroyed targets and a DCI brought back from the error state,
// expect the completions a ConnectX gives and data exactly where it belongs.
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu::engine {
namespace {

using namespace testing;

constexpr uint64_t kKey = 0x1ee7c0ffee;
constexpr uint16_t kLidC = 3;
constexpr uint64_t kGuidC = 0x0002c90300000301ull;

// A DCT on `e`'s HCA, on its own SRQ, in RTR.
struct Dct {
  Dct(Endpoint& e, uint32_t qpn, uint64_t key = kKey,
      uint32_t access = kRemote | kAccessRemoteAtomic)
      : srq(64, 4, nullptr) {
    QpInit init;
    init.type = QpType::kDct;
    init.qpn = qpn;
    init.pd = kPd;
    init.send_cq = &e.send_cq;
    init.recv_cq = &e.recv_cq;
    init.srq = &srq;
    init.max_recv_sge = 4;
    init.dct_access_key = key;
    qp = e.engine.create_qp(init, [](uint32_t, QpEvent) {});
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags = access;
    EXPECT_EQ(qp->modify(a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), 0);
    a.qp_state = QpState::kRtr;
    a.ah.port_num = 1;  // a DCT's address vector names its port only
    a.path_mtu = 3;     // 1024: messages below span several packets
    a.min_rnr_timer = 1;
    EXPECT_EQ(qp->modify(a, kQpState | kQpAv | kQpPathMtu | kQpMinRnrTimer), 0);
  }
  void post_recv(uint64_t id, const Sge& sge) {
    RecvWqe w = recv_wr(id, {sge});
    int bad;
    ASSERT_EQ(srq.post(&w, 1, &bad), 0);
  }
  SharedReceiveQueue srq;
  std::shared_ptr<Qp> qp;
};

// RESET (or a new DCI) → INIT → RTR → RTS as DC programs do it: no access
// flags, an address vector naming the port only, sq_psn 0.
void bring_up_dci(Qp& qp, uint8_t timeout = 8, uint8_t retry_cnt = 7) {
  QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_EQ(qp.modify(a, kQpState), 0);
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  ASSERT_EQ(qp.modify(a, kQpState | kQpPkeyIndex | kQpPort), 0);
  a.qp_state = QpState::kRtr;
  a.ah.port_num = 1;
  a.path_mtu = 3;
  ASSERT_EQ(qp.modify(a, kQpState | kQpAv | kQpPathMtu), 0);
  a.qp_state = QpState::kRts;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  ASSERT_EQ(
      qp.modify(a, kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic),
      0);
}

std::shared_ptr<Qp> make_dci(Endpoint& e, uint32_t qpn, uint8_t timeout = 8,
                             uint8_t retry_cnt = 7) {
  QpInit init;
  init.type = QpType::kDci;
  init.qpn = qpn;
  init.pd = kPd;
  init.send_cq = &e.send_cq;
  init.recv_cq = &e.recv_cq;
  init.max_send_wr = 256;
  init.max_send_sge = DeviceLimits::kMaxSge;
  init.max_inline_data = DeviceLimits::kMaxInlineData;
  auto qp = e.engine.create_qp(init, [](uint32_t, QpEvent) {});
  bring_up_dci(*qp, timeout, retry_cnt);
  return qp;
}

// Copies into a registered region (its buffer must stay where it was registered).
void fill(Region& r, const std::vector<uint8_t>& data) {
  std::copy(data.begin(), data.end(), r.bytes.begin());
}

SendWqe to_dct(SendWqe w, uint16_t dlid, uint32_t dctn, uint64_t key = kKey) {
  w.av.dlid = dlid;
  w.av.port_num = 1;
  w.remote_qpn = dctn;
  w.dc_key = key;
  return w;
}

// A: the DCI's HCA; B and C: two target HCAs.
class EngineDc : public ::testing::Test {
 protected:
  EngineDc() : pair(), c(pair.link, kLidC, kGuidC, 0x33, ConnectParams{}, pair.clock) {
    pair.extra.push_back(&c);
  }
  bool run_until_sends(size_t n) {
    return pair.run_until([&] { return pair.a.send_wcs.size() >= n; });
  }
  EnginePair pair;
  Endpoint c;
};

TEST_F(EngineDc, GivenWritesInterleavedOverTwoTargetsExpectEachLandsAndCompletesInOrder) {
  Dct t1(pair.b, 0x101), t2(c, 0x201);
  auto dci = make_dci(pair.a, 0x55);
  std::vector<std::unique_ptr<Target>> targets;
  std::vector<std::vector<uint8_t>> data;
  std::vector<Region> sources;
  for (int i = 0; i < 8; ++i) {
    Endpoint& owner = i % 2 ? c : pair.b;
    data.push_back(pattern(3000 + i, i));
    targets.push_back(std::make_unique<Target>(owner, data.back().size()));
    sources.push_back(register_region(pair.a.engine, data.back().size(), kLocal));
    fill(sources.back(), data.back());
    SendWqe w = write_wr(i, {sources.back().sge(0, data.back().size())}, targets.back()->va(),
                         targets.back()->rkey());
    ASSERT_EQ(post(*dci, i % 2 ? to_dct(w, kLidC, 0x201) : to_dct(w, kLidB, 0x101)), 0);
  }
  ASSERT_TRUE(run_until_sends(8));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  EXPECT_EQ(ids(pair.a.send_wcs), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (int i = 0; i < 8; ++i) targets[i]->expect_holds(data[i]);
  EXPECT_EQ(t1.qp->state(), QpState::kRtr);
}

TEST_F(EngineDc, GivenSendReadAndAtomicsExpectTheTargetsSrqCompletionAndResults) {
  Dct t(pair.b, 0x101);
  auto dci = make_dci(pair.a, 0x55);
  Region rx = register_region(pair.b.engine, 4096, kRemote);
  t.post_recv(7, rx.sge(0, 4096));
  Region tx = register_region(pair.a.engine, 2500, kLocal);
  fill(tx, pattern(2500, 9));
  ASSERT_EQ(post(*dci, to_dct(send_wr(1, WrOpcode::kSend, {tx.sge(0, 2500)}), kLidB, 0x101)), 0);
  Target src(pair.b, 2000);
  std::copy_n(pattern(2000, 4).begin(), 2000, src.region.bytes.begin() + kGap);
  Region rd = register_region(pair.a.engine, 2000, kLocal);
  ASSERT_EQ(post(*dci, to_dct(read_wr(2, {rd.sge(0, 2000)}, src.va(), src.rkey()), kLidB, 0x101)),
            0);
  Region word = register_region(pair.b.engine, 8, kRemote | kAccessRemoteAtomic);
  uint64_t value = 40;
  std::memcpy(word.bytes.data(), &value, 8);
  Region orig = register_region(pair.a.engine, 8, kLocal);
  ASSERT_EQ(post(*dci, to_dct(atomic_wr(3, WrOpcode::kAtomicFetchAndAdd, {orig.sge(0, 8)},
                                        word.addr(), word.key, 2),
                              kLidB, 0x101)),
            0);
  ASSERT_TRUE(run_until_sends(3));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  ASSERT_TRUE(pair.run_until([&] { return !pair.b.recv_wcs.empty(); }));
  EXPECT_EQ(pair.b.recv_wcs[0].wr_id, 7u);
  EXPECT_EQ(pair.b.recv_wcs[0].byte_len, 2500u);
  EXPECT_EQ(pair.b.recv_wcs[0].src_qp, 0x55u) << "the DCI's number";
  EXPECT_EQ(pair.b.recv_wcs[0].qp_num, 0x101u);
  EXPECT_TRUE(std::equal(tx.bytes.begin(), tx.bytes.end(), rx.bytes.begin()));
  EXPECT_TRUE(std::equal(rd.bytes.begin(), rd.bytes.end(), pattern(2000, 4).begin()));
  std::memcpy(&value, word.bytes.data(), 8);
  EXPECT_EQ(value, 42u);
  std::memcpy(&value, orig.bytes.data(), 8);
  EXPECT_EQ(value, 40u);
}

// READ responses a DCT could not send at once (the link had no room) go to
// the DCI that asked, though another DCI's request was handled meanwhile.
TEST_F(EngineDc, GivenReadsOfTwoDcisQueuedBehindAFullLinkExpectEachDciItsOwnData) {
  Dct t(pair.b, 0x101);
  auto dci_a = make_dci(pair.a, 0x55);
  auto dci_c = make_dci(c, 0x66);
  constexpr uint32_t kLen = 6000;  // 6 responses at MTU 1024
  Target src_a(pair.b, kLen), src_c(pair.b, kLen);
  const std::vector<uint8_t> data_a = pattern(kLen, 1), data_c = pattern(kLen, 2);
  std::copy(data_a.begin(), data_a.end(), src_a.region.bytes.begin() + kGap);
  std::copy(data_c.begin(), data_c.end(), src_c.region.bytes.begin() + kGap);
  Region rd_a = register_region(pair.a.engine, kLen, kLocal);
  Region rd_c = register_region(c.engine, kLen, kLocal);
  ASSERT_EQ(
      post(*dci_a, to_dct(read_wr(1, {rd_a.sge(0, kLen)}, src_a.va(), src_a.rkey()), kLidB, 0x101)),
      0);
  ASSERT_EQ(
      post(*dci_c, to_dct(read_wr(2, {rd_c.sge(0, kLen)}, src_c.va(), src_c.rkey()), kLidB, 0x101)),
      0);
  pair.link.congested = true;
  pair.link.deliver_all();  // both requests reach the DCT; its responses wait
  for (int round = 0; round < 100 && (pair.a.send_wcs.empty() || c.send_wcs.empty()); ++round) {
    pair.link.end_congestion();
    pair.b.engine.link_ready();
    pair.link.congested = true;
    pair.link.deliver_all();
    pair.a.poll();
    c.poll();
  }
  pair.link.end_congestion();
  pair.b.engine.link_ready();
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty() && !c.send_wcs.empty(); }));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  expect_all(c.send_wcs, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(data_a.begin(), data_a.end(), rd_a.bytes.begin()));
  EXPECT_TRUE(std::equal(data_c.begin(), data_c.end(), rd_c.bytes.begin()));
  EXPECT_EQ(packets_from(pair, kLidA), 1u) << "DCI A asked once: no response went astray";
  EXPECT_EQ(packets_from(pair, kLidC), 1u) << "DCI C asked once: no response went astray";
}

TEST_F(EngineDc, GivenLostPacketsIncludingTheConnectingOneExpectEverythingDeliveredOnce) {
  Dct t(pair.b, 0x101);
  auto dci = make_dci(pair.a, 0x55);
  int requests = 0;
  pair.link.policy = [&](const WirePacket& p) {
    // Drop the first request (it opens the connection) and every fifth.
    if (!p.is_request()) return Fate::kDeliver;
    return requests++ % 5 == 0 ? Fate::kDrop : Fate::kDeliver;
  };
  Region rx = register_region(pair.b.engine, 8 * 4096, kRemote);
  for (int i = 0; i < 8; ++i) t.post_recv(i, rx.sge(i * 4096, 4096));
  std::vector<Region> tx;
  for (int i = 0; i < 8; ++i) {
    tx.push_back(register_region(pair.a.engine, 3000, kLocal));
    fill(tx.back(), pattern(3000, 100 + i));
    ASSERT_EQ(
        post(*dci, to_dct(send_wr(i, WrOpcode::kSend, {tx.back().sge(0, 3000)}), kLidB, 0x101)), 0);
  }
  ASSERT_TRUE(run_until_sends(8));
  expect_all(pair.a.send_wcs, WcStatus::kSuccess);
  ASSERT_TRUE(pair.run_until([&] { return pair.b.recv_wcs.size() >= 8; }));
  pair.run_for(std::chrono::milliseconds(20));
  ASSERT_EQ(pair.b.recv_wcs.size(), 8u) << "no message delivered twice";
  for (int i = 0; i < 8; ++i)
    EXPECT_TRUE(std::equal(tx[i].bytes.begin(), tx[i].bytes.end(), rx.bytes.begin() + i * 4096));
}

TEST_F(EngineDc, GivenWrongKeyExpectRemoteAccessErrorAndTheDctServingOthers) {
  Dct t(pair.b, 0x101);
  auto bad_dci = make_dci(pair.a, 0x55);
  auto good_dci = make_dci(pair.a, 0x56);
  Target dst(pair.b, 64);
  Region src = register_region(pair.a.engine, 64, kLocal);
  fill(src, pattern(64, 1));
  SendWqe w = write_wr(1, {src.sge(0, 64)}, dst.va(), dst.rkey());
  ASSERT_EQ(post(*bad_dci, to_dct(w, kLidB, 0x101, kKey + 1)), 0);
  ASSERT_EQ(post(*bad_dci, to_dct(w, kLidB, 0x101, kKey + 1)), 0);
  ASSERT_TRUE(run_until_sends(2));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(bad_dci->state(), QpState::kErr);
  dst.expect_untouched();
  EXPECT_EQ(t.qp->state(), QpState::kRtr);
  w.wr_id = 2;
  ASSERT_EQ(post(*good_dci, to_dct(w, kLidB, 0x101)), 0);
  ASSERT_TRUE(run_until_sends(3));
  EXPECT_EQ(pair.a.send_wcs[2].status, WcStatus::kSuccess);
  dst.expect_holds(src.bytes);
}

TEST_F(EngineDc, GivenMissingDctExpectRetryExceededThenRecoveryReachesALiveOne) {
  Dct t(pair.b, 0x101);
  auto dci = make_dci(pair.a, 0x55, /*timeout=*/2, /*retry_cnt=*/2);
  Target dst(pair.b, 64);
  Region src = register_region(pair.a.engine, 64, kLocal);
  fill(src, pattern(64, 3));
  SendWqe w = write_wr(1, {src.sge(0, 64)}, dst.va(), dst.rkey());
  ASSERT_EQ(post(*dci, to_dct(w, kLidB, 0x999)), 0);
  ASSERT_TRUE(run_until_sends(1));
  EXPECT_EQ(pair.a.send_wcs[0].status, WcStatus::kRetryExcErr);
  // ERR → RESET → INIT → RTR → RTS with the same sq_psn: a new connection.
  bring_up_dci(*dci);
  w.wr_id = 2;
  ASSERT_EQ(post(*dci, to_dct(w, kLidB, 0x101)), 0);
  ASSERT_TRUE(run_until_sends(2));
  EXPECT_EQ(pair.a.send_wcs[1].status, WcStatus::kSuccess);
  dst.expect_holds(src.bytes);
}

TEST_F(EngineDc, GivenDciResetAndReusedPsnsExpectTheTargetExecutesTheNewConnection) {
  Dct t(pair.b, 0x101);
  auto dci = make_dci(pair.a, 0x55);
  Target dst(pair.b, 64);
  for (uint64_t round = 0; round < 3; ++round) {
    Region src = register_region(pair.a.engine, 64, kLocal);
    fill(src, pattern(64, 10 + round));
    ASSERT_EQ(
        post(*dci, to_dct(write_wr(round, {src.sge(0, 64)}, dst.va(), dst.rkey()), kLidB, 0x101)),
        0);
    ASSERT_TRUE(run_until_sends(round + 1));
    EXPECT_EQ(pair.a.send_wcs[round].status, WcStatus::kSuccess);
    dst.expect_holds(src.bytes);
    // Back to RTS through RESET, sq_psn 0 every time: PSNs the target has seen.
    bring_up_dci(*dci);
  }
}

TEST_F(EngineDc, GivenConnectionExpectDcethOnRequestsAndConnectOnItsFirstPacketOnly) {
  Dct t(pair.b, 0x101);
  auto dci = make_dci(pair.a, 0x55);
  Target dst(pair.b, 5000);
  Region src = register_region(pair.a.engine, 5000, kLocal);
  ASSERT_EQ(post(*dci, to_dct(write_wr(1, {src.sge(0, 5000)}, dst.va(), dst.rkey()), kLidB, 0x101)),
            0);
  ASSERT_TRUE(run_until_sends(1));
  const auto requests = pair.requests_from(kLidA);
  ASSERT_EQ(requests.size(), 5u) << "5000 bytes at MTU 1024";
  for (size_t i = 0; i < requests.size(); ++i) {
    const wire::PacketView v = requests[i].view();
    EXPECT_EQ(v.info->transport, wire::Transport::kDc);
    EXPECT_EQ(v.dceth().access_key(), kKey);
    EXPECT_EQ(v.dceth().dci_qpn(), 0x55u);
    EXPECT_EQ(v.dceth().connect(), i == 0);
    EXPECT_EQ(v.dceth().connection(), requests[0].view().dceth().connection());
  }
  const auto acks = pair.acks_from(kLidB);
  ASSERT_FALSE(acks.empty());
  EXPECT_EQ(acks.back().opcode(), static_cast<uint8_t>(0xd1)) << "DC_ACKNOWLEDGE";
  EXPECT_EQ(acks.back().dest_qp, 0x55u);
}

TEST_F(EngineDc, GivenDcStateRulesExpectDctNeverInRtsAndNoSendQueue) {
  Dct t(pair.b, 0x101);
  QpAttr a;
  a.qp_state = QpState::kRts;
  EXPECT_EQ(t.qp->modify(a, kQpState | kQpSqPsn), EINVAL);
  Region src = register_region(pair.b.engine, 8, kLocal);
  EXPECT_EQ(post(*t.qp, to_dct(send_wr(1, WrOpcode::kSend, {src.sge(0, 8)}), kLidA, 1)), EINVAL);
  auto dci = make_dci(pair.a, 0x55);
  EXPECT_EQ(post(*dci, send_wr(1, WrOpcode::kSend, {src.sge(0, 8)})), EINVAL)
      << "a DCI's WR must name its target";
  EXPECT_EQ(post(*dci, recv_wr(1, {src.sge(0, 8)})), EINVAL) << "a DCI has no receive queue";
}

}  // namespace
}  // namespace ibemu::engine
