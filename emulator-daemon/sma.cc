#include "emulator-daemon/sma.h"

#include "common/mad/smp_attributes.h"

namespace ibemu::subnet_detail {

using mad::AttrId;
using mad::MadStatus;
using mad::Method;

namespace {

// IBA 14.2.5.6 PortPhysicalState / LinkDownDefaultState values on SubnSet.
constexpr uint8_t kPhysNoChange = 0;
constexpr uint8_t kPhysPolling = 2;
constexpr uint8_t kPhysDisabled = 3;
// IBA 14.2.5.6 PortInfo AttributeModifier bit 31: SMSupportsExtendedSpeeds.
constexpr uint32_t kSmSupportsExtendedSpeeds = 1u << 31;

// A LinkWidthEnabled / LinkSpeedEnabled value on SubnSet: 0 = no change,
// all ones = everything supported, else a non-empty subset of supported.
bool valid_enable(uint8_t v, uint8_t all_ones, uint8_t supported) {
  return v == 0 || v == all_ones || (v & ~supported) == 0;
}

uint8_t apply_enable(uint8_t v, uint8_t all_ones, uint8_t supported, uint8_t cur) {
  if (v == 0) return cur;
  return v == all_ones ? supported : v;
}

}  // namespace

std::optional<mad::Smp> Sma::handle(Hop at, const mad::Smp& req) {
  if (!m_.valid(at)) return std::nullopt;
  // IBA 13.4.5: a response (R bit set) is never answered; traps go to an SM, not an
  // SMA, and TrapRepress needs no reply (no traps are sent here).
  if (req.is_response() || req.method() == Method::kTrap || req.method() == Method::kTrapRepress)
    return std::nullopt;
  // A BaseVersion we do not know means a format we cannot even parse.
  if (req.base_version() != mad::kBaseVersion) return std::nullopt;

  NodeModel& node = m_.node(at.node);
  mad::Smp resp = req;
  resp.set_method(Method::kGetResp);
  resp.set_status(MadStatus::kOk);

  // IBA 13.4.7: an unsupported class version is answered with status 1.
  if (req.class_version() != mad::kSmpClassVersion) {
    resp.set_status(MadStatus::kBadVersion);
    return resp;
  }
  const bool is_set = req.method() == Method::kSet;
  if (req.method() != Method::kGet && !is_set) {
    resp.set_status(MadStatus::kUnsupportedMethod);
    return resp;
  }

  // IBA 14.2.4 M_Key check: against port 0 of a switch, the receiving port
  // of a CA. A zero M_Key or a match passes; otherwise a Get passes with
  // protection 0 or 1 (1 hides the M_Key) and everything else is dropped.
  PortModel& key_port = node.ports[node.is_switch() ? 0 : size_t(at.port)];
  hide_m_key_ = false;
  if (key_port.m_key != 0 && req.m_key() != key_port.m_key) {
    if (is_set || key_port.m_key_protect_bits >= 2) {
      ++key_port.m_key_violations;
      return std::nullopt;
    }
    hide_m_key_ = key_port.m_key_protect_bits == 1;
  }

  bounce_.reset();
  MadStatus st = MadStatus::kUnsupportedMethodAttr;
  switch (req.attr_id()) {
    case AttrId::kNodeDescription:
      if (!is_set) st = get_node_description(at, req, &resp);
      break;
    case AttrId::kNodeInfo:
      if (!is_set) st = get_node_info(at, req, &resp);
      break;
    case AttrId::kSwitchInfo:
      if (node.is_switch()) st = do_switch_info(at, req, &resp);
      break;
    case AttrId::kGuidInfo:
      if (!is_set) st = get_guid_info(at, req, &resp);
      break;
    case AttrId::kPortInfo:
      st = do_port_info(at, req, &resp);
      break;
    case AttrId::kPKeyTable:
      st = do_pkey_table(at, req, &resp);
      break;
    case AttrId::kLinearForwardingTable:
      if (node.is_switch()) st = do_lft(at, req, &resp);
      break;
    case AttrId::kSmInfo:
      if (!is_set) st = get_sm_info(at, req, &resp);
      break;
    default:
      break;
  }
  resp.set_status(st);
  // A Set PortInfo to Down answers with Down; the link then retrains.
  if (bounce_) m_.bounce_link(*bounce_);
  bounce_.reset();
  return resp;
}

MadStatus Sma::get_node_description(Hop at, const mad::Smp& req, mad::Smp* resp) {
  if (req.attr_mod() != 0) return MadStatus::kInvalidField;
  mad::NodeDescription nd;
  nd.set_text(m_.node(at.node).description);
  resp->set_attr(nd);
  return MadStatus::kOk;
}

MadStatus Sma::get_node_info(Hop at, const mad::Smp& req, mad::Smp* resp) {
  if (req.attr_mod() != 0) return MadStatus::kInvalidField;
  const NodeModel& n = m_.node(at.node);
  mad::NodeInfo ni;
  ni.set_base_version(mad::kBaseVersion);
  ni.set_class_version(mad::kSmpClassVersion);
  ni.set_node_type(n.type);
  ni.set_num_ports(uint8_t(n.num_ports()));
  ni.set_system_image_guid(n.sys_image_guid);
  ni.set_node_guid(n.guid);
  // IBA 14.2.5.3: PortGUID is that of the port the SMP came in by; a
  // switch answers with port 0's.
  ni.set_port_guid(n.is_switch() ? n.ports[0].guid : n.ports[size_t(at.port)].guid);
  ni.set_partition_cap(n.partition_cap);
  ni.set_device_id(n.device_id);
  ni.set_revision(n.revision);
  ni.set_local_port_num(uint8_t(at.port));
  ni.set_vendor_id(n.vendor_id & 0xffffff);
  resp->set_attr(ni);
  return MadStatus::kOk;
}

MadStatus Sma::do_switch_info(Hop at, const mad::Smp& req, mad::Smp* resp) {
  if (req.attr_mod() != 0) return MadStatus::kInvalidField;
  NodeModel& n = m_.node(at.node);
  if (req.method() == Method::kSet) {
    const auto in = req.get_attr<mad::SwitchInfo>();
    // IBA 14.2.5.4: LinearFDBTop must lie inside the table.
    if (in.linear_fdb_top() >= kLinearFdbCap) return MadStatus::kInvalidField;
    n.lft_top = in.linear_fdb_top();
    n.default_port = in.default_port();
    n.default_mcast_primary_port = in.default_multicast_primary_port();
    n.default_mcast_not_primary_port = in.default_multicast_not_primary_port();
    n.life_time_value = in.life_time_value();
    // PortStateChange is cleared by writing one (IBA 14.2.5.4).
    if (in.port_state_change()) n.port_state_change = false;
  }
  mad::SwitchInfo si;
  si.set_linear_fdb_cap(kLinearFdbCap);
  si.set_random_fdb_cap(0);
  si.set_multicast_fdb_cap(0);
  si.set_linear_fdb_top(n.lft_top);
  si.set_default_port(n.default_port);
  si.set_default_multicast_primary_port(n.default_mcast_primary_port);
  si.set_default_multicast_not_primary_port(n.default_mcast_not_primary_port);
  si.set_life_time_value(n.life_time_value);
  si.set_port_state_change(n.port_state_change);
  si.set_lids_per_port(0);
  si.set_partition_enforcement_cap(0);
  si.set_enhanced_port0(false);
  resp->set_attr(si);
  return MadStatus::kOk;
}

mad::PortInfo Sma::read_port_info(int node_index, int p, int in_port) const {
  const NodeModel& n = m_.node(node_index);
  const PortModel& port = n.ports[size_t(p)];
  // IBA 14.2.5.6: on a switch, the subnet-wide fields live in port 0.
  const PortModel& base = n.is_switch() ? n.ports[0] : port;
  mad::PortInfo pi;
  pi.set_m_key(hide_m_key_ ? 0 : base.m_key);
  pi.set_gid_prefix(base.gid_prefix);
  pi.set_lid(base.lid);
  pi.set_master_sm_lid(base.sm_lid);
  pi.set_capability_mask(base.cap_mask);
  pi.set_diag_code(0);
  pi.set_m_key_lease_period(base.m_key_lease_period);
  pi.set_local_port_num(uint8_t(in_port));
  pi.set_link_width_enabled(port.link_width_enabled);
  pi.set_link_width_supported(kWidthSupported);
  pi.set_link_width_active(kWidthActive);
  pi.set_link_speed_supported(kSpeedSupported);
  pi.set_port_state(port.state);
  pi.set_port_physical_state(uint8_t(port.phys));
  pi.set_link_down_default_state(port.link_down_default_state);
  pi.set_m_key_protect_bits(base.m_key_protect_bits);
  pi.set_lmc(n.is_switch() ? 0 : port.lmc);
  pi.set_link_speed_active(kSpeedActive);
  pi.set_link_speed_enabled(port.link_speed_enabled);
  pi.set_neighbor_mtu(port.neighbor_mtu);
  pi.set_master_sm_sl(base.sm_sl);
  pi.set_vl_cap(kVlCap);
  pi.set_init_type(0);
  pi.set_vl_high_limit(port.vl_high_limit);
  pi.set_vl_arbitration_high_cap(0);
  pi.set_vl_arbitration_low_cap(0);
  pi.set_init_type_reply(port.init_type_reply);
  pi.set_mtu_cap(port.mtu_cap);
  pi.set_vl_stall_count(port.vl_stall_count);
  pi.set_hoq_life(port.hoq_life);
  pi.set_operational_vls(port.operational_vls);
  pi.set_partition_enforcement_inbound(port.partition_enforcement_inbound);
  pi.set_partition_enforcement_outbound(port.partition_enforcement_outbound);
  pi.set_filter_raw_inbound(port.filter_raw_inbound);
  pi.set_filter_raw_outbound(port.filter_raw_outbound);
  pi.set_m_key_violations(base.m_key_violations);
  pi.set_p_key_violations(port.p_key_violations);
  pi.set_q_key_violations(port.q_key_violations);
  pi.set_guid_cap(1);
  pi.set_client_reregister(false);  // a command bit: always reads 0
  pi.set_multicast_pkey_trap_suppression_enabled(base.multicast_pkey_trap_suppression);
  pi.set_subnet_timeout(base.subnet_timeout);
  pi.set_resp_time_value(kRespTimeValue);
  pi.set_local_phy_errors(port.local_phy_errors);
  pi.set_overrun_errors(port.overrun_errors);
  pi.set_max_credit_hint(0);
  pi.set_link_round_trip_latency(0);
  pi.set_capability_mask2(0);
  pi.set_link_speed_ext_active(kSpeedExtActive);
  pi.set_link_speed_ext_supported(kSpeedExtSupported);
  pi.set_link_speed_ext_enabled(port.link_speed_ext_enabled);
  return pi;
}

MadStatus Sma::do_port_info(Hop at, const mad::Smp& req, mad::Smp* resp) {
  const NodeModel& n = m_.node(at.node);
  // IBA 14.2.5.6: bits 0-7 of the modifier select the port; on a CA, 0
  // means the port the SMP came in by. On a switch 0 is the management
  // port. Bit 31 says the SM knows the extended speeds fields, which this
  // SMA always fills (opensm sets it).
  const uint32_t mod = req.attr_mod() & ~kSmSupportsExtendedSpeeds;
  if (mod > uint32_t(n.num_ports())) return MadStatus::kInvalidField;
  const int p = (!n.is_switch() && mod == 0) ? at.port : int(mod);
  if (req.method() == Method::kSet) {
    MadStatus st = set_port_info(at.node, p, req.get_attr<mad::PortInfo>());
    if (st != MadStatus::kOk) return st;
  }
  resp->set_attr(read_port_info(at.node, p, at.port));
  return MadStatus::kOk;
}

MadStatus Sma::set_port_info(int node_index, int p, const mad::PortInfo& in) {
  NodeModel& n = m_.node(node_index);
  PortModel& port = n.ports[size_t(p)];
  const bool switch_external = n.is_switch() && p != 0;
  const bool switch_port0 = n.is_switch() && p == 0;

  // --- validate everything first ---
  // IBA 14.2.5.6: the LID of a CA port or switch port 0 is a unicast LID.
  if (!switch_external && !mad::is_unicast_lid(in.lid())) return MadStatus::kInvalidField;
  if (!switch_external && in.master_sm_lid() > mad::kMaxUnicastLid) return MadStatus::kInvalidField;
  const PortState want = in.port_state();
  const PortState cur = port.state;
  switch (want) {
    case PortState::kNop:
    case PortState::kDown:
      break;
    case PortState::kArmed:  // IBA 7.2: Init -> Armed only (Armed -> Armed is no change)
      if (cur != PortState::kInit && cur != PortState::kArmed) return MadStatus::kInvalidField;
      break;
    case PortState::kActive:  // Armed -> Active only: never Init -> Active
      if (cur != PortState::kArmed && cur != PortState::kActive) return MadStatus::kInvalidField;
      break;
    default:  // Init cannot be set; 5..15 are reserved
      return MadStatus::kInvalidField;
  }
  const uint8_t phys = in.port_physical_state();
  if (phys != kPhysNoChange && phys != kPhysPolling && phys != kPhysDisabled)
    return MadStatus::kInvalidField;
  if (switch_port0 && phys == kPhysDisabled) return MadStatus::kInvalidField;  // no link to disable
  if (in.link_down_default_state() > 2) return MadStatus::kInvalidField;
  if (!valid_enable(in.link_width_enabled(), 0xff, kWidthSupported))
    return MadStatus::kInvalidField;
  if (!valid_enable(in.link_speed_enabled(), 0xf, kSpeedSupported)) return MadStatus::kInvalidField;
  const uint8_t ext = in.link_speed_ext_enabled();
  if (ext != 0x1e && !valid_enable(ext, 0x1f, kSpeedExtSupported)) return MadStatus::kInvalidField;
  if (in.neighbor_mtu() < 1 || in.neighbor_mtu() > port.mtu_cap) return MadStatus::kInvalidField;
  if (in.operational_vls() > kVlCap) return MadStatus::kInvalidField;

  // --- apply ---
  if (!switch_external) {
    port.m_key = in.m_key();
    port.gid_prefix = in.gid_prefix();
    port.lid = in.lid();
    port.sm_lid = in.master_sm_lid();
    port.m_key_lease_period = in.m_key_lease_period();
    port.m_key_protect_bits = in.m_key_protect_bits();
    port.sm_sl = in.master_sm_sl();
    port.subnet_timeout = in.subnet_timeout();
    port.multicast_pkey_trap_suppression = in.multicast_pkey_trap_suppression_enabled();
    port.m_key_violations = in.m_key_violations();
    if (!switch_port0) port.lmc = in.lmc();
    // IBA 14.2.5.6: ClientReregister asks the CA to tell its clients to
    // re-register with the SA; the daemon sees the counter move.
    if (in.client_reregister() && !n.is_switch()) ++port.client_reregister_count;
  }
  port.link_width_enabled =
      apply_enable(in.link_width_enabled(), 0xff, kWidthSupported, port.link_width_enabled);
  port.link_speed_enabled =
      apply_enable(in.link_speed_enabled(), 0xf, kSpeedSupported, port.link_speed_enabled);
  if (ext == 0x1e)
    port.link_speed_ext_enabled = 0x1e;
  else
    port.link_speed_ext_enabled =
        apply_enable(ext, 0x1f, kSpeedExtSupported, port.link_speed_ext_enabled);
  if (in.link_down_default_state() != 0)
    port.link_down_default_state = in.link_down_default_state();
  port.neighbor_mtu = in.neighbor_mtu();
  if (in.operational_vls() != 0) port.operational_vls = in.operational_vls();
  port.vl_high_limit = in.vl_high_limit();
  port.init_type_reply = in.init_type_reply();
  port.vl_stall_count = in.vl_stall_count();
  port.hoq_life = in.hoq_life();
  if (switch_external) {
    port.partition_enforcement_inbound = in.partition_enforcement_inbound();
    port.partition_enforcement_outbound = in.partition_enforcement_outbound();
    port.filter_raw_inbound = in.filter_raw_inbound();
    port.filter_raw_outbound = in.filter_raw_outbound();
  }
  port.p_key_violations = in.p_key_violations();
  port.q_key_violations = in.q_key_violations();
  port.local_phy_errors = in.local_phy_errors();
  port.overrun_errors = in.overrun_errors();

  const Hop self{node_index, p};
  if (phys == kPhysDisabled) {
    port.disabled = true;
    m_.set_link_down(self);
  } else if (phys == kPhysPolling && port.disabled) {
    port.disabled = false;
    m_.try_link_up(self);
  }
  if (want == PortState::kDown) {
    if (port.state != PortState::kDown) {
      port.state = PortState::kDown;
      if (port.peer) m_.set_link_down(self);
    }
    bounce_ = self;
  } else if ((want == PortState::kArmed || want == PortState::kActive) &&
             port.state != PortState::kDown) {
    port.state = want;
  }
  return MadStatus::kOk;
}

MadStatus Sma::get_guid_info(Hop at, const mad::Smp& req, mad::Smp* resp) {
  const NodeModel& n = m_.node(at.node);
  // IBA 14.2.5.5: GUIDInfo belongs to CA ports and switch port 0; GUIDCap is
  // 1, so only block 0 exists.
  if (req.attr_mod() != 0) return MadStatus::kInvalidField;
  mad::GuidInfo gi;
  gi.set_guid(0, n.is_switch() ? n.ports[0].guid : n.ports[size_t(at.port)].guid);
  resp->set_attr(gi);
  return MadStatus::kOk;
}

MadStatus Sma::do_pkey_table(Hop at, const mad::Smp& req, mad::Smp* resp) {
  NodeModel& n = m_.node(at.node);
  // IBA 14.2.5.7: bits 0-15 block, bits 16-23 port (switches; CAs use the
  // receiving port). At most 16 entries (kMaxPkeys): only block 0.
  const uint32_t mod = req.attr_mod();
  const uint32_t block = mod & 0xffff;
  const uint32_t port = (mod >> 16) & 0xff;
  if (block != 0 || (mod >> 24) != 0) return MadStatus::kInvalidField;
  if (n.is_switch() ? port > uint32_t(n.num_ports()) : port != 0) return MadStatus::kInvalidField;
  // A switch without partition enforcement (SwitchInfo:
  // PartitionEnforcementCap 0) reports its own table for every port.
  PortModel& table_port = n.ports[size_t(n.is_switch() ? 0 : at.port)];
  if (req.method() == Method::kSet) {
    if (n.is_switch() && port != 0) return MadStatus::kInvalidField;
    // Entries past PartitionCap do not exist and are ignored; 0x0000 and
    // 0x8000 leave an entry empty (IBA 10.9.1.2).
    const auto in = req.get_attr<mad::PKeyTable>();
    for (size_t i = 0; i < n.partition_cap; ++i) table_port.pkeys[i] = in.pkey(i);
  }
  mad::PKeyTable t;
  for (size_t i = 0; i < n.partition_cap; ++i) t.set_pkey(i, table_port.pkeys[i]);
  resp->set_attr(t);
  return MadStatus::kOk;
}

MadStatus Sma::do_lft(Hop at, const mad::Smp& req, mad::Smp* resp) {
  NodeModel& n = m_.node(at.node);
  // IBA 14.2.5.10: the modifier is the block of 64 LIDs.
  const uint32_t block = req.attr_mod();
  if (block >= kLinearFdbCap / mad::LinearForwardingTable::kEntries)
    return MadStatus::kInvalidField;
  const size_t first = size_t(block) * mad::LinearForwardingTable::kEntries;
  if (req.method() == Method::kSet) {
    const auto in = req.get_attr<mad::LinearForwardingTable>();
    for (size_t i = 0; i < mad::LinearForwardingTable::kEntries; ++i) n.lft[first + i] = in.port(i);
    ++m_.lft_generation;
  }
  mad::LinearForwardingTable out;
  for (size_t i = 0; i < mad::LinearForwardingTable::kEntries; ++i)
    out.set_port(i, n.lft[first + i]);
  resp->set_attr(out);
  return MadStatus::kOk;
}

MadStatus Sma::get_sm_info(Hop at, const mad::Smp& req, mad::Smp* resp) {
  NodeModel& n = m_.node(at.node);
  // IBA 14.2.5.13: SMInfo is answered where an SM runs. The SM process
  // cannot see SMPs here, so the SMA of its port answers for it, with the
  // priority and state the SM last published (control op sm_info).
  if (n.is_switch()) return MadStatus::kUnsupportedMethodAttr;
  PortModel& port = n.ports[size_t(at.port)];
  if (!(port.cap_mask & mad::kCapIsSm)) return MadStatus::kUnsupportedMethodAttr;
  if (req.attr_mod() != 0) return MadStatus::kInvalidField;
  mad::SmInfo si;
  si.set_guid(port.guid);
  si.set_sm_key(0);
  si.set_act_count(port.sm_act_count);
  si.set_priority(port.sm_priority);
  si.set_sm_state(port.sm_state);
  resp->set_attr(si);
  return MadStatus::kOk;
}

}  // namespace ibemu::subnet_detail
