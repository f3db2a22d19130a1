// The MAD service of the emulated ports (emulator-daemon/mad_router) and the
// SA of ibemu-sm on top of it: agents, TransactionID routing, unmatched
// requests, timeouts and retries, SMPs from umad, PathRecords and multicast
// joins and leaves as a program sees them.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/mad/sa.h"
#include "emulator-daemon/mad_router.h"
#include "sm-lite/subnet_administrator.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using Clock = MadRouter::Clock;
using mad::Method;
using mad::SaAttr;

constexpr PortRef kSmPort{0, 1};
constexpr PortRef kClientPort{1, 1};
constexpr UmadClientId kSm = 1, kClient = 2;

AgentRegistration gsi(uint8_t mgmt_class, uint8_t version, std::vector<Method> serves = {}) {
  AgentRegistration r;
  r.qpn = 1;
  r.mgmt_class = mgmt_class;
  r.class_version = version;
  for (Method m : serves) r.method_mask[uint8_t(m) / 64] |= 1ull << (uint8_t(m) % 64);
  return r;
}

class MadServiceTest : public ::testing::Test {
 protected:
  Config cfg_ = testing::two_by_two();
  Subnet subnet_{cfg_};
  sm::FunctionTransport transport_{[this](const sm::MadBytes& m) -> std::optional<sm::MadBytes> {
    return subnet_.process_smp(kSmPort, m.data(), m.size());
  }};
  sm::SubnetManager sm_{transport_};
  std::vector<std::pair<UmadClientId, UmadMessage>> got_;
  MadRouter router_{subnet_,
                    [this](UmadClientId c, UmadMessage m) { got_.emplace_back(c, std::move(m)); }};
  Clock::time_point now_ = Clock::now();

  void SetUp() override { ASSERT_TRUE(sm_.sweep()); }

  uint16_t lid(PortRef p) const { return subnet_.port(p).lid; }

  uint32_t register_agent(UmadClientId c, PortRef p, const AgentRegistration& r) {
    uint32_t id = 99;
    EXPECT_EQ(router_.register_agent(c, p, r, &id), 0);
    return id;
  }

  // A umad write: header addressed to `dlid`, then the MAD.
  void send(UmadClientId c, uint32_t agent, uint16_t dlid, const std::vector<uint8_t>& mad,
            uint32_t timeout_ms = 0, uint32_t retries = 0) {
    ib_user_mad_hdr h{};
    h.id = agent;
    h.lid = htons(dlid);
    h.qpn = htonl(1);
    h.timeout_ms = timeout_ms;
    h.retries = retries;
    UmadMessage msg(sizeof h + mad.size());
    std::memcpy(msg.data(), &h, sizeof h);
    std::memcpy(msg.data() + sizeof h, mad.data(), mad.size());
    router_.send(c, msg.data(), msg.size(), now_);
  }

  static std::vector<uint8_t> request(uint8_t mgmt_class, uint8_t version, Method m, uint16_t attr,
                                      uint32_t tid) {
    std::vector<uint8_t> mad(mad::kMadSize, 0);
    mad[0] = 1;
    mad[1] = mgmt_class;
    mad[2] = version;
    mad[3] = uint8_t(m);
    mad::store_be64(mad.data() + 8, tid);
    mad::store_be16(mad.data() + 16, attr);
    return mad;
  }

  static ib_user_mad_hdr header(const UmadMessage& m) {
    ib_user_mad_hdr h;
    std::memcpy(&h, m.data(), sizeof h);
    return h;
  }
  static const uint8_t* mad_of(const UmadMessage& m) { return m.data() + sizeof(ib_user_mad_hdr); }
};

