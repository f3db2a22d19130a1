// Communication management between the host's rdma_cm programs: CM
// endpoints, listens by ServiceID, routing by communication ID, and the
// router's own answers (REJ reason 8, SIDR_REP status 1, DREP); the host's
// rdma_cm port space; the ports' addresses in the config.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/mad/cm.h"
#include "emulator-daemon/cm_port_space.h"
#include "emulator-daemon/ip_addresses.h"
#include "emulator-daemon/mad_router.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

namespace cm = mad::cm;
constexpr PortRef kSmPort{0, 1};
constexpr PortRef kServerPort{0, 1};
constexpr PortRef kClientPort{1, 1};
constexpr UmadClientId kServer = 1, kClient = 2, kOther = 3;
constexpr uint64_t kSid = 0x0000000001061234ull;  // RDMA_PS_TCP, port 0x1234

class CmRoutingTest : public ::testing::Test {
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

  void SetUp() override { ASSERT_TRUE(sm_.sweep()); }

  uint16_t lid(PortRef p) const { return subnet_.port(p).lid; }

  struct Endpoint {
    uint32_t agent = 0;
    uint32_t base = 0;
  };
  Endpoint endpoint(UmadClientId c, PortRef p) {
    Endpoint e;
    EXPECT_EQ(router_.register_cm_endpoint(c, p, &e.agent, &e.base), 0);
    return e;
  }

  void send(UmadClientId c, uint32_t agent, uint16_t dlid, const std::vector<uint8_t>& mad,
            uint32_t timeout_ms = 0) {
    ib_user_mad_hdr h{};
    h.id = agent;
    h.timeout_ms = timeout_ms;
    h.lid = htons(dlid);
    h.qpn = htonl(1);
    UmadMessage msg(sizeof h + mad.size());
    std::memcpy(msg.data(), &h, sizeof h);
    std::memcpy(msg.data() + sizeof h, mad.data(), mad.size());
    router_.send(c, msg.data(), msg.size(), MadRouter::Clock::now());
  }

  static const uint8_t* mad_of(const UmadMessage& m) { return m.data() + sizeof(ib_user_mad_hdr); }

  std::vector<uint8_t> req(uint32_t local_comm_id, uint64_t sid = kSid) {
    cm::Req r;
    r.set_local_comm_id(local_comm_id);
    r.set_service_id(sid);
    return cm::build_mad(cm::Attr::kReq, 77, r);
  }
};

TEST_F(CmRoutingTest, EndpointsGetDistinctCommunicationIdBlocks) {
  Endpoint a = endpoint(kServer, kServerPort), b = endpoint(kClient, kClientPort);
  EXPECT_NE(a.base, b.base);
  EXPECT_EQ(a.base & 0xffff, 0u);
  uint32_t agent, base;
  EXPECT_EQ(router_.register_cm_endpoint(kServer, kServerPort, &agent, &base), EINVAL);
}

TEST_F(CmRoutingTest, RequestGoesToTheListenerOfItsServiceId) {
  Endpoint server = endpoint(kServer, kServerPort), client = endpoint(kClient, kClientPort);
  ASSERT_EQ(router_.cm_listen(kServer, kSid, ~0ull, true), 0);
  send(kClient, client.agent, lid(kServerPort), req(client.base | 1));
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kServer);
  EXPECT_EQ(cm::attr_of(mad_of(got_[0].second)), cm::Attr::kReq);

  // The REP names the client's communication ID: it goes to the client.
  cm::Rep rep;
  rep.set_local_comm_id(server.base | 5);
  rep.set_remote_comm_id(client.base | 1);
  got_.clear();
  send(kServer, server.agent, lid(kClientPort), cm::build_mad(cm::Attr::kRep, 77, rep));
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kClient);
  EXPECT_EQ(cm::parse_message<cm::Rep>(mad_of(got_[0].second)).local_comm_id(), server.base | 5);
  EXPECT_EQ(router_.counters().cm_routed, 2u);
}

