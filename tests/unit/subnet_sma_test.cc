// The SMAs of the emulated subnet: what they answer, what they let an SM set,
// and the state ports are in before any SM (IBA 14.2.5, 7.2).
#include <gtest/gtest.h>

#include "tests/unit/subnet_test_util.h"

namespace ibemu {
namespace {

using mad::AttrId;
using mad::MadStatus;
using mad::Method;
using testing::dr_get;
using testing::dr_set;
using testing::send;

constexpr PortRef kSm{0, 1};

class SmaTest : public ::testing::Test {
 protected:
  Config cfg_ = testing::two_by_two();
  Subnet subnet_{cfg_};

  mad::PortInfo port_info(std::vector<uint8_t> path, uint32_t mod = 0) {
    auto r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, mod, path));
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status(), MadStatus::kOk);
    return r->get_attr<mad::PortInfo>();
  }
  // Sets PortInfo from what a Get returned, as an SM does.
  std::optional<mad::Smp> set_port(std::vector<uint8_t> path, uint32_t mod,
                                   void (*edit)(mad::PortInfo&)) {
    mad::PortInfo pi = port_info(path, mod);
    pi.set_port_physical_state(0);  // 0 = no change, as an SM writes it
    pi.set_port_state(PortState::kNop);
    edit(pi);
    return send(subnet_, kSm, dr_set(AttrId::kPortInfo, mod, path, pi));
  }
};

TEST_F(SmaTest, PortsAreInitWithLidZeroBeforeAnySm) {
  for (const PortRef& p : subnet_.ports()) {
    const PortAttributes a = subnet_.port(p);
    EXPECT_EQ(a.state, PortState::kInit);
    EXPECT_EQ(a.phys_state, PhysState::kLinkUp);
    EXPECT_EQ(a.lid, 0);
    EXPECT_EQ(a.sm_lid, 0);
    EXPECT_EQ(a.max_mtu, 5);
    EXPECT_EQ(a.port_guid, cfg_.devices[size_t(p.device)].node_guid + uint64_t(p.port));
    EXPECT_EQ(a.subnet_prefix, 0xfe80000000000000ull);
    EXPECT_EQ(a.cap_mask & mad::kCapIsSm, 0u);
    EXPECT_EQ(rate_string(a), "100 Gb/sec (4X EDR)");
  }
  EXPECT_EQ(subnet_.ports().size(), 4u);
  EXPECT_EQ(subnet_.switch_lid(), 0);
  EXPECT_FALSE(subnet_.port_by_lid(1));
}

TEST_F(SmaTest, LocalNodeInfoWithZeroHops) {
  auto r = send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method(), Method::kGetResp);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_TRUE(r->direction());
  EXPECT_EQ(r->hop_pointer(), 0);
  const auto ni = r->get_attr<mad::NodeInfo>();
  EXPECT_EQ(ni.node_type(), mad::NodeType::kCa);
  EXPECT_EQ(ni.num_ports(), 2);
  EXPECT_EQ(ni.node_guid(), 0x0002c90300000100ull);
  EXPECT_EQ(ni.port_guid(), 0x0002c90300000101ull);
  EXPECT_EQ(ni.local_port_num(), 1);
  EXPECT_EQ(ni.vendor_id(), 0x02c9u);
  EXPECT_EQ(ni.base_version(), 1);
}