TEST_F(MadServiceTest, RequestReachesTheServingAgentAndItsResponseTheRequester) {
  const uint32_t server = register_agent(kSm, kSmPort, gsi(0x03, 2, {Method::kGet}));
  const uint32_t client = register_agent(kClient, kClientPort, gsi(0x03, 2));
  send(kClient, client, lid(kSmPort), request(0x03, 2, Method::kGet, 0x35, 0x1234), 100);
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kSm);
  const ib_user_mad_hdr h = header(got_[0].second);
  EXPECT_EQ(h.id, server);
  EXPECT_EQ(ntohs(h.lid), lid(kClientPort));
  EXPECT_EQ(ntohl(h.qpn), 1u);
  EXPECT_EQ(ntohl(h.qkey), mad::kQp1Qkey);
  // The MAD layer put its agent number into the TID's upper half.
  std::vector<uint8_t> resp(mad_of(got_[0].second), mad_of(got_[0].second) + mad::kMadSize);
  EXPECT_EQ(mad::load_be32(resp.data() + 12), 0x1234u);
  EXPECT_NE(mad::load_be32(resp.data() + 8), 0u);

  resp[3] = uint8_t(Method::kGetResp);
  send(kSm, server, lid(kClientPort), resp);
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[1].first, kClient);
  EXPECT_EQ(header(got_[1].second).id, client);
  EXPECT_EQ(header(got_[1].second).status, 0u);
  // The same response again matches nothing outstanding and is dropped.
  send(kSm, server, lid(kClientPort), resp);
  EXPECT_EQ(got_.size(), 2u);
  EXPECT_EQ(router_.counters().unsolicited_responses, 1u);
}

TEST_F(MadServiceTest, OneServerPerClassAndMethodOnAPort) {
  register_agent(kSm, kSmPort, gsi(0x03, 2, {Method::kGet}));
  uint32_t id;
  EXPECT_EQ(router_.register_agent(kClient, kSmPort, gsi(0x03, 2, {Method::kGet}), &id), EINVAL);
  EXPECT_EQ(router_.register_agent(kClient, kSmPort, gsi(0x03, 2, {Method::kSet}), &id), 0);
  EXPECT_EQ(router_.register_agent(kClient, kClientPort, gsi(0x03, 2, {Method::kGet}), &id), 0);
  AgentRegistration smp_on_qp1 = gsi(0x81, 1);
  EXPECT_EQ(router_.register_agent(kClient, kSmPort, smp_on_qp1, &id), EINVAL);
  EXPECT_EQ(router_.unregister_agent(kClient, 77), EINVAL);
}

TEST_F(MadServiceTest, GetNoAgentServesIsAnsweredUnsupported) {
  const uint32_t client = register_agent(kClient, kClientPort, gsi(0x04, 1));
  send(kClient, client, lid(kSmPort), request(0x04, 1, Method::kGet, 0x12, 7), 100);
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(header(got_[0].second).status, 0u);
  EXPECT_EQ(mad_of(got_[0].second)[3], uint8_t(Method::kGetResp));
  EXPECT_EQ(mad::load_be16(mad_of(got_[0].second) + 4),
            uint16_t(mad::MadStatus::kUnsupportedMethodAttr));
}

TEST_F(MadServiceTest, UnansweredRequestIsResentThenReturnedTimedOut) {
  const uint32_t server = register_agent(kSm, kSmPort, gsi(0x03, 2, {Method::kGet}));
  const uint32_t client = register_agent(kClient, kClientPort, gsi(0x03, 2));
  send(kClient, client, lid(kSmPort), request(0x03, 2, Method::kGet, 0x35, 5), 100, 2);
  ASSERT_EQ(got_.size(), 1u);
  router_.expire(now_ + std::chrono::milliseconds(99));
  EXPECT_EQ(got_.size(), 1u);
  router_.expire(now_ + std::chrono::milliseconds(100));  // first resend
  router_.expire(now_ + std::chrono::milliseconds(200));  // second resend
  ASSERT_EQ(got_.size(), 3u);
  EXPECT_EQ(got_[2].first, kSm);
  EXPECT_EQ(header(got_[2].second).id, server);
  router_.expire(now_ + std::chrono::milliseconds(300));
  ASSERT_EQ(got_.size(), 4u);
  EXPECT_EQ(got_[3].first, kClient);
  EXPECT_EQ(header(got_[3].second).status, uint32_t(ETIMEDOUT));
  EXPECT_FALSE(router_.next_deadline());
  EXPECT_EQ(router_.counters().timeouts, 1u);
}

