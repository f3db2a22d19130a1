// Several ibemu-sm instances on one in-process subnet (IBA 14.4.1): they
// negotiate one master by priority and GUID, a late SM stands by even when it
// outranks the master, and a standby takes over a master that is gone
// without renumbering the subnet.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <set>

#include "sm-lite/sm_negotiation.h"
#include "sm-lite/subnet_manager.h"
#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using mad::AttrId;
using mad::SmState;
using sm::MadBytes;

/// One SM attached to a CA port, as the daemon attaches it: the port gets
/// IsSM, its SMInfo says DISCOVERING with the SM's priority, and what the SM
/// publishes later replaces that.
struct AttachedSm {
  PortRef port;
  bool answer_sminfo = true;  // false: the SMInfo polls of the others are lost
  std::unique_ptr<sm::FunctionTransport> transport;
  std::unique_ptr<sm::SubnetManager> sm;
};

class SmFailoverTest : public ::testing::Test {
 protected:
  Config cfg_ = testing::two_by_two();
  Subnet subnet_{cfg_};
  std::deque<AttachedSm> sms_;  // deque: references stay valid
  std::vector<std::string> log_;

  AttachedSm& attach(PortRef port, uint8_t priority) {
    subnet_.set_is_sm(port, true);
    subnet_.set_sm_info(port, priority, SmState::kDiscovering);
    AttachedSm& a = sms_.emplace_back();
    a.port = port;
    a.transport = std::make_unique<sm::FunctionTransport>(
        [this, port](const MadBytes& m) -> std::optional<MadBytes> {
          // A lost SMInfo request stands for a master whose host went away.
          auto req = mad::Smp::from_bytes(m.data(), m.size());
          if (req && req->attr_id() == AttrId::kSmInfo) {
            for (const auto& other : sms_)
              if (!other.answer_sminfo && req->is_directed() && targets(*req, other.port))
                return std::nullopt;
          }
          return subnet_.process_smp(port, m.data(), m.size());
        });
    a.sm = std::make_unique<sm::SubnetManager>(*a.transport, [this, port](const std::string& l) {
      log_.push_back(fmt::format("[{}/{}] {}", port.device, port.port, l));
    });
    a.sm->set_priority(priority);
    a.sm->on_state_change(
        [this, port](uint8_t prio, SmState state) { subnet_.set_sm_info(port, prio, state); });
    return a;
  }

  // Whether a DR SMP's initial path ends at CA port `p`: through the switch,
  // whose port number of ibemu D port P is 2 * D + P.
  static bool targets(const mad::Smp& smp, PortRef p) {
    const int hops = smp.hop_count();
    return hops == 2 && smp.initial_path(2) == uint8_t(2 * p.device + p.port);
  }

  // Every port Active with its LID, `sm_lid` as SM LID everywhere.
  void expect_configured(uint16_t sm_lid) {
    std::set<uint16_t> lids;
    for (const PortRef& p : subnet_.ports()) {
      const PortAttributes a = subnet_.port(p);
      EXPECT_EQ(a.state, PortState::kActive) << p.device << "/" << p.port;
      EXPECT_TRUE(mad::is_unicast_lid(a.lid));
      EXPECT_TRUE(lids.insert(a.lid).second) << "duplicate LID " << a.lid;
      EXPECT_EQ(a.sm_lid, sm_lid) << p.device << "/" << p.port;
    }
    EXPECT_EQ(subnet_.describe()["switch"]["sm_lid"], sm_lid);
  }

  std::string log_text() const {
    std::string out;
    for (const auto& l : log_) out += l + "\n";
    return out;
  }

  bool logged(const std::string& needle) const {
    return std::any_of(log_.begin(), log_.end(),
                       [&](const std::string& l) { return l.find(needle) != std::string::npos; });
  }
};

constexpr PortRef kIbemu0Port1{0, 1};
constexpr PortRef kIbemu1Port1{1, 1};

TEST(SmNegotiation, RanksByPriorityThenLowerGuid) {
  EXPECT_TRUE(sm::outranks({5, 0x200}, {4, 0x100}));
  EXPECT_FALSE(sm::outranks({4, 0x100}, {5, 0x200}));
  EXPECT_TRUE(sm::outranks({3, 0x100}, {3, 0x200}));
  EXPECT_FALSE(sm::outranks({3, 0x200}, {3, 0x100}));
  EXPECT_FALSE(sm::outranks({3, 0x100}, {3, 0x100}));
}