TEST_F(CmRoutingTest, RequestNobodyListensForIsRejectedWithInvalidServiceId) {
  Endpoint client = endpoint(kClient, kClientPort);
  endpoint(kServer, kServerPort);
  send(kClient, client.agent, lid(kServerPort), req(client.base | 9));
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kClient);
  const uint8_t* m = mad_of(got_[0].second);
  ASSERT_EQ(cm::attr_of(m), cm::Attr::kRej);
  auto rej = cm::parse_message<cm::Rej>(m);
  EXPECT_EQ(rej.reason(), uint16_t(cm::RejectReason::kInvalidServiceId));
  EXPECT_EQ(rej.remote_comm_id(), client.base | 9);
  EXPECT_EQ(rej.message_rejected(), uint8_t(cm::MessageKind::kReq));
  EXPECT_EQ(mad::load_be64(m + 8), 77u);
}

TEST_F(CmRoutingTest, SidrRequestNobodyListensForGetsServiceIdNotSupported) {
  Endpoint client = endpoint(kClient, kClientPort);
  cm::SidrReq r;
  r.set_request_id(client.base | 3);
  r.set_service_id(0x0000000001110007ull);
  send(kClient, client.agent, lid(kServerPort), cm::build_mad(cm::Attr::kSidrReq, 5, r));
  ASSERT_EQ(got_.size(), 1u);
  auto rep = cm::parse_message<cm::SidrRep>(mad_of(got_[0].second));
  EXPECT_EQ(rep.status(), uint8_t(cm::SidrStatus::kServiceIdNotSupported));
  EXPECT_EQ(rep.request_id(), client.base | 3);
  EXPECT_EQ(rep.service_id(), 0x0000000001110007ull);
}

TEST_F(CmRoutingTest, DreqForAGoneConnectionGetsADrep) {
  Endpoint client = endpoint(kClient, kClientPort);
  cm::Dreq d;
  d.set_local_comm_id(client.base | 2);
  d.set_remote_comm_id(0x7777aaaa);  // no endpoint has this block
  send(kClient, client.agent, lid(kServerPort), cm::build_mad(cm::Attr::kDreq, 9, d));
  ASSERT_EQ(got_.size(), 1u);
  const uint8_t* m = mad_of(got_[0].second);
  ASSERT_EQ(cm::attr_of(m), cm::Attr::kDrep);
  EXPECT_EQ(cm::parse_message<cm::Drep>(m).remote_comm_id(), client.base | 2);
  EXPECT_EQ(router_.counters().cm_unmatched, 1u);
}

TEST_F(CmRoutingTest, SidrReplyGoesToTheEndpointOfItsRequestId) {
  Endpoint server = endpoint(kServer, kServerPort), client = endpoint(kClient, kClientPort);
  cm::SidrRep rep;
  rep.set_request_id(client.base | 4);
  send(kServer, server.agent, lid(kClientPort), cm::build_mad(cm::Attr::kSidrRep, 6, rep));
  ASSERT_EQ(got_.size(), 1u);
  EXPECT_EQ(got_[0].first, kClient);
  EXPECT_EQ(router_.counters().cm_routed, 1u);
}

TEST_F(CmRoutingTest, MessagesForNoConnectionAreDroppedAndCounted) {
  Endpoint server = endpoint(kServer, kServerPort);
  endpoint(kClient, kClientPort);
  cm::Rtu rtu;
  rtu.set_local_comm_id(server.base | 1);
  rtu.set_remote_comm_id(0x7777aaaa);
  send(kServer, server.agent, lid(kClientPort), cm::build_mad(cm::Attr::kRtu, 8, rtu));
  EXPECT_TRUE(got_.empty());
  EXPECT_EQ(router_.counters().cm_unmatched, 1u);
  EXPECT_EQ(router_.counters().cm_routed, 0u);
}