TEST_F(SmaTest, SwitchNodeInfoSwitchInfoAndDescription) {
  auto r = send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1}));
  ASSERT_TRUE(r);
  const auto ni = r->get_attr<mad::NodeInfo>();
  EXPECT_EQ(ni.node_type(), mad::NodeType::kSwitch);
  EXPECT_EQ(ni.num_ports(), 4);
  EXPECT_EQ(ni.local_port_num(), 1);  // ibemu0/1 is cabled to switch port 1
  EXPECT_EQ(ni.node_guid(), subnet_.switch_guid());
  EXPECT_EQ(ni.port_guid(), subnet_.switch_guid());

  r = send(subnet_, kSm, dr_get(AttrId::kNodeDescription, 0, {1}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeDescription>().text().rfind("ibemu-switch ", 0), 0u);

  r = send(subnet_, kSm, dr_get(AttrId::kSwitchInfo, 0, {1}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  const auto si = r->get_attr<mad::SwitchInfo>();
  EXPECT_EQ(si.linear_fdb_cap(), 0xc000);
  EXPECT_EQ(si.linear_fdb_top(), 0);
  EXPECT_FALSE(si.port_state_change());

  // A CA's description comes from the config.
  r = send(subnet_, kSm, dr_get(AttrId::kNodeDescription, 0, {1, 3}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::NodeDescription>().text(), cfg_.devices[1].node_desc);
}

TEST_F(SmaTest, PortInfoOfCaAndSwitchPorts) {
  mad::PortInfo pi = port_info({});
  EXPECT_EQ(pi.local_port_num(), 1);
  EXPECT_EQ(pi.port_state(), PortState::kInit);
  EXPECT_EQ(pi.port_physical_state(), 5);
  EXPECT_EQ(pi.lid(), 0);
  EXPECT_EQ(pi.mtu_cap(), 5);
  EXPECT_EQ(pi.neighbor_mtu(), 5);
  EXPECT_EQ(pi.link_width_active(), mad::kLinkWidth4x);
  EXPECT_EQ(pi.link_speed_ext_active(), mad::kLinkSpeedExtEdr);
  EXPECT_EQ(pi.gid_prefix(), 0xfe80000000000000ull);
  EXPECT_TRUE(pi.capability_mask() & mad::kCapIsExtendedSpeedsSupported);

  // Modifier 2 on a CA: the other port.
  pi = port_info({}, 2);
  EXPECT_EQ(pi.port_state(), PortState::kInit);
  // Switch ports 0..4.
  for (uint32_t p = 0; p <= 4; ++p) {
    pi = port_info({1}, p);
    EXPECT_EQ(pi.port_state(), PortState::kInit) << p;
    EXPECT_EQ(pi.local_port_num(), 1);
  }
  auto r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, 5, {1}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, 3, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  // Bit 31 (SMSupportsExtendedSpeeds, which opensm sets) is not a port.
  EXPECT_EQ(port_info({1}, 0x80000002u).port_state(), PortState::kInit);
  r = set_port({1}, 0x80000002u, [](mad::PortInfo&) {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, 0x40000002u, {1}));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
}

TEST_F(SmaTest, StatusCodesForWhatTheSmaCannotDo) {
  // An attribute no SMA here implements.
  auto r = send(subnet_, kSm, dr_get(AttrId::kSlToVlMappingTable, 0, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethodAttr);
  EXPECT_EQ(r->status_word(), 0x800c);  // with D set
  // SwitchInfo and LFT only exist on a switch.
  r = send(subnet_, kSm, dr_get(AttrId::kSwitchInfo, 0, {}));
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethodAttr);
  r = send(subnet_, kSm, dr_get(AttrId::kLinearForwardingTable, 0, {}));
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethodAttr);
  // NodeInfo cannot be set.
  r = send(subnet_, kSm, dr_set(AttrId::kNodeInfo, 0, {}, mad::NodeInfo{}));
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethodAttr);
  // NodeInfo has no modifier.
  r = send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 1, {}));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  // A method an SMA does not have.
  mad::Smp s = dr_get(AttrId::kNodeInfo, 0, {});
  s.set_method(Method::kSend);
  r = send(subnet_, kSm, s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethod);
  // A class version it does not speak.
  s = dr_get(AttrId::kNodeInfo, 0, {});
  s.set_class_version(2);
  r = send(subnet_, kSm, s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kBadVersion);
  // Responses and traps get no answer.
  s = dr_get(AttrId::kNodeInfo, 0, {});
  s.set_method(Method::kGetResp);
  EXPECT_FALSE(send(subnet_, kSm, s));
  s.set_method(Method::kTrap);
  EXPECT_FALSE(send(subnet_, kSm, s));
  s.set_method(Method::kGet);
  s.set_base_version(2);
  EXPECT_FALSE(send(subnet_, kSm, s));
  // LFT blocks end at LinearFDBCap.
  r = send(subnet_, kSm, dr_get(AttrId::kLinearForwardingTable, 768, {1}));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
}

