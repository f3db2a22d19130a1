#include "emulator-daemon/subnet.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common/mad/smp.h"
#include "common/mad/smp_attributes.h"
#include "emulator-daemon/mad_packet.h"
#include "emulator-daemon/sma.h"
#include "emulator-daemon/smi.h"
#include "emulator-daemon/subnet_model.h"

namespace ibemu {

using subnet_detail::Hop;
using subnet_detail::NodeModel;
using subnet_detail::PortModel;
using subnet_detail::SubnetModel;

namespace {

constexpr uint16_t kSwitchDeviceId = 0xbe01;
// IBA 14.2.5.6 CapabilityMask of every CA port: what the emulated CA does.
constexpr uint32_t kCaCapMask =
    mad::kCapIsSystemImageGuidSupported | mad::kCapIsExtendedSpeedsSupported |
    mad::kCapIsCommunicationManagementSupported | mad::kCapIsClientReregistrationSupported;
constexpr uint32_t kSwitchCapMask =
    mad::kCapIsSystemImageGuidSupported | mad::kCapIsExtendedSpeedsSupported;

std::string hostname() {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = 0;
  return host;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

PortModel fresh_port(uint64_t guid, uint64_t prefix, uint8_t mtu, uint32_t cap,
                     const std::vector<uint16_t>& pkeys) {
  PortModel p;
  p.guid = guid;
  std::copy_n(pkeys.begin(), std::min(pkeys.size(), p.pkeys.size()), p.pkeys.begin());
  p.gid_prefix = prefix;
  p.cap_mask = cap;
  p.mtu_cap = mtu;
  p.neighbor_mtu = mtu;
  p.link_width_enabled = subnet_detail::kWidthSupported;
  p.link_speed_enabled = subnet_detail::kSpeedSupported;
  p.link_speed_ext_enabled = subnet_detail::kSpeedExtSupported;
  return p;
}

// ibv_port_attr.active_speed of 4X EDR, which every port reports.
constexpr uint8_t kIbvSpeedEdr = 32;
constexpr uint16_t kRateGbps = 100;

}  // namespace

std::string rate_string(const PortAttributes& a) {
  const char* width = "4X";
  switch (a.link_width_active) {
    case mad::kLinkWidth1x:
      width = "1X";
      break;
    case mad::kLinkWidth8x:
      width = "8X";
      break;
    case mad::kLinkWidth12x:
      width = "12X";
      break;
    default:
      break;
  }
  const char* speed = "";
  switch (a.link_speed_active) {
    case 1:
      speed = " SDR";
      break;
    case 2:
      speed = " DDR";
      break;
    case 4:
      speed = " QDR";
      break;
    case 8:
      speed = " FDR10";
      break;
    case 16:
      speed = " FDR";
      break;
    case 32:
      speed = " EDR";
      break;
    default:
      break;
  }
  return std::to_string(a.rate_gbps) + " Gb/sec (" + width + speed + ")";
}

Subnet::Subnet(const Config& cfg) : cfg_(cfg), model_(std::make_unique<SubnetModel>()) {
  const uint8_t mtu =
      uint8_t(mtu_enum_from_bytes(cfg.max_mtu) ? mtu_enum_from_bytes(cfg.max_mtu) : 5);
  SubnetModel& m = *model_;
  int ca_ports = 0;
  for (const auto& d : cfg.devices) {
    NodeModel n;
    n.type = mad::NodeType::kCa;
    n.guid = d.node_guid;
    n.sys_image_guid = d.sys_image_guid ? d.sys_image_guid : d.node_guid;
    n.description = d.node_desc;
    n.vendor_id = d.vendor_id;
    n.device_id = uint16_t(d.vendor_part_id);
    n.revision = d.hw_ver;
    // Room for an SM's partitions: the config's table fills the first entries.
    n.partition_cap = kMaxPkeys;
    n.ports.resize(1);  // entry 0 unused on a CA
    for (int p = 1; p <= d.ports; ++p) {
      n.ports.push_back(fresh_port(d.node_guid + uint64_t(p), cfg.subnet_prefix, mtu, kCaCapMask,
                                   cfg.pkey_table()));
      ++ca_ports;
    }
    m.nodes.push_back(std::move(n));
  }
  if (ca_ports == 0) throw std::invalid_argument("the subnet needs at least one CA port");
  if (ca_ports > 254) throw std::invalid_argument("at most 254 CA ports fit on the switch");

  // The switch GUID: the devices' scheme with an index no device uses;
  // bumped past any configured GUID it would collide with.
  uint64_t sw_guid = (0x02ull << 56) | (uint64_t(cfg.host_id) << 24) | 0xff00;
  for (bool clash = true; clash;) {
    clash = false;
    for (const auto& n : m.nodes)
      for (const auto& p : n.ports) clash |= n.guid == sw_guid || p.guid == sw_guid;
    if (clash) ++sw_guid;
  }
  NodeModel sw;
  // Port 0 is an end port with a table of its own; the external ports have
  // none (no partition enforcement).
  sw.partition_cap = kMaxPkeys;
  const std::vector<uint16_t> switch_pkeys{cfg.default_pkey};
  sw.type = mad::NodeType::kSwitch;
  sw.guid = sw_guid;
  sw.sys_image_guid = sw_guid;
  sw.description = "ibemu-switch " + hostname();
  sw.vendor_id = cfg.devices.empty() ? 0x02c9 : cfg.devices[0].vendor_id;
  sw.device_id = kSwitchDeviceId;
  sw.lft.assign(subnet_detail::kLinearFdbCap, 0xff);
  // Port 0 shares the node GUID (IBA 14.2.5.3: a switch has one port GUID).
  sw.ports.push_back(fresh_port(sw_guid, cfg.subnet_prefix, mtu, kSwitchCapMask, switch_pkeys));
  m.switch_node = int(m.nodes.size());
  for (int dev = 0; dev < int(cfg.devices.size()); ++dev) {
    for (int p = 1; p <= cfg.devices[size_t(dev)].ports; ++p) {
      const int sp = sw.num_ports() + 1;
      PortModel port = fresh_port(0, cfg.subnet_prefix, mtu, kSwitchCapMask, switch_pkeys);
      port.peer = Hop{dev, p};
      m.node(dev).ports[size_t(p)].peer = Hop{m.switch_node, sp};
      sw.ports.push_back(port);
    }
  }
  // Inter-host ports follow the CA ports; Down until the far host answers.
  first_uplink_port_ = sw.num_ports() + 1;
  const int uplinks = cfg.fabric.enabled ? cfg.fabric.max_hosts - 1 : 0;
  if (first_uplink_port_ + uplinks > 255)
    throw std::invalid_argument("too many CA ports and inter-host ports for one switch");
  for (int i = 0; i < uplinks; ++i) {
    PortModel port = fresh_port(0, cfg.subnet_prefix, mtu, kSwitchCapMask, switch_pkeys);
    port.uplink = i;
    sw.ports.push_back(port);
  }
  m.nodes.push_back(std::move(sw));

  // Cables are in from the start: every link trains to Init with LID 0,
  // as on hardware before an SM (IBA 7.2).
  m.try_link_up(Hop{m.switch_node, 0});
  for (int p = 1; p <= m.node(m.switch_node).num_ports(); ++p) m.try_link_up(Hop{m.switch_node, p});
  m.node(m.switch_node).port_state_change = false;
}

Subnet::~Subnet() = default;

std::optional<std::array<uint8_t, 256>> Subnet::process_smp(PortRef sm_port, const uint8_t* mad,
                                                            size_t len, uint16_t dlid,
                                                            bool* departed) {
  SubnetModel& m = *model_;
  const Hop origin{sm_port.device, sm_port.port};
  if (sm_port.device < 0 || sm_port.device >= int(cfg_.devices.size()) || !m.valid(origin) ||
      origin.port == 0)
    return std::nullopt;
  auto parsed = mad::Smp::from_bytes(mad, len);
  if (!parsed) return std::nullopt;
  mad::Smp smp = *parsed;
  if (smp.mgmt_class() != mad::MgmtClass::kSubnDirected &&
      smp.mgmt_class() != mad::MgmtClass::kSubnLid)
    return std::nullopt;

  const auto before = snapshot();
  const uint64_t lfts = m.lft_generation;
  ++m.port(origin).sm_act_count;
  subnet_detail::Sma sma(m);
  std::optional<mad::Smp> resp;
  // Where the response must end: back at the SM's port.
  auto back_home = [&](const subnet_detail::Onward<Hop>& onward) {
    auto* h = std::get_if<Hop>(&onward);
    return h && *h == origin;
  };
  if (smp.is_directed()) {
    auto where = subnet_detail::dr_outbound(m, origin, smp);
    if (auto* dep = std::get_if<subnet_detail::Departure>(&where)) {
      depart(m.port(dep->egress).uplink, mad::kPermissiveLid, mad::kPermissiveLid,
             smp.bytes.data());
      if (departed) *departed = true;
    } else if (auto* d = std::get_if<subnet_detail::DrDelivery>(&where)) {
      resp = sma.handle(d->at, smp);
      if (resp && !back_home(subnet_detail::dr_return(m, *d, *resp))) resp.reset();
    }
  } else {
    // The LRH DLID picks the node; the permissive DLID reaches the SM's link
    // neighbour, whatever LIDs are set (IBA 14.2.2).
    const uint16_t slid = m.port(origin).lid;
    subnet_detail::Onward<Hop> dest;
    if (dlid != mad::kPermissiveLid)
      dest = subnet_detail::lid_route_onward(m, origin, dlid);
    else if (m.leaves_host(origin))
      dest = subnet_detail::Departure{origin};
    else if (auto n = m.cross(origin))
      dest = *n;
    if (auto* dep = std::get_if<subnet_detail::Departure>(&dest)) {
      depart(m.port(dep->egress).uplink, slid, dlid, smp.bytes.data());
      if (departed) *departed = true;
    } else if (auto* at = std::get_if<Hop>(&dest)) {
      resp = sma.handle(*at, smp);
      // The response goes to the request's SLID (the SM port's LID), or back
      // over the same link when the request used the permissive DLID.
      bool back = false;
      if (resp) {
        if (dlid == mad::kPermissiveLid) {
          back = m.cross(*at) == std::optional<Hop>(origin) || *at == origin;
        } else {
          const Hop from = m.node(at->node).is_switch() ? Hop{at->node, 0} : *at;
          back = slid != 0 && back_home(subnet_detail::lid_route_onward(m, from, slid));
        }
      }
      if (!back) resp.reset();
    }
  }
  notify(before);
  if (m.lft_generation != lfts && lft_changed_) lft_changed_();
  if (!resp) return std::nullopt;
  return resp->bytes;
}

int Subnet::uplink_count() const {
  return model_->node(model_->switch_node).num_ports() - first_uplink_port_ + 1;
}

int Subnet::uplink_port(int uplink) const { return first_uplink_port_ + uplink; }

void Subnet::set_uplink_alive(int uplink, bool alive) {
  if (uplink < 0 || uplink >= uplink_count()) return;
  const auto before = snapshot();
  model_->set_uplink_alive(Hop{model_->switch_node, uplink_port(uplink)}, alive);
  notify(before);
}

bool Subnet::uplink_up(int uplink) const {
  return uplink >= 0 && uplink < uplink_count() &&
         model_->leaves_host(Hop{model_->switch_node, uplink_port(uplink)});
}

std::optional<int> Subnet::uplink_for_lid(uint16_t lid) const {
  const NodeModel& sw = model_->node(model_->switch_node);
  if (lid == 0 || lid > sw.lft_top || lid >= sw.lft.size()) return std::nullopt;
  const int egress = sw.lft[lid];
  if (!sw.valid_port(egress) || sw.ports[size_t(egress)].uplink < 0) return std::nullopt;
  return sw.ports[size_t(egress)].uplink;
}

void Subnet::depart(int uplink, uint16_t slid, uint16_t dlid, const uint8_t* mad) {
  if (departure_) departure_(uplink, build_mad_packet({slid, dlid, 0, 0}, mad, mad::kMadSize));
}

template <typename Outcome>
void Subnet::forward_response(const Outcome& to, uint16_t slid, uint16_t dlid,
                              const std::array<uint8_t, 256>& resp) {
  if (auto* dep = std::get_if<subnet_detail::Departure>(&to)) {
    depart(model_->port(dep->egress).uplink, slid, dlid, resp.data());
  } else if (auto* h = std::get_if<Hop>(&to)) {
    if (h->node < int(cfg_.devices.size()) && returned_)
      returned_(PortRef{h->node, h->port}, slid, resp);
  }
}

void Subnet::receive_smp(int uplink, uint16_t slid, uint16_t dlid, const uint8_t* mad, size_t len) {
  // A link that is down carries nothing; MADs are 256 bytes.
  if (!uplink_up(uplink) || !mad || len != mad::kMadSize) return;
  auto smp = mad::Smp::from_bytes(mad, mad::kMadSize);
  if (!smp) return;
  const auto before = snapshot();
  const uint64_t lfts = model_->lft_generation;
  if (smp->is_directed())
    receive_directed(uplink_port(uplink), *smp, slid, dlid);
  else if (mad[1] == uint8_t(mad::MgmtClass::kSubnLid))
    receive_lid_routed(uplink_port(uplink), *smp, slid, dlid);
  notify(before);
  if (model_->lft_generation != lfts && lft_changed_) lft_changed_();
}

void Subnet::receive_directed(int switch_port, mad::Smp& smp, uint16_t slid, uint16_t dlid) {
  SubnetModel& m = *model_;
  const Hop at{m.switch_node, switch_port};
  if (smp.direction()) {
    forward_response(subnet_detail::dr_return_arrived(m, at, smp), slid, dlid, smp.bytes);
    return;
  }
  auto where = subnet_detail::dr_outbound_arrived(m, at, smp);
  if (auto* dep = std::get_if<subnet_detail::Departure>(&where)) {
    depart(m.port(dep->egress).uplink, slid, dlid, smp.bytes.data());
  } else if (auto* d = std::get_if<subnet_detail::DrDelivery>(&where)) {
    subnet_detail::Sma sma(m);
    if (auto resp = sma.handle(d->at, smp))
      forward_response(subnet_detail::dr_return(m, *d, *resp), mad::kPermissiveLid,
                       mad::kPermissiveLid, resp->bytes);
  }
}

void Subnet::receive_lid_routed(int switch_port, mad::Smp& smp, uint16_t slid, uint16_t dlid) {
  SubnetModel& m = *model_;
  const Hop at{m.switch_node, switch_port};
  const bool response = smp.bytes[3] & 0x80;  // IBA 13.4.5: the R bit of Method
  if (response) {
    forward_response(subnet_detail::lid_route_arrived(m, at, dlid), slid, dlid, smp.bytes);
    return;
  }
  // The permissive DLID is consumed by the first node: this switch.
  subnet_detail::Onward<Hop> dest = dlid == mad::kPermissiveLid
                                        ? subnet_detail::Onward<Hop>(at)
                                        : subnet_detail::lid_route_arrived(m, at, dlid);
  if (auto* dep = std::get_if<subnet_detail::Departure>(&dest)) {
    depart(m.port(dep->egress).uplink, slid, dlid, smp.bytes.data());
    return;
  }
  auto* to = std::get_if<Hop>(&dest);
  if (!to) return;
  subnet_detail::Sma sma(m);
  auto resp = sma.handle(*to, smp);
  if (!resp) return;
  const Hop from = m.node(to->node).is_switch() ? Hop{to->node, 0} : *to;
  const uint16_t own = m.port(from).lid;
  if (dlid == mad::kPermissiveLid)
    forward_response(subnet_detail::Onward<Hop>(subnet_detail::Departure{at}), own, slid,
                     resp->bytes);
  else
    forward_response(subnet_detail::lid_route_onward(m, from, slid), own, slid, resp->bytes);
}

PortAttributes Subnet::port(PortRef p) const {
  const SubnetModel& m = *model_;
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !m.valid(h)) return {};
  const PortModel& pm = m.port(h);
  PortAttributes a;
  a.state = pm.state;
  a.phys_state = pm.phys;
  a.lid = pm.lid;
  a.sm_lid = pm.sm_lid;
  a.lmc = pm.lmc;
  a.sm_sl = pm.sm_sl;
  a.neighbor_mtu = pm.neighbor_mtu;
  a.max_mtu = pm.mtu_cap;
  a.cap_mask = pm.cap_mask;
  a.port_guid = pm.guid;
  a.subnet_prefix = pm.gid_prefix;
  a.link_width_active = subnet_detail::kWidthActive;
  a.link_speed_active = kIbvSpeedEdr;
  a.rate_gbps = kRateGbps;
  a.client_reregister_count = pm.client_reregister_count;
  a.num_pkeys = uint8_t(m.node(h.node).partition_cap);
  a.pkeys = pm.pkeys;
  return a;
}

void Subnet::set_is_sm(PortRef p, bool is_sm) {
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !model_->valid(h))
    return;
  const auto before = snapshot();
  PortModel& pm = model_->port(h);
  pm.cap_mask = is_sm ? pm.cap_mask | mad::kCapIsSm : pm.cap_mask & ~mad::kCapIsSm;
  pm.sm_priority = 0;
  pm.sm_state = is_sm ? mad::SmState::kDiscovering : mad::SmState::kNotActive;
  notify(before);
}