TEST_F(MadServiceTest, UnreachableLidTimesOut) {
  const uint32_t client = register_agent(kClient, kClientPort, gsi(0x03, 2));
  send(kClient, client, 0x3333, request(0x03, 2, Method::kGet, 0x35, 5), 10);
  EXPECT_TRUE(got_.empty());
  router_.expire(now_ + std::chrono::milliseconds(10));
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(header(got_[0].second).status, uint32_t(ETIMEDOUT));
}

TEST_F(MadServiceTest, SmpFromUmadIsAnsweredByTheSma) {
  AgentRegistration smi;
  smi.qpn = 0;
  smi.mgmt_class = 0x01;
  smi.class_version = 1;
  const uint32_t agent = register_agent(kClient, kClientPort, smi);
  auto req = request(0x01, 1, Method::kGet, uint16_t(mad::AttrId::kNodeInfo), 9);
  ib_user_mad_hdr h{};
  h.id = agent;
  h.lid = htons(lid(kSmPort));
  h.timeout_ms = 100;
  UmadMessage msg(sizeof h + req.size());
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + sizeof h, req.data(), req.size());
  router_.send(kClient, msg.data(), msg.size(), now_);
  ASSERT_EQ(got_.size(), 1u);
  const uint8_t* resp = mad_of(got_[0].second);
  EXPECT_EQ(resp[3], uint8_t(Method::kGetResp));
  EXPECT_EQ(mad::load_be16(resp + 4), 0);
  mad::NodeInfo ni;
  std::memcpy(ni.bytes.data(), resp + 64, ni.bytes.size());
  EXPECT_EQ(ni.node_guid(), cfg_.devices[0].node_guid);
}

// Kernel mode: the kernel's MAD layer has the agents, the router only carries.
class KernelPortTest : public MadServiceTest {
 protected:
  struct Arrival {
    PortRef port;
    uint16_t slid;
    uint32_t src_qp, dst_qp;
    std::vector<uint8_t> mad;
  };
  std::vector<Arrival> arrived_;

  void SetUp() override {
    MadServiceTest::SetUp();
    router_.set_port_sink([this](PortRef port, uint16_t slid, uint32_t src_qp, uint32_t dst_qp,
                                 const uint8_t* mad, size_t len) {
      arrived_.push_back({port, slid, src_qp, dst_qp, std::vector<uint8_t>(mad, mad + len)});
    });
  }
};

TEST_F(KernelPortTest, GivenAGmpExpectItAtTheDestinationPortWithItsTransactionId) {
  auto req = request(0x32, 1, Method::kGet, 0x0001, 7);
  mad::store_be64(req.data() + 8, 0xabcd00000007ull);  // the kernel MAD layer's upper half
  router_.send_from_port(kClientPort, 1, lid(kSmPort), req.data(), req.size());
  ASSERT_EQ(arrived_.size(), 1u);
  EXPECT_EQ(arrived_[0].port, kSmPort);
  EXPECT_EQ(arrived_[0].slid, lid(kClientPort));
  EXPECT_EQ(arrived_[0].src_qp, 1u);
  EXPECT_EQ(arrived_[0].dst_qp, 1u);
  EXPECT_EQ(arrived_[0].mad, req);  // no agent rewrote it: the kernel's MAD layer owns the TID
  EXPECT_TRUE(got_.empty());
}