TEST_F(SmaTest, LegalStateTransitionsInitArmedActive) {
  std::vector<PortRef> changed;
  subnet_.on_port_change([&](PortRef p) { changed.push_back(p); });
  auto r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(7);
    pi.set_master_sm_lid(7);
    pi.set_port_state(PortState::kArmed);
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().port_state(), PortState::kArmed);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().lid(), 7);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0], kSm);
  EXPECT_EQ(subnet_.port(kSm).state, PortState::kArmed);
  EXPECT_EQ(subnet_.port(kSm).lid, 7);
  EXPECT_EQ(subnet_.port_by_lid(7), std::optional<PortRef>(kSm));

  r = set_port({}, 0, [](mad::PortInfo& pi) { pi.set_port_state(PortState::kActive); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(subnet_.port(kSm).state, PortState::kActive);
  EXPECT_EQ(subnet_.port(kSm).sm_lid, 7);
  // Active -> Active is no change; a Get changes nothing.
  changed.clear();
  r = set_port({}, 0, [](mad::PortInfo& pi) { pi.set_port_state(PortState::kActive); });
  EXPECT_EQ(r->status(), MadStatus::kOk);
  send(subnet_, kSm, dr_get(AttrId::kPortInfo, 0, {}));
  EXPECT_TRUE(changed.empty());
}

TEST_F(SmaTest, IllegalTransitionsAreInvalidFieldAndChangeNothing) {
  // Init -> Active skips Armed.
  auto r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_port_state(PortState::kActive);
  });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  EXPECT_EQ(subnet_.port(kSm).state, PortState::kInit);
  EXPECT_EQ(subnet_.port(kSm).lid, 0);  // nothing of the Set applied
  // Init cannot be set, nor reserved states.
  r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_port_state(PortState::kInit);
  });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_port_state(PortState(7));
  });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  // LIDs must be unicast.
  r = set_port({}, 0, [](mad::PortInfo& pi) { pi.set_lid(0xc000); });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  r = set_port({}, 0, [](mad::PortInfo& pi) { pi.set_lid(0); });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  // NeighborMTU above MTUCap, a reserved physical state.
  r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_neighbor_mtu(6);
  });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  r = set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_port_physical_state(5);
  });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  EXPECT_EQ(subnet_.port(kSm).lid, 0);

  // Active -> Armed is not a transition either.
  set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(9);
    pi.set_port_state(PortState::kArmed);
  });
  set_port({}, 0, [](mad::PortInfo& pi) { pi.set_port_state(PortState::kActive); });
  ASSERT_EQ(subnet_.port(kSm).state, PortState::kActive);
  r = set_port({}, 0, [](mad::PortInfo& pi) { pi.set_port_state(PortState::kArmed); });
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  EXPECT_EQ(subnet_.port(kSm).state, PortState::kActive);
}

