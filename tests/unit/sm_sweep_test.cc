// ibemu-sm against an in-process subnet: a sweep brings every port Active
// with distinct LIDs, the switch forwards to each of them, a second SM keeps
// the LIDs, and the periodic check notices links that go and come back.
#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <set>

#include "sm-lite/control_transport.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using mad::AttrId;
using sm::MadBytes;

class SmTest : public ::testing::Test {
 protected:
  Config cfg_ = testing::two_by_two();
  Subnet subnet_{cfg_};
  std::vector<std::string> log_;
  int sent_ = 0;

  sm::FunctionTransport transport(PortRef at, int drop_every = 0) {
    return sm::FunctionTransport(
        [this, at, drop_every](const MadBytes& m) -> std::optional<MadBytes> {
          ++sent_;
          if (drop_every && sent_ % drop_every == 0) return std::nullopt;
          return subnet_.process_smp(at, m.data(), m.size());
        });
  }
  sm::SubnetManager::Log logger() {
    return [this](const std::string& line) { log_.push_back(line); };
  }

  // Every port Active with a distinct LID and `sm_lid` as SM LID, and the
  // switch forwarding each LID to the port cabled to its owner.
  void expect_configured(uint16_t sm_lid) {
    std::set<uint16_t> lids;
    const auto ports = subnet_.ports();
    for (size_t i = 0; i < ports.size(); ++i) {
      const PortAttributes a = subnet_.port(ports[i]);
      EXPECT_EQ(a.state, PortState::kActive);
      EXPECT_TRUE(mad::is_unicast_lid(a.lid));
      EXPECT_TRUE(lids.insert(a.lid).second) << "duplicate LID " << a.lid;
      EXPECT_EQ(a.sm_lid, sm_lid);
      EXPECT_EQ(a.lmc, 0);
      EXPECT_EQ(a.neighbor_mtu, 5);
      EXPECT_EQ(subnet_.switch_lft(a.lid), i + 1) << "LID " << a.lid;
      EXPECT_EQ(subnet_.port_by_lid(a.lid), std::optional<PortRef>(ports[i]));
    }
    const uint16_t sw = subnet_.switch_lid();
    EXPECT_TRUE(mad::is_unicast_lid(sw));
    EXPECT_TRUE(lids.insert(sw).second);
    EXPECT_EQ(subnet_.switch_lft(sw), 0);
    const auto j = subnet_.describe();
    for (const auto& p : j["switch"]["ports"]) EXPECT_EQ(p["state"], "Active");
    EXPECT_EQ(j["switch"]["sm_lid"], sm_lid);
    EXPECT_EQ(j["switch"]["linear_fdb_top"], *lids.rbegin());
  }
};

TEST_F(SmTest, SweepBringsEveryPortActive) {
  auto t = transport(PortRef{0, 1});
  sm::SubnetManager sm(t, logger());
  ASSERT_TRUE(sm.sweep());
  EXPECT_EQ(sm.nodes().size(), 3u);  // two CAs and the switch
  EXPECT_EQ(sm.endpoints().size(), 5u);
  EXPECT_EQ(sm.sm_lid(), subnet_.port(PortRef{0, 1}).lid);
  expect_configured(sm.sm_lid());
  EXPECT_FALSE(log_.empty());

  // Data now flows by LID: a LID-routed SMP reaches every port.
  for (const PortRef& p : subnet_.ports()) {
    mad::Smp s = mad::Smp::make_lid_routed(mad::Method::kGet, AttrId::kNodeInfo, 0, 1);
    auto r = testing::send(subnet_, PortRef{0, 1}, s, subnet_.port(p).lid);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->get_attr<mad::NodeInfo>().port_guid(), subnet_.port(p).port_guid);
  }
  // Nothing changed since: the light check is quiet, and polling does not sweep.
  EXPECT_FALSE(sm.changed());
  sm.poll();
  EXPECT_EQ(sm.sweeps(), 1);
}

TEST_F(SmTest, ASecondSmKeepsTheLids) {
  {
    auto t = transport(PortRef{0, 1});
    sm::SubnetManager first(t, logger());
    ASSERT_TRUE(first.sweep());
  }
  std::vector<PortAttributes> before;
  for (const PortRef& p : subnet_.ports()) before.push_back(subnet_.port(p));
  const uint16_t switch_lid = subnet_.switch_lid();

  // The first SM is gone: nothing changed on any port.
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(subnet_.port(subnet_.ports()[i]), before[i]);

  // A new SM on another port takes over: same LIDs, its own LID as SM LID.
  auto t = transport(PortRef{1, 2});
  sm::SubnetManager second(t, logger());
  ASSERT_TRUE(second.sweep());
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_EQ(subnet_.port(subnet_.ports()[i]).lid, before[i].lid);
  EXPECT_EQ(subnet_.switch_lid(), switch_lid);
  EXPECT_EQ(second.sm_lid(), before[3].lid);
  expect_configured(second.sm_lid());
}