void Subnet::modify_capabilities(PortRef p, uint32_t set, uint32_t clear) {
  if (set & mad::kCapIsSm) set_is_sm(p, true);
  if (clear & mad::kCapIsSm) set_is_sm(p, false);
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !model_->valid(h))
    return;
  const auto before = snapshot();
  PortModel& pm = model_->port(h);
  pm.cap_mask = (pm.cap_mask | (set & ~mad::kCapIsSm)) & ~(clear & ~mad::kCapIsSm);
  notify(before);
}

void Subnet::set_sm_info(PortRef p, uint8_t priority, mad::SmState state) {
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !model_->valid(h))
    return;
  PortModel& pm = model_->port(h);
  pm.sm_priority = priority & 0xf;  // a 4-bit field
  pm.sm_state = state;
}

Subnet::SmInfoView Subnet::sm_info(PortRef p) const {
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !model_->valid(h))
    return {};
  const PortModel& pm = model_->port(h);
  return SmInfoView{pm.sm_priority, pm.sm_state};
}

void Subnet::set_link_up(PortRef p, bool up) {
  const Hop h{p.device, p.port};
  if (p.device < 0 || p.device >= int(cfg_.devices.size()) || p.port < 1 || !model_->valid(h))
    return;
  const auto before = snapshot();
  PortModel& pm = model_->port(h);
  pm.cable = up;
  if (pm.peer) model_->port(*pm.peer).cable = up;
  if (up)
    model_->try_link_up(h);
  else
    model_->set_link_down(h);
  notify(before);
}