TEST_F(CmRoutingTest, ClassPortInfoGetIsAnsweredUnsupported) {
  Endpoint client = endpoint(kClient, kClientPort);
  endpoint(kServer, kServerPort);
  std::vector<uint8_t> get(mad::kMadSize);
  get[0] = 1;  // base version
  get[1] = uint8_t(mad::MgmtClass::kCommMgt);
  get[2] = cm::kClassVersion;
  get[3] = uint8_t(mad::Method::kGet);
  mad::store_be16(get.data() + 16, 0x0001);  // ClassPortInfo
  send(kClient, client.agent, lid(kServerPort), get, /*timeout_ms=*/100);
  ASSERT_EQ(got_.size(), 1u);
  const uint8_t* m = mad_of(got_[0].second);
  EXPECT_EQ(m[3], uint8_t(mad::Method::kGetResp));
  EXPECT_EQ(mad::load_be16(m + 4), uint16_t(mad::MadStatus::kUnsupportedMethodAttr));
  EXPECT_EQ(router_.counters().unmatched_requests, 1u);
  EXPECT_EQ(router_.counters().cm_unmatched, 0u);
}

TEST_F(CmRoutingTest, ListensOnAPortAreExclusiveAndGoWithTheFile) {
  endpoint(kServer, kServerPort);
  endpoint(kOther, kServerPort);
  ASSERT_EQ(router_.cm_listen(kServer, kSid, ~0ull, true), 0);
  EXPECT_EQ(router_.cm_listen(kOther, kSid, ~0ull, true), EADDRINUSE);
  EXPECT_EQ(router_.cm_listen(kClient, kSid, ~0ull, true), EINVAL);  // no endpoint
  router_.drop_client(kServer);
  EXPECT_EQ(router_.cm_listen(kOther, kSid, ~0ull, true), 0);
}

TEST_F(CmRoutingTest, ServiceIdIsListenedOnlyBetweenListenAndUnlisten) {
  endpoint(kServer, kServerPort);
  EXPECT_FALSE(router_.cm_listening(kSid));
  ASSERT_EQ(router_.cm_listen(kServer, kSid, ~0ull, true), 0);
  EXPECT_TRUE(router_.cm_listening(kSid));
  EXPECT_FALSE(router_.cm_listening(kSid + 1));
  ASSERT_EQ(router_.cm_listen(kServer, kSid, ~0ull, false), 0);
  EXPECT_FALSE(router_.cm_listening(kSid));
}

TEST(CmPortSpaceTest, WildcardsConflictWithEverythingSpecificAddressesOnlyWithThemselves) {
  CmPortSpace ports;
  EXPECT_EQ(ports.bind(1, 0x106, "10.73.0.1", 7000), 7000);
  EXPECT_EQ(ports.bind(2, 0x106, "10.73.0.2", 7000), 7000);
  EXPECT_EQ(ports.bind(2, 0x106, "10.73.0.1", 7000), 0);
  EXPECT_EQ(ports.bind(3, 0x106, "0.0.0.0", 7000), 0);
  EXPECT_EQ(ports.bind(3, 0x111, "0.0.0.0", 7000), 7000);  // another port space
  const uint16_t ephemeral = ports.bind(3, 0x106, "0.0.0.0", 0);
  EXPECT_GE(ephemeral, CmPortSpace::kEphemeralFirst);
  EXPECT_NE(ports.bind(3, 0x106, "0.0.0.0", 0), ephemeral);
  ports.release_all(1);
  ports.release_all(2);
  EXPECT_EQ(ports.bind(4, 0x106, "0.0.0.0", 7000), 7000);
  EXPECT_TRUE(ports.unbind(4, 0x106, "0.0.0.0", 7000));
  EXPECT_FALSE(ports.unbind(4, 0x106, "0.0.0.0", 7000));
  EXPECT_TRUE(CmPortSpace::known_port_space(0x13f));
  EXPECT_FALSE(CmPortSpace::known_port_space(0x107));
}

TEST(PortAddressConfigTest, DefaultsCountPortsAndTheFabricAddressNamesTheHost) {
  Config plain = Config::parse("");
  IpAddresses a(plain);
  ASSERT_EQ(a.local().size(), 4u);
  EXPECT_EQ(a.local()[0].ipv4, "10.73.0.1");
  EXPECT_EQ(a.local()[3].ipv4, "10.73.0.4");
  EXPECT_EQ(a.local()[3].ipv4_prefix, 16);
  Config fabric = Config::parse(R"({"fabric": {"bind": "192.168.5.9"}})");
  EXPECT_EQ(IpAddresses(fabric).local()[1].ipv4, "10.73.9.2");
}

