// What a context shows of itself to `ibemu status`: the engine's snapshots of
// QPs, CQs and regions, and the JSON the provider writes and the daemon
// reads back (common/context_snapshot.h). Given objects in known states,
// expect their fields; given a page a program filled with garbage, expect
// no snapshot rather than garbage passed on.
#include "common/context_snapshot.h"

#include <gtest/gtest.h>

#include "tests/unit/engine_test_fixture.h"

namespace ibemu {
namespace {

using engine::QpState;
using engine::QpType;
using engine::testing::ConnectParams;
using engine::testing::EnginePair;
using engine::testing::kLidA;
using engine::testing::kLidB;
using engine::testing::kQpnA;
using engine::testing::kQpnB;
using engine::testing::Message;

TEST(QpSnapshot, GivenConnectedRcPairExpectStatePsnsAndPeer) {
  ConnectParams p;
  EnginePair pair(p);
  const engine::QpSnapshot a = pair.a.qp->snapshot();
  EXPECT_EQ(a.qpn, kQpnA);
  EXPECT_EQ(a.type, QpType::kRc);
  EXPECT_EQ(a.state, QpState::kRts);
  EXPECT_EQ(a.port, 1);
  EXPECT_EQ(a.sq_psn, p.sq_psn_a);
  EXPECT_EQ(a.rq_psn, p.sq_psn_b);
  EXPECT_EQ(a.dest_qpn, kQpnB);
  EXPECT_EQ(a.dlid, kLidB);
  EXPECT_EQ(a.send_wrs, 0u);
  EXPECT_EQ(a.unacked, 0u);
  EXPECT_EQ(a.max_send_wr, p.max_send_wr);
}

TEST(QpSnapshot, GivenMessagesExchangedExpectPsnsAdvancedOnBothSides) {
  ConnectParams p;
  EnginePair pair(p);
  Message m(pair.a, pair.b, 100, 7, 1, 1);
  ASSERT_EQ(engine::testing::post(*pair.b.qp, engine::testing::recv_wr(2, m.recv_sges)), 0);
  ASSERT_EQ(engine::testing::post(*pair.b.qp, engine::testing::recv_wr(3, m.recv_sges)), 0);
  EXPECT_EQ(pair.b.qp->snapshot().recv_wrs, 2u);
  ASSERT_EQ(engine::testing::post(*pair.a.qp,
                                  engine::testing::send_wr(1, engine::WrOpcode::kSend, m.send_sges,
                                                           engine::kSendSignaled)),
            0);
  ASSERT_TRUE(pair.run_until([&] { return !pair.a.send_wcs.empty(); }));
  const engine::QpSnapshot a = pair.a.qp->snapshot();
  const engine::QpSnapshot b = pair.b.qp->snapshot();
  EXPECT_EQ(a.sq_psn, p.sq_psn_a + 1);
  EXPECT_EQ(b.rq_psn, p.sq_psn_a + 1);
  EXPECT_EQ(a.send_wrs, 0u);
  EXPECT_EQ(b.recv_wrs, 1u);
}

TEST(QpSnapshot, GivenQpMovedToErrorExpectErrState) {
  EnginePair pair;
  engine::QpAttr at;
  at.qp_state = QpState::kErr;
  ASSERT_EQ(pair.a.qp->modify(at, engine::kQpState), 0);
  EXPECT_EQ(pair.a.qp->snapshot().state, QpState::kErr);
}

TEST(HcaEngineSnapshot, GivenCqNumbersExpectQpsNameTheirCqs) {
  EnginePair pair;
  pair.a.create_qp(kQpnA + 100, ConnectParams{});
  size_t total = 0;
  auto qps = pair.a.engine.qp_snapshots(
      1, [&](const engine::CompletionQueue* cq) { return cq == &pair.a.send_cq ? 5u : 6u; },
      &total);
  EXPECT_EQ(total, 2u);
  ASSERT_EQ(qps.size(), 1u);  // the limit
  EXPECT_EQ(qps[0].qpn, kQpnA);
  EXPECT_EQ(qps[0].send_cq, 5u);
  EXPECT_EQ(qps[0].recv_cq, 6u);
}

ContextSnapshot sample() {
  ContextSnapshot s;
  engine::QpSnapshot q;
  q.qpn = 0x11;
  q.type = QpType::kXrcSend;
  q.state = QpState::kSqe;
  q.port = 2;
  q.sq_psn = 0xabcdef;
  q.rq_psn = 0x123456;
  q.dest_qpn = 0x22;
  q.dlid = 3;
  q.send_wrs = 4;
  q.recv_wrs = 5;
  q.max_send_wr = 64;
  q.max_recv_wr = 128;
  q.unacked = 6;
  q.send_cq = 1;
  q.recv_cq = 2;
  s.qps.push_back(q);
  s.cqs.push_back({1, 256, 3, true});
  s.mrs.push_back({0x1234, 0x1234, 1, 0x7f0000001000, 65536, 7, true});
  s.qps_total = 1;
  s.cqs_total = 1;
  s.mrs_total = 9;
  return s;
}

TEST(ContextSnapshotJson, GivenSnapshotExpectRoundTripKeepsEveryField) {
  const ContextSnapshot s = sample();
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j["qps"][0]["type"], "XRC_SEND");
  EXPECT_EQ(j["qps"][0]["state"], "SQE");
  auto back = context_snapshot_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back);
  EXPECT_EQ(to_json(*back), j);
  EXPECT_EQ(back->mrs_total, 9u);
}