TEST_F(SmaTest, SetDownBouncesTheLinkAndDisableKeepsItDown) {
  const PortRef other{1, 2};  // switch port 4
  auto arm = [](mad::PortInfo& pi) {
    pi.set_lid(20);
    pi.set_port_state(PortState::kArmed);
  };
  ASSERT_EQ(set_port({1, 4}, 0, arm)->status(), MadStatus::kOk);
  ASSERT_EQ(subnet_.port(other).state, PortState::kArmed);

  // Down: the response says Down; the link then retrains to Init with the
  // LID kept, as a real link does.
  auto r = set_port({1, 4}, 0, [](mad::PortInfo& pi) { pi.set_port_state(PortState::kDown); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().port_state(), PortState::kDown);
  EXPECT_EQ(subnet_.port(other).state, PortState::kInit);
  EXPECT_EQ(subnet_.port(other).lid, 20);
  // The switch saw its port 4 go down and up (IBA 14.2.5.4 PortStateChange).
  r = send(subnet_, kSm, dr_get(AttrId::kSwitchInfo, 0, {1}));
  EXPECT_TRUE(r->get_attr<mad::SwitchInfo>().port_state_change());

  // Disabled: both ends stay Down until re-enabled.
  r = set_port({1}, 4, [](mad::PortInfo& pi) { pi.set_port_physical_state(3); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().port_physical_state(), 3);
  EXPECT_EQ(subnet_.port(other).state, PortState::kDown);
  EXPECT_EQ(subnet_.port(other).phys_state, PhysState::kPolling);
  EXPECT_FALSE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 4})));  // no link
  r = set_port({1}, 4, [](mad::PortInfo& pi) { pi.set_port_physical_state(2); });
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(subnet_.port(other).state, PortState::kInit);
  EXPECT_EQ(subnet_.port(other).phys_state, PhysState::kLinkUp);
  EXPECT_TRUE(send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {1, 4})));
}

TEST_F(SmaTest, SwitchInfoAndLftSet) {
  mad::SwitchInfo si;
  si.set_linear_fdb_top(10);
  auto r = send(subnet_, kSm, dr_set(AttrId::kSwitchInfo, 0, {1}, si));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::SwitchInfo>().linear_fdb_top(), 10);
  si.set_linear_fdb_top(0xc000);
  r = send(subnet_, kSm, dr_set(AttrId::kSwitchInfo, 0, {1}, si));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);

  mad::LinearForwardingTable lft;
  for (size_t i = 0; i < 64; ++i) lft.set_port(i, 0xff);
  lft.set_port(3, 2);
  r = send(subnet_, kSm, dr_set(AttrId::kLinearForwardingTable, 1, {1}, lft));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(subnet_.switch_lft(67), 2);
  r = send(subnet_, kSm, dr_get(AttrId::kLinearForwardingTable, 1, {1}));
  EXPECT_EQ(r->get_attr<mad::LinearForwardingTable>().port(3), 2);
  EXPECT_EQ(r->get_attr<mad::LinearForwardingTable>().port(4), 0xff);
}