void Subnet::on_port_change(std::function<void(PortRef)> cb) {
  if (cb) callbacks_.push_back(std::move(cb));
}

std::optional<PortRef> Subnet::port_by_lid(uint16_t lid) const {
  if (!mad::is_unicast_lid(lid)) return std::nullopt;
  for (const PortRef& p : ports())
    if (model_->port_owns_lid(Hop{p.device, p.port}, lid)) return p;
  return std::nullopt;
}

std::vector<PortRef> Subnet::ports() const {
  std::vector<PortRef> out;
  for (int d = 0; d < int(cfg_.devices.size()); ++d)
    for (int p = 1; p <= model_->node(d).num_ports(); ++p) out.push_back(PortRef{d, p});
  return out;
}

nlohmann::json Subnet::describe() const {
  const SubnetModel& m = *model_;
  const NodeModel& sw = m.node(m.switch_node);
  auto port_name = [this](Hop h) {
    return cfg_.devices[size_t(h.node)].name + "/" + std::to_string(h.port);
  };
  nlohmann::json sw_ports = nlohmann::json::array();
  for (int p = 0; p <= sw.num_ports(); ++p) {
    const PortModel& pm = sw.ports[size_t(p)];
    nlohmann::json j = {
        {"port", p}, {"state", to_string(pm.state)}, {"phys_state", to_string(pm.phys)}};
    if (pm.peer) j["peer"] = port_name(*pm.peer);
    if (pm.uplink >= 0) j["uplink"] = pm.uplink;
    sw_ports.push_back(j);
  }
  nlohmann::json lft = nlohmann::json::object();
  for (size_t lid = 1; lid <= sw.lft_top && lid < sw.lft.size(); ++lid)
    if (sw.lft[lid] != 0xff) lft[std::to_string(lid)] = sw.lft[lid];
  nlohmann::json out;
  out["switch"] = {{"guid", hex64(sw.guid)},
                   {"description", sw.description},
                   {"lid", sw.ports[0].lid},
                   {"sm_lid", sw.ports[0].sm_lid},
                   {"linear_fdb_top", sw.lft_top},
                   {"ports", sw_ports},
                   {"lft", lft}};
  nlohmann::json ca = nlohmann::json::array();
  for (const PortRef& p : ports()) {
    const PortAttributes a = port(p);
    const Hop peer = *m.port(Hop{p.device, p.port}).peer;
    ca.push_back({{"device", cfg_.devices[size_t(p.device)].name},
                  {"port", p.port},
                  {"guid", hex64(a.port_guid)},
                  {"lid", a.lid},
                  {"lmc", a.lmc},
                  {"sm_lid", a.sm_lid},
                  {"state", to_string(a.state)},
                  {"phys_state", to_string(a.phys_state)},
                  {"is_sm", (a.cap_mask & mad::kCapIsSm) != 0},
                  {"switch_port", peer.port}});
  }
  out["ports"] = ca;
  return out;
}

uint64_t Subnet::switch_guid() const { return model_->node(model_->switch_node).guid; }

uint16_t Subnet::switch_lid() const { return model_->node(model_->switch_node).ports[0].lid; }

uint8_t Subnet::switch_lft(uint16_t lid) const {
  const auto& lft = model_->node(model_->switch_node).lft;
  return lid < lft.size() ? lft[lid] : 0xff;
}

std::vector<PortAttributes> Subnet::snapshot() const {
  std::vector<PortAttributes> out;
  for (const PortRef& p : ports()) out.push_back(port(p));
  return out;
}

void Subnet::notify(const std::vector<PortAttributes>& before) {
  const auto all = ports();
  const auto after = snapshot();
  for (size_t i = 0; i < all.size() && i < before.size(); ++i)
    if (!(before[i] == after[i]))
      for (auto& cb : callbacks_) cb(all[i]);
}

}  // namespace ibemu