TEST_F(KernelPortTest, GivenAPmaQueryExpectTheLocalAgentsAnswerBackAtTheSender) {
  router_.set_local_agent(0x04, [](PortRef, const uint8_t* mad, size_t len) {
    std::vector<uint8_t> resp(mad, mad + len);
    resp[3] = uint8_t(Method::kGetResp);
    return std::optional<std::vector<uint8_t>>(resp);
  });
  auto req = request(0x04, 1, Method::kGet, 0x0012, 0x1234);
  router_.send_from_port(kClientPort, 1, lid(kSmPort), req.data(), req.size());
  ASSERT_EQ(arrived_.size(), 1u);
  EXPECT_EQ(arrived_[0].port, kClientPort);
  EXPECT_EQ(arrived_[0].slid, lid(kSmPort));
  EXPECT_EQ(arrived_[0].mad[3], uint8_t(Method::kGetResp));
}

TEST_F(KernelPortTest, GivenAnSmpFromQp0ExpectTheSmasResponseOnQp0) {
  auto req = request(0x01, 1, Method::kGet, uint16_t(mad::AttrId::kNodeInfo), 9);
  router_.send_from_port(kClientPort, 0, lid(kSmPort), req.data(), req.size());
  ASSERT_EQ(arrived_.size(), 1u);
  EXPECT_EQ(arrived_[0].port, kClientPort);
  EXPECT_EQ(arrived_[0].dst_qp, 0u);
  EXPECT_EQ(arrived_[0].mad[3], uint8_t(Method::kGetResp));
  mad::NodeInfo ni;
  std::memcpy(ni.bytes.data(), arrived_[0].mad.data() + 64, ni.bytes.size());
  EXPECT_EQ(ni.node_guid(), cfg_.devices[0].node_guid);
}

TEST_F(KernelPortTest, GivenASaRequestFromTheKernelExpectIbemuSmsSaToServeItAndItsAnswerBack) {
  // ibemu-sm's SA serves on the daemon's umad file; the kernel's ULPs (IPoIB
  // joining its broadcast group) send from their QP1.
  const uint32_t sa = register_agent(kSm, kSmPort, gsi(0x03, 2, {Method::kSet}));
  auto req = request(0x03, 2, Method::kSet, uint16_t(SaAttr::kMcMemberRecord), 5);
  mad::store_be64(req.data() + 8, 0x7700000005ull);
  router_.send_from_port(kClientPort, 1, lid(kSmPort), req.data(), req.size());
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kSm);
  EXPECT_TRUE(arrived_.empty());
  std::vector<uint8_t> resp(mad_of(got_[0].second), mad_of(got_[0].second) + mad::kMadSize);
  resp[3] = uint8_t(Method::kGetResp);
  ib_user_mad_hdr h = header(got_[0].second);
  send(kSm, sa, ntohs(h.lid), resp);
  ASSERT_EQ(arrived_.size(), 1u);
  EXPECT_EQ(arrived_[0].port, kClientPort);
  EXPECT_EQ(arrived_[0].dst_qp, 1u);
  EXPECT_EQ(mad::load_be64(arrived_[0].mad.data() + 8), 0x7700000005ull);
}

TEST_F(KernelPortTest, GivenAnUnknownLidOrABadQpExpectNothingDelivered) {
  auto req = request(0x32, 1, Method::kGet, 0x0001, 1);
  router_.send_from_port(kClientPort, 1, 0x3333, req.data(), req.size());
  router_.send_from_port(kClientPort, 2, lid(kSmPort), req.data(), req.size());
  router_.send_from_port(kClientPort, 1, lid(kSmPort), req.data(), 10);
  EXPECT_TRUE(arrived_.empty());
  EXPECT_EQ(router_.counters().unreachable, 1u);
  EXPECT_EQ(router_.counters().malformed, 2u);
}

// The SA itself, fed the requests a program sends.
class SaTest : public MadServiceTest {
 protected:
  sm::SubnetAdministrator sa_{sm_};