TEST(SmNegotiation, WhomToFollow) {
  const sm::SmRank self{5, 0x300};
  const sm::PeerSm low_master{{1, 0x100}, SmState::kMaster, {1, 1}};
  const sm::PeerSm high_standby{{9, 0x200}, SmState::kStandby, {1, 2}};
  const sm::PeerSm low_discovering{{4, 0x050}, SmState::kDiscovering, {1, 3}};
  const sm::PeerSm high_inactive{{15, 0x010}, SmState::kNotActive, {1, 4}};

  // A master runs: a newcomer follows it whatever the priorities.
  auto f = sm::sm_to_follow(self, false, {high_standby, low_master});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank.guid, 0x100u);
  // ... but a master does not step down for a lower-ranked master.
  EXPECT_FALSE(sm::sm_to_follow(self, true, {low_master, high_standby}));
  EXPECT_TRUE(sm::sm_to_follow({0, 0x300}, true, {low_master}));
  // No master: the best-ranked contender that outranks this SM.
  f = sm::sm_to_follow(self, false, {low_discovering, high_standby});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->rank.guid, 0x200u);
  EXPECT_FALSE(sm::sm_to_follow(self, false, {low_discovering}));
  // NOTACTIVE SMs take no part.
  EXPECT_FALSE(sm::sm_to_follow(self, false, {high_inactive}));
  EXPECT_FALSE(sm::sm_to_follow(self, false, {}));
}

TEST(SmNegotiation, MasterIsLostAfterThreeMissedPollsInARow) {
  sm::MasterWatch w;
  w.follow(sm::PeerSm{{1, 0x100}, SmState::kMaster, {1, 1}});
  EXPECT_FALSE(w.record_poll(false));
  EXPECT_FALSE(w.record_poll(false));
  EXPECT_FALSE(w.record_poll(true));  // an answer starts the count again
  EXPECT_EQ(w.missed_polls(), 0);
  EXPECT_FALSE(w.record_poll(false));
  EXPECT_FALSE(w.record_poll(false));
  EXPECT_TRUE(w.record_poll(false));
  EXPECT_EQ(w.master().rank.guid, 0x100u);
}

TEST_F(SmFailoverTest, HigherPriorityBecomesMasterTheOtherStandsBy) {
  // Both attached (DISCOVERING) before either sweeps: they start together.
  AttachedSm& low = attach(kIbemu0Port1, 3);
  AttachedSm& high = attach(kIbemu1Port1, 7);

  ASSERT_TRUE(low.sm->sweep());
  EXPECT_EQ(low.sm->state(), SmState::kStandby) << log_text();
  EXPECT_EQ(low.sm->master().rank.guid, subnet_.port(kIbemu1Port1).port_guid);
  // The standby configured nothing: every port still Init without a LID.
  for (const PortRef& p : subnet_.ports()) {
    EXPECT_EQ(subnet_.port(p).state, PortState::kInit);
    EXPECT_EQ(subnet_.port(p).lid, 0);
  }
  EXPECT_EQ(subnet_.switch_lid(), 0);

  ASSERT_TRUE(high.sm->sweep());
  EXPECT_EQ(high.sm->state(), SmState::kMaster) << log_text();
  expect_configured(subnet_.port(kIbemu1Port1).lid);
  EXPECT_EQ(high.sm->sm_lid(), subnet_.port(kIbemu1Port1).lid);

  // The SMAs answer SMInfo with what each SM published.
  EXPECT_EQ(subnet_.sm_info(kIbemu1Port1).state, SmState::kMaster);
  EXPECT_EQ(subnet_.sm_info(kIbemu1Port1).priority, 7);
  EXPECT_EQ(subnet_.sm_info(kIbemu0Port1).state, SmState::kStandby);
  EXPECT_EQ(subnet_.sm_info(kIbemu0Port1).priority, 3);

  // The standby's polls find the master: it stays standby, the master's
  // light checks see nothing to do.
  for (int i = 0; i < 5; ++i) {
    low.sm->poll();
    high.sm->poll();
  }
  EXPECT_EQ(low.sm->state(), SmState::kStandby);
  EXPECT_EQ(high.sm->state(), SmState::kMaster);
  EXPECT_EQ(high.sm->sweeps(), 1);
  expect_configured(subnet_.port(kIbemu1Port1).lid);
}

