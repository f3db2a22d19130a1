#include "common/mad/mad.h"

#include <cctype>
#include <cstdio>

#include "common/mad/smp.h"
#include "common/mad/smp_attributes.h"

namespace ibemu::mad {

namespace {

std::string hex(unsigned v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%0*x", width, v);
  return buf;
}

}  // namespace

std::string to_string(MgmtClass c) {
  switch (c) {
    case MgmtClass::kSubnLid:
      return "SubnMgt(LID)";
    case MgmtClass::kSubnAdm:
      return "SubnAdm";
    case MgmtClass::kPerfMgt:
      return "PerfMgt";
    case MgmtClass::kBoardMgt:
      return "BMgt";
    case MgmtClass::kDevMgt:
      return "DevMgt";
    case MgmtClass::kCommMgt:
      return "ComMgt";
    case MgmtClass::kSnmp:
      return "SNMP";
    case MgmtClass::kSubnDirected:
      return "SubnMgt(DR)";
  }
  return "class " + hex(unsigned(c), 2);
}

std::string to_string(Method m) {
  switch (m) {
    case Method::kGet:
      return "Get";
    case Method::kSet:
      return "Set";
    case Method::kSend:
      return "Send";
    case Method::kTrap:
      return "Trap";
    case Method::kReport:
      return "Report";
    case Method::kTrapRepress:
      return "TrapRepress";
    case Method::kGetTable:
      return "GetTable";
    case Method::kGetTraceTable:
      return "GetTraceTable";
    case Method::kGetMulti:
      return "GetMulti";
    case Method::kDelete:
      return "Delete";
    case Method::kGetResp:
      return "GetResp";
    case Method::kReportResp:
      return "ReportResp";
    case Method::kGetTableResp:
      return "GetTableResp";
    case Method::kGetMultiResp:
      return "GetMultiResp";
    case Method::kDeleteResp:
      return "DeleteResp";
  }
  return "method " + hex(unsigned(m), 2);
}

std::string to_string(AttrId a) {
  switch (a) {
    case AttrId::kClassPortInfo:
      return "ClassPortInfo";
    case AttrId::kNotice:
      return "Notice";
    case AttrId::kInformInfo:
      return "InformInfo";
    case AttrId::kNodeDescription:
      return "NodeDescription";
    case AttrId::kNodeInfo:
      return "NodeInfo";
    case AttrId::kSwitchInfo:
      return "SwitchInfo";
    case AttrId::kGuidInfo:
      return "GUIDInfo";
    case AttrId::kPortInfo:
      return "PortInfo";
    case AttrId::kPKeyTable:
      return "P_KeyTable";
    case AttrId::kSlToVlMappingTable:
      return "SLtoVLMappingTable";
    case AttrId::kVlArbitrationTable:
      return "VLArbitrationTable";
    case AttrId::kLinearForwardingTable:
      return "LinearForwardingTable";
    case AttrId::kRandomForwardingTable:
      return "RandomForwardingTable";
    case AttrId::kMulticastForwardingTable:
      return "MulticastForwardingTable";
    case AttrId::kSmInfo:
      return "SMInfo";
    case AttrId::kVendorDiag:
      return "VendorDiag";
    case AttrId::kLedInfo:
      return "LedInfo";
  }
  return "attribute " + hex(unsigned(a), 4);
}

std::string to_string(MadStatus s) {
  const unsigned v = unsigned(s);
  std::string out;
  auto add = [&out](const char* part) {
    if (!out.empty()) out += ", ";
    out += part;
  };
  if (v & 0x0001) add("busy");
  if (v & 0x0002) add("redirect");
  // IBA 13.4.7: bits 2-4 are one code, not independent flags.
  switch ((v >> 2) & 7) {
    case 0:
      break;
    case 1:
      add("bad class or version");
      break;
    case 2:
      add("method not supported");
      break;
    case 3:
      add("method/attribute not supported");
      break;
    case 7:
      add("invalid attribute field");
      break;
    default:
      add("reserved code");
      break;
  }
  if (v & 0xffe0) add(("class-specific " + hex(v & 0xffe0, 4)).c_str());
  return out.empty() ? "ok" : out;
}

std::string to_string(NodeType t) {
  switch (t) {
    case NodeType::kCa:
      return "CA";
    case NodeType::kSwitch:
      return "Switch";
    case NodeType::kRouter:
      return "Router";
  }
  return "node type " + std::to_string(unsigned(t));
}

std::string to_string(SmState s) {
  switch (s) {
    case SmState::kNotActive:
      return "NotActive";
    case SmState::kDiscovering:
      return "Discovering";
    case SmState::kStandby:
      return "Standby";
    case SmState::kMaster:
      return "Master";
  }
  return "SM state " + std::to_string(unsigned(s));
}

std::string sm_state_keyword(SmState s) {
  switch (s) {
    case SmState::kNotActive:
      return "notactive";
    case SmState::kDiscovering:
      return "discovering";
    case SmState::kStandby:
      return "standby";
    case SmState::kMaster:
      return "master";
  }
  return "state" + std::to_string(unsigned(s));
}

std::optional<SmState> parse_sm_state(std::string_view keyword) {
  std::string lower(keyword);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (SmState s :
       {SmState::kNotActive, SmState::kDiscovering, SmState::kStandby, SmState::kMaster})
    if (lower == sm_state_keyword(s)) return s;
  return std::nullopt;
}

std::string NodeDescription::text() const {
  size_t n = 0;
  while (n < bytes.size() && bytes[n]) ++n;
  return std::string(reinterpret_cast<const char*>(bytes.data()), n);
}

void NodeDescription::set_text(std::string_view s) noexcept {
  bytes.fill(0);
  for (size_t i = 0; i < s.size() && i < bytes.size(); ++i) bytes[i] = uint8_t(s[i]);
}

Smp Smp::make_lid_routed(Method m, AttrId attr, uint32_t attr_mod, uint64_t tid) noexcept {
  Smp s;
  s.set_base_version(kBaseVersion);
  s.set_mgmt_class(MgmtClass::kSubnLid);
  s.set_class_version(kSmpClassVersion);
  s.set_method(m);
  s.set_tid(tid);
  s.set_attr_id(attr);
  s.set_attr_mod(attr_mod);
  return s;
}

Smp Smp::make_directed(Method m, AttrId attr, uint32_t attr_mod, uint64_t tid, const uint8_t* path,
                       size_t hops) noexcept {
  Smp s = make_lid_routed(m, attr, attr_mod, tid);
  s.set_mgmt_class(MgmtClass::kSubnDirected);
  if (!path) hops = 0;
  if (hops > kMaxDrHops) hops = kMaxDrHops;
  s.set_hop_count(uint8_t(hops));
  s.set_hop_pointer(0);
  // IBA 14.2.2: an all-directed route has permissive DrSLID and DrDLID.
  s.set_dr_slid(kPermissiveLid);
  s.set_dr_dlid(kPermissiveLid);
  for (size_t i = 0; i < hops; ++i) s.set_initial_path(i + 1, path[i]);
  return s;
}

}  // namespace ibemu::mad

namespace ibemu {

std::string to_string(PortState s) {
  switch (s) {
    case PortState::kNop:
      return "NoChange";
    case PortState::kDown:
      return "Down";
    case PortState::kInit:
      return "Initializing";
    case PortState::kArmed:
      return "Armed";
    case PortState::kActive:
      return "Active";
  }
  return "PortState " + std::to_string(unsigned(s));
}

std::string to_string(PhysState s) {
  switch (s) {
    case PhysState::kSleep:
      return "Sleep";
    case PhysState::kPolling:
      return "Polling";
    case PhysState::kDisabled:
      return "Disabled";
    case PhysState::kLinkUp:
      return "LinkUp";
  }
  return "PhysState " + std::to_string(unsigned(s));
}

}  // namespace ibemu