  std::vector<uint8_t> ask(Method m, SaAttr attr, uint64_t mask, const uint8_t* rec, size_t len,
                           PortRef from = kClientPort) {
    auto req = request(0x03, 2, m, uint16_t(attr), 1);
    mad::store_be64(req.data() + mad::kSaComponentMaskOffset, mask);
    if (rec) std::memcpy(req.data() + mad::kSaDataOffset, rec, len);
    auto resp = sa_.handle(req.data(), req.size(), lid(from));
    EXPECT_TRUE(resp);
    return resp.value_or(std::vector<uint8_t>{});
  }
  static uint16_t status(const std::vector<uint8_t>& r) { return mad::load_be16(r.data() + 4); }
  mad::McMemberRecord member(PortRef port, uint8_t last_mgid_byte) {
    mad::McMemberRecord r;
    r.mgid()[0] = 0xff;
    r.mgid()[1] = 0x12;
    r.mgid()[15] = last_mgid_byte;
    mad::store_be64(r.port_gid(), 0xfe80000000000000ull);
    mad::store_be64(r.port_gid() + 8, subnet_.port(port).port_guid);
    r.set_qkey(0x11111111);
    r.set_pkey(0xffff);
    r.set_join_state(mad::kJoinFullMember);
    return r;
  }
  static constexpr uint64_t kJoinMask =
      mad::mcmember_mask::kMgid | mad::mcmember_mask::kPortGid | mad::mcmember_mask::kQkey |
      mad::mcmember_mask::kPkey | mad::mcmember_mask::kSl | mad::mcmember_mask::kFlowLabel |
      mad::mcmember_mask::kTclass | mad::mcmember_mask::kJoinState;
};

TEST_F(SaTest, PathRecordBetweenTwoPortsByLid) {
  mad::PathRecord q;
  q.set_dlid(lid(kSmPort));
  auto r = ask(Method::kGet, SaAttr::kPathRecord, mad::path_mask::kDlid, q.bytes.data(), 64);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(r[3], uint8_t(Method::kGetResp));
  mad::PathRecord p;
  std::memcpy(p.bytes.data(), r.data() + mad::kSaDataOffset, 64);
  EXPECT_EQ(p.dlid(), lid(kSmPort));
  EXPECT_EQ(p.slid(), lid(kClientPort));
  EXPECT_EQ(p.mtu(), 5);  // 4096, both ports
  EXPECT_EQ(p.pkey(), 0xffff);
  EXPECT_EQ(mad::load_be64(p.dgid() + 8), subnet_.port(kSmPort).port_guid);
  EXPECT_TRUE(p.reversible());

  q.set_dlid(0x3333);
  r = ask(Method::kGet, SaAttr::kPathRecord, mad::path_mask::kDlid, q.bytes.data(), 64);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kNoRecords));
}

TEST_F(SaTest, PathRecordTableHasEveryDestination) {
  auto r = ask(Method::kGetTable, SaAttr::kPathRecord, 0, nullptr, 0);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(r[3], uint8_t(Method::kGetTableResp));
  EXPECT_EQ(mad::load_be16(r.data() + mad::kSaAttrOffsetOffset), 8);  // 64 bytes
  EXPECT_EQ(r.size(), mad::kSaDataOffset + 4 * 64);
}

TEST_F(SaTest, JoinCreatesAGroupAndLeavingLastMemberDeletesIt) {
  auto a = member(kClientPort, 5);
  auto r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, a.bytes.data(), 52);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(r[3], uint8_t(Method::kGetResp));
  mad::McMemberRecord g;
  std::memcpy(g.bytes.data(), r.data() + mad::kSaDataOffset, 52);
  EXPECT_GE(g.mlid(), 0xc000);
  EXPECT_EQ(g.qkey(), 0x11111111u);
  EXPECT_EQ(g.join_state(), mad::kJoinFullMember);

  auto b = member(kSmPort, 5);  // a second member gets the same MLID
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, b.bytes.data(), 52, kSmPort);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(mad::load_be16(r.data() + mad::kSaDataOffset + 36), g.mlid());
  b.set_qkey(0x22);  // joining with other parameters than the group's
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, b.bytes.data(), 52, kSmPort);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kReqInvalid));

  r = ask(Method::kGetTable, SaAttr::kMcMemberRecord, 0, nullptr, 0);
  EXPECT_EQ(r.size(), mad::kSaDataOffset + 2 * 56);

  const uint64_t leave =
      mad::mcmember_mask::kMgid | mad::mcmember_mask::kPortGid | mad::mcmember_mask::kJoinState;
  r = ask(Method::kDelete, SaAttr::kMcMemberRecord, leave, a.bytes.data(), 52);
  EXPECT_EQ(status(r), 0);
  EXPECT_EQ(r[3], uint8_t(Method::kDeleteResp));
  EXPECT_EQ(sa_.groups().size(), 1u);
  b.set_qkey(0x11111111);
  r = ask(Method::kDelete, SaAttr::kMcMemberRecord, leave, b.bytes.data(), 52, kSmPort);
  EXPECT_EQ(status(r), 0);
  EXPECT_TRUE(sa_.groups().empty());
  r = ask(Method::kDelete, SaAttr::kMcMemberRecord, leave, b.bytes.data(), 52, kSmPort);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kReqInvalid));
}