TEST_F(SmFailoverTest, EqualPrioritiesLowerGuidWins) {
  // ibemu0/1's port GUID is lower than ibemu1/1's.
  ASSERT_LT(subnet_.port(kIbemu0Port1).port_guid, subnet_.port(kIbemu1Port1).port_guid);
  AttachedSm& b = attach(kIbemu1Port1, 4);
  AttachedSm& a = attach(kIbemu0Port1, 4);
  ASSERT_TRUE(b.sm->sweep());
  ASSERT_TRUE(a.sm->sweep());
  EXPECT_EQ(b.sm->state(), SmState::kStandby) << log_text();
  EXPECT_EQ(a.sm->state(), SmState::kMaster) << log_text();
  expect_configured(subnet_.port(kIbemu0Port1).lid);
  EXPECT_TRUE(logged("state DISCOVERING -> STANDBY")) << log_text();
  EXPECT_TRUE(logged("state DISCOVERING -> MASTER")) << log_text();
}

TEST_F(SmFailoverTest, ALateSmStandsByEvenWithHigherPriority) {
  AttachedSm& first = attach(kIbemu0Port1, 0);
  ASSERT_TRUE(first.sm->sweep());
  ASSERT_EQ(first.sm->state(), SmState::kMaster);
  const uint16_t master_lid = subnet_.port(kIbemu0Port1).lid;
  expect_configured(master_lid);

  AttachedSm& late = attach(kIbemu1Port1, 15);
  ASSERT_TRUE(late.sm->sweep());
  EXPECT_EQ(late.sm->state(), SmState::kStandby) << log_text();
  EXPECT_EQ(late.sm->master().rank.guid, subnet_.port(kIbemu0Port1).port_guid);
  // The master sees the higher-priority standby on its next sweep and stays.
  subnet_.set_link_up(PortRef{1, 2}, false);
  subnet_.set_link_up(PortRef{1, 2}, true);
  first.sm->poll();
  EXPECT_EQ(first.sm->sweeps(), 2);
  EXPECT_EQ(first.sm->state(), SmState::kMaster);
  late.sm->poll();
  EXPECT_EQ(late.sm->state(), SmState::kStandby);
  expect_configured(master_lid);
}

// The master's process ends: the daemon clears its port's IsSM, and its
// SMInfo is answered "unsupported" from then on.
TEST_F(SmFailoverTest, StandbyTakesOverWhenTheMasterStops) {
  AttachedSm& master = attach(kIbemu0Port1, 2);
  ASSERT_TRUE(master.sm->sweep());
  AttachedSm& standby = attach(kIbemu1Port1, 1);
  ASSERT_TRUE(standby.sm->sweep());
  ASSERT_EQ(standby.sm->state(), SmState::kStandby);

  std::vector<uint16_t> lids;
  for (const PortRef& p : subnet_.ports()) lids.push_back(subnet_.port(p).lid);
  const uint16_t switch_lid = subnet_.switch_lid();
  const uint16_t standby_lid = subnet_.port(kIbemu1Port1).lid;
  ASSERT_NE(standby_lid, subnet_.port(kIbemu0Port1).lid);

  const uint64_t master_guid = subnet_.port(kIbemu0Port1).port_guid;
  master.sm.reset();
  subnet_.set_is_sm(kIbemu0Port1, false);

  standby.sm->poll();
  EXPECT_EQ(standby.sm->state(), SmState::kStandby);
  standby.sm->poll();
  EXPECT_EQ(standby.sm->state(), SmState::kStandby);
  standby.sm->poll();  // the third missed poll
  EXPECT_EQ(standby.sm->state(), SmState::kMaster) << log_text();
  EXPECT_TRUE(logged(
      fmt::format("state STANDBY -> MASTER: master {:#018x} stopped answering", master_guid)))
      << log_text();

  // Nothing renumbered; every port names the new master's LID.
  for (size_t i = 0; i < lids.size(); ++i) EXPECT_EQ(subnet_.port(subnet_.ports()[i]).lid, lids[i]);
  EXPECT_EQ(subnet_.switch_lid(), switch_lid);
  EXPECT_EQ(standby.sm->sm_lid(), standby_lid);
  expect_configured(standby_lid);
  EXPECT_EQ(subnet_.sm_info(kIbemu1Port1).state, SmState::kMaster);

  // As master it now repairs the subnet: a link bounced comes back Active.
  subnet_.set_link_up(PortRef{0, 2}, false);
  standby.sm->poll();
  subnet_.set_link_up(PortRef{0, 2}, true);
  standby.sm->poll();
  expect_configured(standby_lid);
}