TEST_F(SmaTest, IsSmBitAndSmInfo) {
  std::vector<PortRef> changed;
  subnet_.on_port_change([&](PortRef p) { changed.push_back(p); });
  auto r = send(subnet_, kSm, dr_get(AttrId::kSmInfo, 0, {}));
  EXPECT_EQ(r->status(), MadStatus::kUnsupportedMethodAttr);
  subnet_.set_is_sm(kSm, true);
  EXPECT_TRUE(subnet_.port(kSm).cap_mask & mad::kCapIsSm);
  EXPECT_EQ(changed.size(), 1u);
  EXPECT_TRUE(port_info({}).capability_mask() & mad::kCapIsSm);
  r = send(subnet_, kSm, dr_get(AttrId::kSmInfo, 0, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  // A freshly attached SM is DISCOVERING until it says otherwise.
  EXPECT_EQ(r->get_attr<mad::SmInfo>().sm_state(), mad::SmState::kDiscovering);
  EXPECT_EQ(r->get_attr<mad::SmInfo>().priority(), 0);
  EXPECT_EQ(r->get_attr<mad::SmInfo>().guid(), subnet_.port(kSm).port_guid);
  subnet_.set_sm_info(kSm, 9, mad::SmState::kMaster);
  EXPECT_EQ(changed.size(), 1u);  // not a PortInfo change
  r = send(subnet_, kSm, dr_get(AttrId::kSmInfo, 0, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::SmInfo>().sm_state(), mad::SmState::kMaster);
  EXPECT_EQ(r->get_attr<mad::SmInfo>().priority(), 9);
  EXPECT_GT(r->get_attr<mad::SmInfo>().act_count(), 0u);
  const PortAttributes before = subnet_.port(kSm);
  subnet_.set_is_sm(kSm, false);
  const PortAttributes after = subnet_.port(kSm);
  EXPECT_EQ(after.cap_mask & mad::kCapIsSm, 0u);
  EXPECT_EQ(after.state, before.state);
  EXPECT_EQ(after.lid, before.lid);
  EXPECT_EQ(subnet_.sm_info(kSm).state, mad::SmState::kNotActive);
}

// The kernel's CM announces itself through ib_modify_port; PortInfo then
// carries the bit, and IsSM set that way attaches an SM as set_is_sm does.
TEST_F(SmaTest, ConsumersSetAndClearCapabilityBits) {
  const uint32_t cm = mad::kCapIsCommunicationManagementSupported;
  const uint32_t before = subnet_.port(kSm).cap_mask;
  subnet_.modify_capabilities(kSm, 0, cm);
  EXPECT_EQ(subnet_.port(kSm).cap_mask, before & ~cm);
  EXPECT_FALSE(port_info({}).capability_mask() & cm);
  subnet_.modify_capabilities(kSm, cm | mad::kCapIsSm, 0);
  EXPECT_TRUE(port_info({}).capability_mask() & cm);
  EXPECT_EQ(subnet_.sm_info(kSm).state, mad::SmState::kDiscovering);
  subnet_.modify_capabilities(kSm, 0, mad::kCapIsSm);
  EXPECT_EQ(subnet_.port(kSm).cap_mask, before | cm);
  EXPECT_EQ(subnet_.sm_info(kSm).state, mad::SmState::kNotActive);
  subnet_.modify_capabilities(PortRef{-1, 1}, cm, 0);  // no such port: ignored
}

TEST_F(SmaTest, GuidInfoAndPKeyTable) {
  auto r = send(subnet_, kSm, dr_get(AttrId::kGuidInfo, 0, {}));
  EXPECT_EQ(r->get_attr<mad::GuidInfo>().guid(0), 0x0002c90300000101ull);
  r = send(subnet_, kSm, dr_get(AttrId::kPKeyTable, 0, {}));
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(0), 0xffff);
  r = send(subnet_, kSm, dr_get(AttrId::kPKeyTable, 1, {}));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
}

TEST_F(SmaTest, AnSmSetsEachCaPortsPKeyTable) {
  std::vector<PortRef> changed;
  subnet_.on_port_change([&](PortRef p) { changed.push_back(p); });
  // Room for partitions: PartitionCap entries, the config's first.
  auto r = send(subnet_, kSm, dr_get(AttrId::kNodeInfo, 0, {}));
  EXPECT_EQ(r->get_attr<mad::NodeInfo>().partition_cap(), kMaxPkeys);
  EXPECT_EQ(subnet_.port(kSm).num_pkeys, kMaxPkeys);
  EXPECT_EQ(subnet_.port(kSm).pkeys[0], 0xffff);
  EXPECT_EQ(subnet_.port(kSm).pkeys[1], 0);

  mad::PKeyTable t;
  t.set_pkey(0, 0xffff);
  t.set_pkey(1, 0x8001);
  t.set_pkey(2, 0x0002);
  t.set_pkey(kMaxPkeys, 0x8003);  // past PartitionCap: no such entry
  r = send(subnet_, kSm, dr_set(AttrId::kPKeyTable, 0, {}, t));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(1), 0x8001);
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(kMaxPkeys), 0);
  const PortAttributes a = subnet_.port(kSm);
  EXPECT_EQ(a.pkeys[1], 0x8001);
  EXPECT_EQ(a.pkeys[2], 0x0002);
  EXPECT_EQ(changed, std::vector<PortRef>{kSm});  // the daemon republishes it
  // Only the port the SMP came in by: the CA's other port keeps its table.
  EXPECT_EQ(subnet_.port({0, 2}).pkeys[1], 0);
  r = send(subnet_, kSm, dr_get(AttrId::kPKeyTable, 0, {}));
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(2), 0x0002);

  // A switch without partition enforcement has port 0's table only.
  r = send(subnet_, kSm, dr_set(AttrId::kPKeyTable, 2u << 16, {1}, t));
  EXPECT_EQ(r->status(), MadStatus::kInvalidField);
  r = send(subnet_, kSm, dr_set(AttrId::kPKeyTable, 0, {1}, t));
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(1), 0x8001);
  r = send(subnet_, kSm, dr_get(AttrId::kPKeyTable, 3u << 16, {1}));
  EXPECT_EQ(r->get_attr<mad::PKeyTable>().pkey(1), 0x8001);
}