TEST_F(SaTest, JoinErrors) {
  auto a = member(kClientPort, 6);
  auto r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask & ~mad::mcmember_mask::kQkey,
               a.bytes.data(), 52);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kInsufficientComponents));
  a.mgid()[0] = 0xfe;  // not a multicast GID
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, a.bytes.data(), 52);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kInvalidGid));
  a = member(kClientPort, 6);
  a.port_gid()[15] ^= 0xff;  // no such port
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, a.bytes.data(), 52);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kInvalidGid));
  // An SA-assigned MGID when the request names none.
  a = member(kClientPort, 0);
  std::memset(a.mgid(), 0, 16);
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, a.bytes.data(), 52);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(r[mad::kSaDataOffset], 0xff);
}

TEST_F(SaTest, GivenIpoibsBroadcastJoinNamingOnlyMgidAndPkeyExpectTheGroupIpoibExpects) {
  // IPoIB joins its partition's broadcast group without the components that
  // create a group (the SM defines it, RFC 4391) and takes Q_Key and MTU
  // from the answer.
  auto a = member(kClientPort, 0xff);
  const uint8_t mgid[16] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0,    0,
                            0,    0,    0,    0,    0xff, 0xff, 0xff, 0xff};
  std::memcpy(a.mgid(), mgid, 16);
  a.set_qkey(0);
  const uint64_t ipoib_mask = mad::mcmember_mask::kMgid | mad::mcmember_mask::kPortGid |
                              mad::mcmember_mask::kPkey | mad::mcmember_mask::kJoinState;
  auto r = ask(Method::kSet, SaAttr::kMcMemberRecord, ipoib_mask, a.bytes.data(), 52);
  ASSERT_EQ(status(r), 0);
  mad::McMemberRecord g;
  std::memcpy(g.bytes.data(), r.data() + mad::kSaDataOffset, 52);
  EXPECT_EQ(g.qkey(), 0x0b1bu);
  EXPECT_EQ(g.pkey(), 0xffff);
  EXPECT_EQ(g.mtu(), 4);  // 2048, as OpenSM defines it, below the ports' 4096
  EXPECT_GE(g.mlid(), 0xc000);
  // The other port joins the same group.
  auto b = a;
  mad::store_be64(b.port_gid() + 8, subnet_.port(kSmPort).port_guid);
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, ipoib_mask, b.bytes.data(), 52, kSmPort);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(mad::load_be16(r.data() + mad::kSaDataOffset + 36), g.mlid());
  // Any other group still needs its creating components.
  a.mgid()[3] = 0x1c;
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, ipoib_mask, a.bytes.data(), 52);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kInsufficientComponents));
}