// The master's host goes away: its SMInfo is no longer answered at all.
TEST_F(SmFailoverTest, StandbyTakesOverWhenTheMasterNoLongerAnswers) {
  AttachedSm& master = attach(kIbemu0Port1, 9);
  AttachedSm& standby = attach(kIbemu1Port1, 1);
  ASSERT_TRUE(master.sm->sweep());
  ASSERT_TRUE(standby.sm->sweep());
  ASSERT_EQ(master.sm->state(), SmState::kMaster);
  ASSERT_EQ(standby.sm->state(), SmState::kStandby);
  const uint16_t standby_lid = subnet_.port(kIbemu1Port1).lid;

  // One lost poll, then an answer: no takeover.
  master.answer_sminfo = false;
  standby.sm->poll();
  master.answer_sminfo = true;
  standby.sm->poll();
  master.answer_sminfo = false;
  standby.sm->poll();
  standby.sm->poll();
  EXPECT_EQ(standby.sm->state(), SmState::kStandby) << log_text();
  standby.sm->poll();
  EXPECT_EQ(standby.sm->state(), SmState::kMaster) << log_text();
  expect_configured(standby_lid);
}

// Two standbys when the master stops: only the better-ranked one takes over;
// the other follows it.
TEST_F(SmFailoverTest, OfTwoStandbysTheBetterRankedTakesOver) {
  AttachedSm& master = attach(kIbemu0Port1, 9);
  ASSERT_TRUE(master.sm->sweep());
  AttachedSm& weak = attach(PortRef{0, 2}, 1);
  AttachedSm& strong = attach(kIbemu1Port1, 5);
  ASSERT_TRUE(weak.sm->sweep());
  ASSERT_TRUE(strong.sm->sweep());
  ASSERT_EQ(weak.sm->state(), SmState::kStandby);
  ASSERT_EQ(strong.sm->state(), SmState::kStandby);

  master.sm.reset();
  subnet_.set_is_sm(kIbemu0Port1, false);
  for (int i = 0; i < 3; ++i) {
    weak.sm->poll();  // the weaker one renegotiates first, and still defers
    strong.sm->poll();
  }
  EXPECT_EQ(weak.sm->state(), SmState::kStandby) << log_text();
  EXPECT_EQ(strong.sm->state(), SmState::kMaster) << log_text();
  // The weak one followed the strong one (DISCOVERING or STANDBY then) and
  // now finds it MASTER: it stays standby.
  for (int i = 0; i < 4; ++i) weak.sm->poll();
  EXPECT_EQ(weak.sm->state(), SmState::kStandby) << log_text();
  EXPECT_EQ(weak.sm->master().rank.guid, subnet_.port(kIbemu1Port1).port_guid);
  expect_configured(subnet_.port(kIbemu1Port1).lid);
}

// Two masters (two subnets joined): the lower-ranked one steps down when
// its sweep finds the other.
TEST_F(SmFailoverTest, OfTwoMastersTheLowerRankedStepsDown) {
  AttachedSm& a = attach(kIbemu0Port1, 2);
  ASSERT_TRUE(a.sm->sweep());
  ASSERT_EQ(a.sm->state(), SmState::kMaster);
  // A second SM made master while it could not see the first one.
  AttachedSm& b = attach(kIbemu1Port1, 6);
  a.answer_sminfo = false;
  ASSERT_TRUE(b.sm->sweep());
  ASSERT_EQ(b.sm->state(), SmState::kMaster);
  a.answer_sminfo = true;

  // b's sweep set its own SM LID everywhere: a notices and sweeps, finds b
  // (a master that outranks it) and stands by.
  a.sm->poll();
  EXPECT_EQ(a.sm->state(), SmState::kStandby) << log_text();
  EXPECT_TRUE(logged("state MASTER -> STANDBY")) << log_text();
  b.sm->poll();
  EXPECT_EQ(b.sm->state(), SmState::kMaster);
  expect_configured(subnet_.port(kIbemu1Port1).lid);
}

}  // namespace
}  // namespace ibemu