TEST_F(SmTest, ExistingLidsAreKeptAndDuplicatesResolved) {
  // Before any SM, ibemu1/1 and ibemu1/2 both claim LID 40.
  for (uint8_t sp : {3, 4}) {
    auto r = testing::send(subnet_, PortRef{0, 1}, testing::dr_get(AttrId::kPortInfo, 0, {1, sp}));
    mad::PortInfo pi = r->get_attr<mad::PortInfo>();
    pi.set_port_state(PortState::kNop);
    pi.set_port_physical_state(0);
    pi.set_lid(40);
    testing::send(subnet_, PortRef{0, 1}, testing::dr_set(AttrId::kPortInfo, 0, {1, sp}, pi));
  }
  auto t = transport(PortRef{0, 1});
  sm::SubnetManager sm(t, logger());
  ASSERT_TRUE(sm.sweep());
  EXPECT_EQ(subnet_.port(PortRef{1, 1}).lid, 40);
  EXPECT_NE(subnet_.port(PortRef{1, 2}).lid, 40);
  expect_configured(sm.sm_lid());
}

TEST_F(SmTest, LinkFailureIsNoticedAndRepaired) {
  auto t = transport(PortRef{0, 1});
  sm::SubnetManager sm(t, logger());
  ASSERT_TRUE(sm.sweep());
  const uint16_t lid = subnet_.port(PortRef{1, 1}).lid;

  subnet_.set_link_up(PortRef{1, 1}, false);
  EXPECT_EQ(subnet_.port(PortRef{1, 1}).state, PortState::kDown);
  EXPECT_TRUE(sm.changed());
  sm.poll();  // re-sweeps; the unplugged port is simply not found
  EXPECT_EQ(sm.sweeps(), 2);
  EXPECT_EQ(sm.endpoints().size(), 4u);

  // Plugged back: the link trains to Init with its old LID; the next poll
  // brings it back to Active without renumbering.
  subnet_.set_link_up(PortRef{1, 1}, true);
  EXPECT_EQ(subnet_.port(PortRef{1, 1}).state, PortState::kInit);
  sm.poll();
  EXPECT_EQ(sm.sweeps(), 3);
  EXPECT_EQ(subnet_.port(PortRef{1, 1}).lid, lid);
  expect_configured(sm.sm_lid());
}

TEST_F(SmTest, OccasionalLossIsRetried) {
  auto t = transport(PortRef{0, 1}, /*drop_every=*/7);
  sm::SubnetManager sm(t, logger());
  EXPECT_TRUE(sm.sweep());
  expect_configured(sm.sm_lid());
}

TEST_F(SmTest, HeavyLossConvergesOverPolls) {
  std::mt19937_64 rng(11);
  sm::FunctionTransport lossy([&](const MadBytes& m) -> std::optional<MadBytes> {
    if (rng() % 10 < 3) return std::nullopt;  // 30 % of requests lost
    auto r = subnet_.process_smp(PortRef{0, 1}, m.data(), m.size());
    if (rng() % 10 < 1) return std::nullopt;  // and 10 % of responses
    return r;
  });
  sm::SubnetManager sm(lossy, logger());
  for (int i = 0; i < 40 && !(sm.last_sweep_ok() && !sm.changed()); ++i) sm.poll();
  EXPECT_TRUE(sm.last_sweep_ok());
  EXPECT_GT(sm.sweeps(), 1);  // the loss did cost sweeps
  expect_configured(sm.sm_lid());
}

TEST_F(SmTest, NoResponseMeansNoSubnet) {
  sm::FunctionTransport dead([](const MadBytes&) { return std::nullopt; });
  sm::SubnetManager sm(dead, logger());
  EXPECT_FALSE(sm.sweep());
  for (const PortRef& p : subnet_.ports()) EXPECT_EQ(subnet_.port(p).state, PortState::kInit);
}

TEST_F(SmTest, GarbageResponsesAreIgnored) {
  std::mt19937_64 rng(5);
  sm::FunctionTransport junk([&rng](const MadBytes& req) -> std::optional<MadBytes> {
    MadBytes out;
    for (auto& b : out) b = uint8_t(rng());
    if (rng() % 2) std::copy(req.begin(), req.begin() + 24, out.begin());  // plausible header
    out[3] = 0x81;
    return out;
  });
  sm::SubnetManager sm(junk, logger());
  for (int i = 0; i < 50; ++i) sm.sweep();
  SUCCEED();
}

TEST(SmHex, RoundTrip) {
  MadBytes m{};
  for (size_t i = 0; i < m.size(); ++i) m[i] = uint8_t(i * 7);
  const std::string hex = sm::mad_to_hex(m);
  EXPECT_EQ(hex.size(), 512u);
  EXPECT_EQ(hex.substr(0, 6), "00070e");
  EXPECT_EQ(sm::mad_from_hex(hex), std::optional<MadBytes>(m));
  EXPECT_FALSE(sm::mad_from_hex(hex.substr(1)));
  EXPECT_FALSE(sm::mad_from_hex(std::string(512, 'g')));
  std::string upper = hex;
  for (auto& c : upper) c = char(std::toupper(c));
  EXPECT_EQ(sm::mad_from_hex(upper), std::optional<MadBytes>(m));
}

}  // namespace
}  // namespace ibemu
