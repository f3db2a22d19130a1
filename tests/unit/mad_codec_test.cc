// The MAD/SMP codec: every accessor against the byte and bit positions of the
// IBA (13.4.3, 14.2.1.2, 14.2.5.3/4/6/10/13, 15.2.5.14).
#include <gtest/gtest.h>

#include <random>

#include "common/mad/mad.h"
#include "common/mad/sa.h"
#include "common/mad/smp.h"
#include "common/mad/smp_attributes.h"

namespace ibemu::mad {
namespace {

TEST(Bits, GetAndSetAtSpecOffsets) {
  std::array<uint8_t, 8> b{};
  set_field(b.data(), Field{4, 4}, 0xf);  // low nibble of byte 0
  EXPECT_EQ(b[0], 0x0f);
  set_field(b.data(), Field{13, 3}, 5);  // low three bits of byte 1
  EXPECT_EQ(b[1], 0x05);
  set_field(b.data(), Field{16, 16}, 0xbeef);
  EXPECT_EQ(b[2], 0xbe);
  EXPECT_EQ(b[3], 0xef);
  set_field(b.data(), Field{33, 2}, 3);  // bits 6..5 of byte 4
  EXPECT_EQ(b[4], 0x60);
  EXPECT_EQ(get_field(b.data(), Field{4, 4}), 0xfu);
  EXPECT_EQ(get_field(b.data(), Field{13, 3}), 5u);
  EXPECT_EQ(get_field(b.data(), Field{16, 16}), 0xbeefu);
  EXPECT_EQ(get_field(b.data(), Field{33, 2}), 3u);
  // Values wider than the field are cut to the field.
  set_field(b.data(), Field{4, 4}, 0x1f3);
  EXPECT_EQ(b[0], 0x03);
}

TEST(MadHeader, FieldsAtHeaderOffsets) {
  Smp s;
  s.set_base_version(1);
  s.set_mgmt_class(MgmtClass::kSubnDirected);
  s.set_class_version(1);
  s.set_method(Method::kGetResp);
  s.set_tid(0x0102030405060708ull);
  s.set_attr_id(AttrId::kPortInfo);
  s.set_attr_mod(0xa0b0c0d0);
  EXPECT_EQ(s.bytes[0], 1);
  EXPECT_EQ(s.bytes[1], 0x81);
  EXPECT_EQ(s.bytes[2], 1);
  EXPECT_EQ(s.bytes[3], 0x81);
  EXPECT_TRUE(s.is_response());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.bytes[8 + i], i + 1);
  EXPECT_EQ(s.bytes[16], 0x00);
  EXPECT_EQ(s.bytes[17], 0x15);
  EXPECT_EQ(s.bytes[18], 0);  // reserved
  EXPECT_EQ(s.bytes[20], 0xa0);
  EXPECT_EQ(s.bytes[23], 0xd0);
  EXPECT_EQ(s.tid(), 0x0102030405060708ull);
  EXPECT_EQ(s.attr_mod(), 0xa0b0c0d0u);
}

TEST(Smp, DirectedRouteFields) {
  const uint8_t path[] = {1, 7, 3};
  Smp s = Smp::make_directed(Method::kGet, AttrId::kNodeInfo, 0, 42, path, 3);
  EXPECT_EQ(s.bytes[1], 0x81);
  EXPECT_EQ(s.hop_count(), 3);
  EXPECT_EQ(s.bytes[7], 3);  // HopCount: byte 7
  EXPECT_EQ(s.hop_pointer(), 0);
  EXPECT_EQ(s.dr_slid(), 0xffff);
  EXPECT_EQ(s.dr_dlid(), 0xffff);
  EXPECT_EQ(s.bytes[32], 0xff);
  EXPECT_EQ(s.bytes[35], 0xff);
  EXPECT_EQ(s.bytes[128], 0);  // InitialPath[0] is unused
  EXPECT_EQ(s.bytes[129], 1);
  EXPECT_EQ(s.bytes[130], 7);
  EXPECT_EQ(s.bytes[131], 3);
  s.set_hop_pointer(2);
  EXPECT_EQ(s.bytes[6], 2);
  s.set_return_path(2, 9);
  EXPECT_EQ(s.bytes[194], 9);

  // D is bit 15 of Status; the status code keeps to the other 15 bits.
  s.set_direction(true);
  EXPECT_EQ(s.bytes[4], 0x80);
  s.set_status(MadStatus::kInvalidField);
  EXPECT_EQ(s.status_word(), 0x801c);
  EXPECT_EQ(s.status(), MadStatus::kInvalidField);
  EXPECT_TRUE(s.direction());
  s.set_direction(false);
  EXPECT_EQ(s.status_word(), 0x001c);

  s.set_m_key(0x1122334455667788ull);
  EXPECT_EQ(s.bytes[24], 0x11);
  EXPECT_EQ(s.bytes[31], 0x88);
}

TEST(Smp, LongPathsAreCutTo63Hops) {
  std::vector<uint8_t> path(100, 1);
  Smp s = Smp::make_directed(Method::kGet, AttrId::kNodeInfo, 0, 1, path.data(), path.size());
  EXPECT_EQ(s.hop_count(), kMaxDrHops);
}

TEST(Smp, FromBytesNeedsExactly256) {
  std::array<uint8_t, 300> buf{};
  EXPECT_FALSE(Smp::from_bytes(buf.data(), 255));
  EXPECT_FALSE(Smp::from_bytes(buf.data(), 257));
  EXPECT_FALSE(Smp::from_bytes(nullptr, 256));
  EXPECT_TRUE(Smp::from_bytes(buf.data(), 256));
}

TEST(Smp, AttributeCopiesIntoDataArea) {
  Smp s;
  s.data()[63] = 0xee;
  NodeInfo ni;
  ni.set_node_type(NodeType::kSwitch);
  s.set_attr(ni);
  EXPECT_EQ(s.bytes[64 + 2], 2);
  EXPECT_EQ(s.bytes[64 + 63], 0);  // the rest of the data area is zeroed
  EXPECT_EQ(s.get_attr<NodeInfo>().node_type(), NodeType::kSwitch);
}

TEST(NodeInfo, SpecPositions) {
  NodeInfo ni;
  ni.set_base_version(1);
  ni.set_class_version(1);
  ni.set_node_type(NodeType::kCa);
  ni.set_num_ports(2);
  ni.set_system_image_guid(0x1111111111111111ull);
  ni.set_node_guid(0x0002c90300a1b2c3ull);
  ni.set_port_guid(0x0002c90300a1b2c4ull);
  ni.set_partition_cap(128);
  ni.set_device_id(0x1017);
  ni.set_revision(0xa0);
  ni.set_local_port_num(2);
  ni.set_vendor_id(0x0002c9);
  EXPECT_EQ(ni.bytes[2], 1);
  EXPECT_EQ(ni.bytes[3], 2);
  EXPECT_EQ(ni.bytes[12], 0x00);
  EXPECT_EQ(ni.bytes[13], 0x02);
  EXPECT_EQ(ni.bytes[19], 0xc3);
  EXPECT_EQ(ni.bytes[27], 0xc4);
  EXPECT_EQ(ni.bytes[28], 0x00);
  EXPECT_EQ(ni.bytes[29], 0x80);
  EXPECT_EQ(ni.bytes[30], 0x10);
  EXPECT_EQ(ni.bytes[31], 0x17);
  EXPECT_EQ(ni.bytes[35], 0xa0);
  EXPECT_EQ(ni.bytes[36], 2);
  EXPECT_EQ(ni.bytes[37], 0x00);
  EXPECT_EQ(ni.bytes[38], 0x02);
  EXPECT_EQ(ni.bytes[39], 0xc9);
  EXPECT_EQ(ni.vendor_id(), 0x0002c9u);
  EXPECT_EQ(ni.node_guid(), 0x0002c90300a1b2c3ull);
}

TEST(ServiceRecord, SpecPositions) {
  ServiceRecord r;
  r.set_service_id(0x1000000000000001ull);
  r.service_gid()[0] = 0xfe;
  r.service_gid()[15] = 0x42;
  r.set_service_pkey(0xffff);
  r.set_service_lease(0xffffffff);
  r.service_name()[0] = 'x';
  EXPECT_EQ(r.bytes.size(), 176u);
  EXPECT_EQ(r.bytes[0], 0x10);
  EXPECT_EQ(r.bytes[7], 0x01);
  EXPECT_EQ(r.bytes[8], 0xfe);
  EXPECT_EQ(r.bytes[23], 0x42);
  EXPECT_EQ(r.bytes[24], 0xff);
  EXPECT_EQ(r.bytes[25], 0xff);
  EXPECT_EQ(r.bytes[26], 0x00);  // reserved
  EXPECT_EQ(r.bytes[28], 0xff);
  EXPECT_EQ(r.bytes[31], 0xff);
  EXPECT_EQ(r.bytes[32], 0x00);  // ServiceKey
  EXPECT_EQ(r.bytes[48], 'x');
  EXPECT_EQ(r.service_id(), 0x1000000000000001ull);
  EXPECT_EQ(r.service_pkey(), 0xffff);
}

TEST(PortInfo, SpecPositions) {
  PortInfo pi;
  pi.set_lid(0x1234);
  EXPECT_EQ(pi.bytes[16], 0x12);
  EXPECT_EQ(pi.bytes[17], 0x34);
  pi.set_master_sm_lid(0x0001);
  EXPECT_EQ(pi.bytes[19], 0x01);
  pi.set_capability_mask(0x02514868);
  EXPECT_EQ(pi.bytes[20], 0x02);
  EXPECT_EQ(pi.bytes[23], 0x68);
  pi.set_local_port_num(3);
  EXPECT_EQ(pi.bytes[28], 3);
  pi.set_link_width_active(kLinkWidth4x);
  EXPECT_EQ(pi.bytes[31], 2);
  // Byte 32: LinkSpeedSupported (high nibble), PortState (low nibble).
  pi.set_link_speed_supported(7);
  pi.set_port_state(PortState::kActive);
  EXPECT_EQ(pi.bytes[32], 0x74);
  // Byte 33: PortPhysicalState, LinkDownDefaultState.
  pi.set_port_physical_state(5);
  pi.set_link_down_default_state(2);
  EXPECT_EQ(pi.bytes[33], 0x52);
  // Byte 34: M_KeyProtectBits (2), reserved (3), LMC (3).
  pi.set_m_key_protect_bits(2);
  pi.set_lmc(5);
  EXPECT_EQ(pi.bytes[34], 0x85);
  // Byte 35: LinkSpeedActive, LinkSpeedEnabled.
  pi.set_link_speed_active(4);
  pi.set_link_speed_enabled(7);
  EXPECT_EQ(pi.bytes[35], 0x47);
  // Byte 36: NeighborMTU, MasterSMSL.
  pi.set_neighbor_mtu(5);
  pi.set_master_sm_sl(3);
  EXPECT_EQ(pi.bytes[36], 0x53);
  // Byte 41: InitTypeReply, MTUCap.
  pi.set_mtu_cap(4);
  EXPECT_EQ(pi.bytes[41], 0x04);
  // Byte 42: VLStallCount (3), HOQLife (5).
  pi.set_vl_stall_count(7);
  pi.set_hoq_life(0x13);
  EXPECT_EQ(pi.bytes[42], 0xf3);
  // Byte 43: OperationalVLs, then four one-bit flags.
  pi.set_operational_vls(2);
  pi.set_partition_enforcement_inbound(true);
  pi.set_filter_raw_outbound(true);
  EXPECT_EQ(pi.bytes[43], 0x29);
  // Byte 51: ClientReregister, MulticastPKeyTrapSuppressionEnabled, SubnetTimeOut.
  pi.set_client_reregister(true);
  pi.set_subnet_timeout(18);
  EXPECT_EQ(pi.bytes[51], 0x92);
  pi.set_resp_time_value(16);
  EXPECT_EQ(pi.bytes[52], 0x10);
  pi.set_link_round_trip_latency(0xabcdef);
  EXPECT_EQ(pi.bytes[56], 0);
  EXPECT_EQ(pi.bytes[57], 0xab);
  EXPECT_EQ(pi.bytes[59], 0xef);
  pi.set_capability_mask2(0x0102);
  EXPECT_EQ(pi.bytes[60], 0x01);
  EXPECT_EQ(pi.bytes[61], 0x02);
  pi.set_link_speed_ext_active(2);
  pi.set_link_speed_ext_supported(3);
  EXPECT_EQ(pi.bytes[62], 0x23);
  pi.set_link_speed_ext_enabled(0x1f);
  EXPECT_EQ(pi.bytes[63], 0x1f);

  EXPECT_EQ(pi.port_state(), PortState::kActive);
  EXPECT_EQ(pi.lmc(), 5);
  EXPECT_EQ(pi.m_key_protect_bits(), 2);
  EXPECT_EQ(pi.hoq_life(), 0x13);
  EXPECT_TRUE(pi.client_reregister());
}

TEST(PortInfo, EveryFieldRoundTripsWithoutTouchingItsNeighbours) {
  // Fill a field with ones in an all-zero attribute: exactly `width` bits
  // come out set, and the getter reads the value back.
  const Field fields[] = {PortInfo::k_m_key,
                          PortInfo::k_gid_prefix,
                          PortInfo::k_lid,
                          PortInfo::k_master_sm_lid,
                          PortInfo::k_capability_mask,
                          PortInfo::k_lmc,
                          PortInfo::k_port_state,
                          PortInfo::k_neighbor_mtu,
                          PortInfo::k_mtu_cap,
                          PortInfo::k_hoq_life,
                          PortInfo::k_vl_stall_count,
                          PortInfo::k_operational_vls,
                          PortInfo::k_subnet_timeout,
                          PortInfo::k_resp_time_value,
                          PortInfo::k_link_round_trip_latency,
                          PortInfo::k_link_speed_ext_enabled,
                          PortInfo::k_client_reregister,
                          PortInfo::k_multicast_pkey_trap_suppression_enabled};
  for (const Field f : fields) {
    PortInfo pi;
    const uint64_t ones = f.width == 64 ? ~0ull : (1ull << f.width) - 1;
    set_field(pi.bytes.data(), f, ones);
    int bits = 0;
    for (uint8_t b : pi.bytes) bits += __builtin_popcount(b);
    EXPECT_EQ(bits, f.width) << "field at bit " << f.offset;
    EXPECT_EQ(get_field(pi.bytes.data(), f), ones);
  }
}

TEST(SwitchInfo, SpecPositions) {
  SwitchInfo si;
  si.set_linear_fdb_cap(0xc000);
  si.set_linear_fdb_top(0x0042);
  si.set_default_port(3);
  si.set_life_time_value(0x13);
  si.set_port_state_change(true);
  si.set_optimized_sl_to_vl_mapping_programming(3);
  si.set_lids_per_port(1);
  si.set_enhanced_port0(true);
  si.set_multicast_fdb_top(0xc001);
  EXPECT_EQ(si.bytes[0], 0xc0);
  EXPECT_EQ(si.bytes[7], 0x42);
  EXPECT_EQ(si.bytes[8], 3);
  EXPECT_EQ(si.bytes[11], 0x9f);  // 10011 1 11
  EXPECT_EQ(si.bytes[13], 1);
  EXPECT_EQ(si.bytes[16], 0x08);
  EXPECT_EQ(si.bytes[18], 0xc0);
  EXPECT_EQ(si.bytes[19], 0x01);
  EXPECT_TRUE(si.port_state_change());
  EXPECT_EQ(si.life_time_value(), 0x13);
}

TEST(SmInfo, SpecPositions) {
  SmInfo si;
  si.set_guid(0xaabbccddeeff0011ull);
  si.set_act_count(0x01020304);
  si.set_priority(0xa);
  si.set_sm_state(SmState::kMaster);
  EXPECT_EQ(si.bytes[0], 0xaa);
  EXPECT_EQ(si.bytes[16], 1);
  EXPECT_EQ(si.bytes[19], 4);
  EXPECT_EQ(si.bytes[20], 0xa3);
  EXPECT_EQ(si.sm_state(), SmState::kMaster);
}

TEST(SmInfo, StateKeywordsRoundTrip) {
  for (SmState s :
       {SmState::kNotActive, SmState::kDiscovering, SmState::kStandby, SmState::kMaster})
    EXPECT_EQ(parse_sm_state(sm_state_keyword(s)), s);
  EXPECT_EQ(sm_state_keyword(SmState::kStandby), "standby");
  EXPECT_EQ(parse_sm_state("MASTER"), SmState::kMaster);
  EXPECT_FALSE(parse_sm_state("boss"));
  EXPECT_FALSE(parse_sm_state(""));
}

TEST(Tables, LftGuidInfoPKeyTable) {
  LinearForwardingTable lft;
  lft.set_port(0, 1);
  lft.set_port(63, 9);
  EXPECT_EQ(lft.bytes[0], 1);
  EXPECT_EQ(lft.bytes[63], 9);
  GuidInfo gi;
  gi.set_guid(1, 0x0102030405060708ull);
  EXPECT_EQ(gi.bytes[8], 1);
  EXPECT_EQ(gi.bytes[15], 8);
  PKeyTable pk;
  pk.set_pkey(1, 0xffff);
  EXPECT_EQ(pk.bytes[2], 0xff);
  EXPECT_EQ(pk.pkey(1), 0xffff);
}

TEST(NodeDescription, TextIsNulPaddedAndCapped) {
  NodeDescription nd;
  nd.set_text("host ibemu0");
  EXPECT_EQ(nd.text(), "host ibemu0");
  EXPECT_EQ(nd.bytes[11], 0);
  nd.set_text(std::string(100, 'x'));
  EXPECT_EQ(nd.text(), std::string(64, 'x'));
}

TEST(Names, ToString) {
  EXPECT_EQ(to_string(Method::kGetResp), "GetResp");
  EXPECT_EQ(to_string(Method(0x7f)), "method 0x7f");
  EXPECT_EQ(to_string(AttrId::kPortInfo), "PortInfo");
  EXPECT_EQ(to_string(AttrId(0xff90)), "attribute 0xff90");
  EXPECT_EQ(to_string(MgmtClass::kSubnDirected), "SubnMgt(DR)");
  EXPECT_EQ(to_string(MadStatus::kOk), "ok");
  EXPECT_EQ(to_string(MadStatus::kInvalidField), "invalid attribute field");
  EXPECT_EQ(to_string(MadStatus::kUnsupportedMethodAttr), "method/attribute not supported");
  EXPECT_EQ(to_string(NodeType::kSwitch), "Switch");
  EXPECT_EQ(to_string(SmState::kMaster), "Master");
  EXPECT_EQ(to_string(PortState::kActive), "Active");
  EXPECT_EQ(to_string(PhysState::kLinkUp), "LinkUp");
}

TEST(Codec, RandomBytesRoundTrip) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    PortInfo a;
    for (auto& b : a.bytes) b = uint8_t(rng());
    PortInfo b;
    // Copy field by field through the accessors; reserved bits stay zero.
    b.set_lid(a.lid());
    b.set_lmc(a.lmc());
    b.set_port_state(a.port_state());
    b.set_neighbor_mtu(a.neighbor_mtu());
    b.set_link_speed_ext_enabled(a.link_speed_ext_enabled());
    EXPECT_EQ(b.lid(), a.lid());
    EXPECT_EQ(b.lmc(), a.lmc());
    EXPECT_EQ(b.port_state(), a.port_state());
    EXPECT_EQ(b.neighbor_mtu(), a.neighbor_mtu());
    EXPECT_EQ(b.link_speed_ext_enabled(), a.link_speed_ext_enabled());
  }
}

}  // namespace
}  // namespace ibemu::mad