TEST_F(SaTest, GivenACreatingJoinSelectingMtuRateAndLifeTimeExpectTheGroupToHaveThem) {
  // IPoIB creates its other groups (all-hosts, IPv6 all-nodes, solicited
  // nodes) with the broadcast group's MTU, rate and packet lifetime, each
  // selected "exactly"; the kernel refuses an answer that differs.
  namespace mm = mad::mcmember_mask;
  const uint64_t create = kJoinMask | mm::kMtuSelector | mm::kMtu | mm::kRateSelector | mm::kRate |
                          mm::kPacketLifeTimeSelector | mm::kPacketLifeTime;
  auto a = member(kClientPort, 7);
  a.set_mtu_selector(2);
  a.set_mtu(4);  // 2048, below the ports' 4096
  a.set_rate_selector(2);
  a.set_rate(3);  // 10 Gb/s, below the ports' rate
  a.set_packet_life_time_selector(2);
  a.set_packet_life_time(18);
  auto r = ask(Method::kSet, SaAttr::kMcMemberRecord, create, a.bytes.data(), 52);
  ASSERT_EQ(status(r), 0);
  mad::McMemberRecord g;
  std::memcpy(g.bytes.data(), r.data() + mad::kSaDataOffset, 52);
  EXPECT_EQ(g.mtu(), 4);
  EXPECT_EQ(g.rate(), 3);
  EXPECT_EQ(g.packet_life_time(), 18);
  // Another port asking for a larger MTU than the group's is refused.
  auto b = member(kSmPort, 7);
  b.set_mtu_selector(2);
  b.set_mtu(5);
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask | mm::kMtuSelector | mm::kMtu,
          b.bytes.data(), 52, kSmPort);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kReqInvalid));
  b.set_mtu_selector(1);  // less than 4096: the group's 2048 does
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask | mm::kMtuSelector | mm::kMtu,
          b.bytes.data(), 52, kSmPort);
  EXPECT_EQ(status(r), 0);
  // A group no port can carry is not created.
  auto c = member(kClientPort, 8);
  c.set_mtu_selector(0);
  c.set_mtu(5);  // more than 4096
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask | mm::kMtuSelector | mm::kMtu,
          c.bytes.data(), 52);
  EXPECT_EQ(status(r), uint16_t(mad::SaStatus::kReqInvalid));
  // Without selectors the group gets the best the port offers.
  auto d = member(kClientPort, 9);
  r = ask(Method::kSet, SaAttr::kMcMemberRecord, kJoinMask, d.bytes.data(), 52);
  ASSERT_EQ(status(r), 0);
  std::memcpy(g.bytes.data(), r.data() + mad::kSaDataOffset, 52);
  EXPECT_EQ(g.mtu(), 5);
}

TEST_F(SaTest, NodeRecordsOnePerCaPortAndSwitch) {
  auto r = ask(Method::kGetTable, SaAttr::kNodeRecord, 0, nullptr, 0);
  ASSERT_EQ(status(r), 0);
  EXPECT_EQ(r.size(), mad::kSaDataOffset + 5 * mad::kNodeRecordSize);
  std::vector<uint8_t> q(8, 0);
  mad::store_be16(q.data(), lid(kClientPort));
  r = ask(Method::kGet, SaAttr::kNodeRecord, mad::node_mask::kLid, q.data(), q.size());
  ASSERT_EQ(status(r), 0);
  mad::NodeInfo ni;
  std::memcpy(ni.bytes.data(), r.data() + mad::kSaDataOffset + 4, ni.bytes.size());
  EXPECT_EQ(ni.node_guid(), cfg_.devices[1].node_guid);
  EXPECT_EQ(ni.port_guid(), subnet_.port(kClientPort).port_guid);
  EXPECT_EQ(ni.local_port_num(), 1);
}

TEST_F(SaTest, WrongVersionAndUnknownAttribute) {
  auto req = request(0x03, 1, Method::kGet, 0x35, 1);
  auto r = sa_.handle(req.data(), req.size(), lid(kClientPort));
  ASSERT_TRUE(r);
  EXPECT_EQ(status(*r), uint16_t(mad::MadStatus::kBadVersion));
  r = ask(Method::kGet, SaAttr(0x0099), 0, nullptr, 0);
  EXPECT_EQ(status(*r), uint16_t(mad::MadStatus::kUnsupportedMethodAttr));
}

}  // namespace
}  // namespace ibemu