TEST(PortAddressConfigTest, GivenAddressesAreCheckedAndFound) {
  Config c = Config::parse(R"({"devices": [{"name": "ibemu0", "ports": 2,
      "ipv4": ["192.168.1.1/24", "192.168.1.2"], "ipv6": ["fd00::1", "fd00::2/48"]}]})");
  IpAddresses a(c);
  EXPECT_EQ(a.local()[0].ipv4_prefix, 24);
  EXPECT_EQ(a.local()[1].ipv6, "fd00::2");
  EXPECT_EQ(a.local()[1].ipv6_prefix, 48);
  auto gid_of = [](PortRef p) { return Gid{uint8_t(p.port)}; };
  auto found = a.find("fd00:0::2", gid_of);
  ASSERT_TRUE(found && found->local_port);
  EXPECT_EQ(found->local_port->port, 2);
  a.set_peer("1", {{"10.73.1.1", Gid{9}}});
  found = a.find("10.73.1.1", gid_of);
  ASSERT_TRUE(found);
  EXPECT_FALSE(found->local_port);
  EXPECT_EQ(found->gid[0], 9);
  a.set_peer("1", {});
  EXPECT_FALSE(a.find("10.73.1.1", gid_of));
  EXPECT_THROW(
      Config::parse(R"({"devices": [{"name": "ibemu0", "ports": 2, "ipv4": ["1.2.3.4"]}]})"),
      std::runtime_error);
  EXPECT_THROW(
      Config::parse(
          R"({"devices": [{"name": "ibemu0", "ports": 2, "ipv4": ["1.2.3.4", "1.2.3.4"]}]})"),
      std::runtime_error);
  EXPECT_THROW(
      Config::parse(R"({"devices": [{"name": "ibemu0", "ports": 1, "ipv4": ["1.2.3.400"]}]})"),
      std::runtime_error);
}

TEST(PortAddressConfigTest, AnAddressAnotherHostHasTooIsToldOnceWhileShared) {
  IpAddresses a(Config::parse(""));  // 10.73.0.1 .. 10.73.0.4
  auto shared = a.set_peer("1", {{"10.73.0.2", Gid{1}}, {"10.73.1.1", Gid{2}}});
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].ip, "10.73.0.2");
  EXPECT_EQ(shared[0].port.device, 0);
  EXPECT_EQ(shared[0].port.port, 2);
  // Every hello repeats the table: nothing new.
  EXPECT_TRUE(a.set_peer("1", {{"10.73.0.2", Gid{1}}}).empty());
  // Another host with it is told on its own.
  EXPECT_EQ(a.set_peer("2", {{"10.73.0.2", Gid{3}}}).size(), 1u);
  // No longer shared, then shared again: told again.
  EXPECT_TRUE(a.set_peer("1", {{"10.73.1.1", Gid{2}}}).empty());
  EXPECT_EQ(a.set_peer("1", {{"10.73.0.2", Gid{1}}}).size(), 1u);
  // A peer that went down and came back with it.
  EXPECT_TRUE(a.set_peer("1", {}).empty());
  EXPECT_EQ(a.set_peer("1", {{"10.73.0.2", Gid{1}}}).size(), 1u);
  // Two hosts of a fabric with the default addresses share none.
  IpAddresses h1(Config::parse(R"({"fabric": {"bind": "10.233.0.1"}})"));
  IpAddresses h2(Config::parse(R"({"fabric": {"bind": "10.233.0.2"}})"));
  std::map<std::string, Gid> announced;
  for (const PortAddress& p : h2.local()) announced[p.ipv4] = Gid{};
  EXPECT_TRUE(h1.set_peer("1", announced).empty());
  // Two that bind the wildcard address share all four.
  const Config wildcard = Config::parse(R"({"fabric": {"bind": "0.0.0.0"}})");
  IpAddresses w1(wildcard), w2(wildcard);
  std::map<std::string, Gid> same;
  for (const PortAddress& p : w2.local()) same[p.ipv4] = Gid{};
  EXPECT_EQ(w1.set_peer("1", same).size(), 4u);
}

}  // namespace
}  // namespace ibemu