TEST(ContextSnapshotJson, GivenEveryQpTypeExpectItsVerbsName) {
  EXPECT_STREQ(qp_type_name(QpType::kRc), "RC");
  EXPECT_STREQ(qp_type_name(QpType::kUc), "UC");
  EXPECT_STREQ(qp_type_name(QpType::kUd), "UD");
  EXPECT_STREQ(qp_type_name(QpType::kXrcRecv), "XRC_RECV");
  EXPECT_STREQ(qp_type_name(QpType::kDci), "DCI");
  EXPECT_STREQ(qp_type_name(QpType::kDct), "DCT");
}

TEST(ContextSnapshotJson, GivenMalformedFieldsExpectNoSnapshot) {
  const nlohmann::json good = to_json(sample());
  auto with = [&](const char* list, const char* key, nlohmann::json value) {
    nlohmann::json j = good;
    j[list][0][key] = std::move(value);
    return context_snapshot_from_json(j);
  };
  EXPECT_FALSE(with("qps", "state", "HALF_OPEN"));
  EXPECT_FALSE(with("qps", "type", 2));
  EXPECT_FALSE(with("qps", "port", 300));   // out of uint8_t: not wrapped
  EXPECT_FALSE(with("qps", "sq_psn", -1));  // negative
  EXPECT_FALSE(with("qps", "dlid", 1.5));   // not an integer
  EXPECT_FALSE(with("cqs", "overrun", "yes"));
  EXPECT_FALSE(with("mrs", "lkey", nullptr));
  nlohmann::json missing = good;
  missing["qps"][0].erase("rq_psn");
  EXPECT_FALSE(context_snapshot_from_json(missing));
  EXPECT_FALSE(context_snapshot_from_json(nlohmann::json::array()));
  EXPECT_FALSE(context_snapshot_from_json(nlohmann::json{{"qps", "many"}}));
}

TEST(ContextSnapshotJson, GivenTooManyEntriesExpectListCutAndTotalKept) {
  ContextSnapshot s = sample();
  s.cqs.assign(ContextSnapshot::kMaxListed + 10, s.cqs[0]);
  s.cqs_total = 3;  // a total below the list: the list wins
  auto back = context_snapshot_from_json(to_json(s));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->cqs.size(), ContextSnapshot::kMaxListed);
  EXPECT_EQ(back->cqs_total, ContextSnapshot::kMaxListed);
}

}  // namespace
}  // namespace ibemu