TEST_F(SmaTest, MKeyProtection) {
  set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(3);
    pi.set_m_key(0x1234);
    pi.set_m_key_protect_bits(1);
  });
  // Level 1: a Get with the wrong key passes but does not see the key.
  auto r = send(subnet_, kSm, dr_get(AttrId::kPortInfo, 0, {}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().m_key(), 0u);
  // A Set with the wrong key is dropped (and counted).
  mad::PortInfo pi = r->get_attr<mad::PortInfo>();
  pi.set_port_state(PortState::kNop);
  pi.set_port_physical_state(0);
  pi.set_lid(4);
  EXPECT_FALSE(send(subnet_, kSm, dr_set(AttrId::kPortInfo, 0, {}, pi)));
  EXPECT_EQ(subnet_.port(kSm).lid, 3);
  // With the key it works.
  mad::Smp s = dr_set(AttrId::kPortInfo, 0, {}, pi);
  s.set_m_key(0x1234);
  pi.set_m_key(0x1234);
  s.set_attr(pi);
  r = send(subnet_, kSm, s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status(), MadStatus::kOk);
  EXPECT_EQ(subnet_.port(kSm).lid, 4);
  EXPECT_EQ(r->get_attr<mad::PortInfo>().m_key(), 0x1234u);
}

TEST_F(SmaTest, ClientReregisterIsReportedOnce) {
  set_port({}, 0, [](mad::PortInfo& pi) {
    pi.set_lid(3);
    pi.set_client_reregister(true);
  });
  EXPECT_EQ(subnet_.port(kSm).client_reregister_count, 1u);
  EXPECT_FALSE(port_info({}).client_reregister());
}

TEST_F(SmaTest, DescribeListsSwitchAndPorts) {
  const auto j = subnet_.describe();
  ASSERT_TRUE(j.contains("switch"));
  EXPECT_EQ(j["switch"]["ports"].size(), 5u);
  EXPECT_EQ(j["switch"]["ports"][1]["peer"], "ibemu0/1");
  EXPECT_EQ(j["switch"]["ports"][4]["peer"], "ibemu1/2");
  ASSERT_EQ(j["ports"].size(), 4u);
  EXPECT_EQ(j["ports"][2]["device"], "ibemu1");
  EXPECT_EQ(j["ports"][2]["state"], "Initializing");
  EXPECT_EQ(j["ports"][2]["switch_port"], 3);
}

TEST_F(SmaTest, UnknownPortsAreHarmless) {
  EXPECT_EQ(subnet_.port(PortRef{5, 1}).state, PortState::kDown);
  EXPECT_EQ(subnet_.port(PortRef{0, 3}).port_guid, 0u);
  subnet_.set_is_sm(PortRef{-1, 1}, true);
  subnet_.set_link_up(PortRef{0, 0}, false);
  mad::Smp s = dr_get(AttrId::kNodeInfo, 0, {});
  EXPECT_FALSE(send(subnet_, PortRef{2, 1}, s));
  EXPECT_FALSE(send(subnet_, PortRef{0, 0}, s));
  EXPECT_FALSE(send(subnet_, PortRef{0, 9}, s));
}

}  // namespace
}  // namespace ibemu
