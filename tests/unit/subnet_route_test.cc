// How SMPs move through the emulated subnet: directed routes hop by hop
// (IBA 14.2.2, C14-9 outbound and C14-13 returning) and LID routes through
// the switch's forwarding table.
#include <gtest/gtest.h>

#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using mad::AttrId;
using mad::MadStatus;
using testing::dr_get;
using testing::dr_set;
using testing::send;

constexpr PortRef kSm{0, 1};

class RouteTest : public ::testing::Test {
 protected:
  Config cfg_ = testing::two_by_two();
  Subnet subnet_{cfg_};

  // Gives every CA port LID 10 + switch port, the switch LID 1, and programs
  // the LFT, by hand (no SM).
  void configure_lids() {
    auto give = [this](std::vector<uint8_t> path, uint32_t mod, uint16_t lid) {
      auto r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, mod, path));
      ASSERT_TRUE(r);
      mad::PortInfo pi = r->get_attr<mad::PortInfo>();
      pi.set_port_state(PortState::kNop);
      pi.set_port_physical_state(0);
      pi.set_lid(lid);
      ASSERT_EQ(send(subnet_, kSm, dr_set(AttrId::kPortInfo, mod, path, pi))->status(),
                MadStatus::kOk);
    };
    give({1}, 0, 1);
    for (uint8_t sp = 1; sp <= 4; ++sp) give({1, sp}, 0, uint16_t(10 + sp));
    mad::SwitchInfo si;
    si.set_linear_fdb_top(14);
    send(subnet_, kSm, dr_set(AttrId::kSwitchInfo, 0, {1}, si));
    mad::LinearForwardingTable lft;
    for (size_t i = 0; i < 64; ++i) lft.set_port(i, 0xff);
    lft.set_port(1, 0);
    for (uint8_t sp = 1; sp <= 4; ++sp) lft.set_port(10 + sp, sp);
    send(subnet_, kSm, dr_set(AttrId::kLinearForwardingTable, 0, {1}, lft));
  }
};

TEST_F(RouteTest, TwoHopsOutAndBack) {
  // SM on ibemu0/1 -> switch (in by port 1) -> out port 3 -> ibemu1/1.
  auto r = send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 3}, 99));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->tid(), 99u);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  const auto ni = r->get_attr<mad::NodeInfo>();
  EXPECT_EQ(ni.node_guid(), 0x0002c90300000200ull);
  EXPECT_EQ(ni.local_port_num(), 1);
  EXPECT_EQ(ni.port_guid(), 0x0002c90300000201ull);
  // The response is back at the SM: D set, hop pointer 0, the return path
  // holds each hop's ingress port (switch port 1, CA port 1), the initial
  // path is untouched.
  EXPECT_TRUE(r->direction());
  EXPECT_EQ(r->hop_pointer(), 0);
  EXPECT_EQ(r->hop_count(), 2);
  EXPECT_EQ(r->return_path(1), 1);
  EXPECT_EQ(r->return_path(2), 1);
  EXPECT_EQ(r->initial_path(1), 1);
  EXPECT_EQ(r->initial_path(2), 3);
}

TEST_F(RouteTest, ReturnPathRecordsIngressPorts) {
  // From ibemu1/2 (switch port 4) to ibemu0/2 (switch port 2).
  auto r = send(subnet_, PortRef{1, 2}, dr_get(AttrId::kNodeInfo, 0, {2, 2}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().node_guid(), 0x0002c90300000100ull);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().local_port_num(), 2);
  EXPECT_EQ(r->return_path(1), 4);
  EXPECT_EQ(r->return_path(2), 2);
  // A route back into the SM's own CA through its other port.
  r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, 0, {1, 2}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().local_port_num(), 2);
}

TEST_F(RouteTest, BadPathsAreDropped) {
  // The first hop must leave by the SM's own port (C14-9:1).
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {2})));
  // The switch has no port 9, nor can it send out of port 0 (C14-9:2).
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 9})));
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 0})));
  // A CA does not forward: a path through one is dropped there.
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 3, 1})));
  // Unreasonable hop pointers (C14-9:5) and counts.
  mad::Smp s = dr_get(AttrId::kNodeInfo, 0, {1});
  s.set_hop_pointer(1);
  EXPECT_FALSE(send(subnet_, kSm, s));
  s = dr_get(AttrId::kNodeInfo, 0, {1});
  s.set_hop_count(64);
  EXPECT_FALSE(send(subnet_, kSm, s));
  // An SMP that claims to be returning already.
  s = dr_get(AttrId::kNodeInfo, 0, {1});
  s.set_direction(true);
  EXPECT_FALSE(send(subnet_, kSm, s));
  // A path through a link that is down.
  subnet_.set_link_up(PortRef{1, 1}, false);
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 3})));
  EXPECT_TRUE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 4})));
  subnet_.set_link_up(PortRef{1, 1}, true);
  EXPECT_TRUE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 3})));
}

TEST_F(RouteTest, PermissiveAndNonPermissiveDrLids) {
  // Zero hops with a non-permissive DrDLID: a CA cannot LID-route it.
  mad::Smp s = dr_get(AttrId::kNodeInfo, 0, {});
  s.set_dr_dlid(5);
  EXPECT_FALSE(send(subnet_, kSm, s));
  // A non-permissive DrSLID: the response would have to be LID-routed from
  // the SM's CA, which cannot (C14-13:3).
  s = dr_get(AttrId::kNodeInfo, 0, {1});
  s.set_dr_slid(5);
  EXPECT_FALSE(send(subnet_, kSm, s));

  configure_lids();
  // Directed to the switch, then LID-routed to DrDLID 14 (ibemu1/2); the
  // response goes LID-routed back to the switch and then directed home.
  s = dr_get(AttrId::kNodeInfo, 0, {1});
  s.set_dr_dlid(14);
  auto r = send(subnet_, kSm, s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().node_guid(), 0x0002c90300000200ull);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().local_port_num(), 2);
  EXPECT_EQ(r->hop_pointer(), 0);
  // A DrDLID the LFT does not know is dropped.
  s.set_dr_dlid(40);
  EXPECT_FALSE(send(subnet_, kSm, s));
}

TEST_F(RouteTest, LidRoutedSmps) {
  mad::Smp s = mad::Smp::make_lid_routed(mad::Method::kGet, AttrId::kNodeInfo, 0, 5);
  // The permissive DLID reaches the link neighbour whatever the LIDs.
  auto r = send(subnet_, kSm, s, 0xffff);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().node_type(), mad::NodeType::kSwitch);
  EXPECT_EQ(r->mgmt_class(), mad::MgmtClass::kSubnLid);
  // Before LIDs and an LFT nothing else is reachable.
  EXPECT_FALSE(send(subnet_, kSm, s, 13));

  configure_lids();
  r = send(subnet_, kSm, s, 13);  // ibemu1/1
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().node_guid(), 0x0002c90300000200ull);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().local_port_num(), 1);
  r = send(subnet_, kSm, s, 1);  // the switch
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().node_type(), mad::NodeType::kSwitch);
  r = send(subnet_, kSm, s, 11);  // the SM's own port: loopback
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().local_port_num(), 1);
  EXPECT_FALSE(send(subnet_, kSm, s, 30));  // no such LID
  EXPECT_FALSE(send(subnet_, kSm, s, 0));
  EXPECT_EQ(subnet_.port_by_lid(14), std::optional<PortRef>(PortRef{1, 2}));
}

}  // namespace
}  // namespace ibemu
