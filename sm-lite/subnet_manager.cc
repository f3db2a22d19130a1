#include "sm-lite/subnet_manager.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <set>

namespace ibemu::sm {

using mad::AttrId;
using mad::MadStatus;
using mad::Method;
using mad::NodeType;
using mad::SmState;

namespace {

// IBA 14.2.5.6 SubnetTimeOut: 4.096 us * 2^18, about 1 s, as SMs commonly set.
constexpr uint8_t kSubnetTimeout = 18;
constexpr uint8_t kNoRoute = 0xff;
constexpr int kAttempts = 3;

std::string path_string(const DrPath& path) {
  std::string s = "0";
  for (uint8_t p : path) s += fmt::format(",{}", p);
  return s;
}

bool is_endpoint_port(const SmNode& n, int port) {
  return n.type == NodeType::kSwitch ? port == 0 : port >= 1;
}

// The IBA name of a state, as the log prints it: "STANDBY".
std::string state_name(SmState s) {
  std::string name = mad::sm_state_keyword(s);
  for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

std::string describe(const PeerSm& sm) {
  return fmt::format("{:#018x} (priority {}, {})", sm.rank.guid, sm.rank.priority,
                     state_name(sm.state));
}

}  // namespace

SubnetManager::SubnetManager(SmpTransport& transport, Log log)
    : transport_(transport),
      log_(std::move(log)),
      // Distinct TID ranges per SM process make stale responses recognisable.
      next_tid_(uint64_t(getpid()) << 32) {}

void SubnetManager::log(const std::string& line) const {
  if (log_) log_(line);
}

std::optional<mad::Smp> SubnetManager::dr(Method m, AttrId attr, uint32_t mod, const DrPath& path,
                                          const uint8_t* data, size_t data_len) {
  auto what = [&] {
    return fmt::format("{} {}({}) via DR path {}", mad::to_string(m), mad::to_string(attr), mod,
                       path_string(path));
  };
  // A lost SMP or response is retried with a new TID, as SMs do; a response
  // with an error status is an answer and is not.
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    const uint64_t tid = ++next_tid_;
    mad::Smp req = mad::Smp::make_directed(m, attr, mod, tid, path.data(), path.size());
    if (data) std::memcpy(req.data(), data, std::min(data_len, mad::kSmpDataSize));
    auto raw = transport_.send(req.bytes);
    if (!raw) continue;
    auto resp = mad::Smp::from_bytes(raw->data(), raw->size());
    if (!resp || resp->tid() != tid || resp->method() != Method::kGetResp ||
        resp->attr_id() != attr || !resp->is_directed())
      continue;  // not the answer to this request
    if (resp->status() != MadStatus::kOk) {
      log(fmt::format("{}: status {}", what(), mad::to_string(resp->status())));
      return std::nullopt;
    }
    return resp;
  }
  log(fmt::format("{}: no response after {} tries", what(), kAttempts));
  return std::nullopt;
}

template <typename A>
std::optional<A> SubnetManager::get(AttrId attr, uint32_t mod, const DrPath& path) {
  auto r = dr(Method::kGet, attr, mod, path);
  if (!r) return std::nullopt;
  return r->template get_attr<A>();
}

template <typename A>
std::optional<A> SubnetManager::set(AttrId attr, uint32_t mod, const DrPath& path, const A& value) {
  auto r = dr(Method::kSet, attr, mod, path, value.bytes.data(), value.bytes.size());
  if (!r) return std::nullopt;
  return r->template get_attr<A>();
}

SmNode* SubnetManager::find(uint64_t guid) {
  for (auto& n : nodes_)
    if (n.guid == guid) return &n;
  return nullptr;
}

bool SubnetManager::discover() {
  nodes_.clear();
  discovery_errors_ = 0;
  struct Visit {
    DrPath path;
    std::optional<std::pair<uint64_t, int>> from;  // the port the path left by
  };
  std::deque<Visit> queue;
  queue.push_back(Visit{});
  while (!queue.empty()) {
    const Visit v = queue.front();
    queue.pop_front();
    auto ni = get<mad::NodeInfo>(AttrId::kNodeInfo, 0, v.path);
    if (!ni) {
      if (v.path.empty()) return false;  // not even our own node answers
      ++discovery_errors_;
      continue;
    }
    const uint64_t guid = ni->node_guid();
    const int in_port = ni->local_port_num();
    bool fresh = false;
    if (!find(guid)) {
      SmNode n;
      n.guid = guid;
      n.type = ni->node_type();
      n.num_ports = ni->num_ports();
      n.info = *ni;
      n.path = v.path;
      if (auto nd = get<mad::NodeDescription>(AttrId::kNodeDescription, 0, v.path))
        n.description = nd->text();
      else
        ++discovery_errors_;
      log(fmt::format("found {} {:#018x} \"{}\" ({} ports) at DR path {}", mad::to_string(n.type),
                      guid, n.description, n.num_ports, path_string(v.path)));
      nodes_.push_back(std::move(n));
      fresh = true;
    }
    SmNode& n = *find(guid);
    if (in_port > n.num_ports) continue;  // a NodeInfo that makes no sense
    if (v.path.empty()) {
      sm_node_guid_ = guid;
      sm_port_num_ = in_port;
      sm_port_guid_ = ni->port_guid();
    }
    if (v.from) {
      n.ports[in_port].num = in_port;
      n.ports[in_port].remote = v.from;
      if (SmNode* f = find(v.from->first))
        f->ports[v.from->second].remote = std::pair{guid, in_port};
    }

    if (n.type != NodeType::kSwitch) {
      // A CA (or router) does not forward SMPs: record the port we came in by.
      if (in_port < 1) continue;
      SmPort& p = n.ports[in_port];
      if (p.known) continue;  // already reached by a path found earlier
      p.num = in_port;
      p.guid = ni->port_guid();
      p.path = v.path;
      auto pi = get<mad::PortInfo>(AttrId::kPortInfo, uint32_t(in_port), v.path);
      if (!pi) {
        ++discovery_errors_;
        continue;
      }
      p.info = *pi;
      p.known = true;
      p.linked = pi->port_physical_state() == uint8_t(PhysState::kLinkUp);
      if (v.path.empty() && p.linked)
        queue.push_back(Visit{DrPath{uint8_t(in_port)}, std::pair{guid, in_port}});
      continue;
    }
    if (!fresh) continue;  // a switch is explored once
    if (!get<mad::SwitchInfo>(AttrId::kSwitchInfo, 0, v.path)) {
      ++discovery_errors_;
      continue;
    }
    for (int port = 0; port <= n.num_ports; ++port) {
      auto pi = get<mad::PortInfo>(AttrId::kPortInfo, uint32_t(port), v.path);
      if (!pi) {
        ++discovery_errors_;
        continue;
      }
      SmPort& p = n.ports[port];
      p.num = port;
      p.guid = port == 0 ? ni->port_guid() : 0;
      p.path = v.path;
      p.info = *pi;
      p.known = true;
      p.linked = port > 0 && pi->port_physical_state() == uint8_t(PhysState::kLinkUp);
      if (p.linked && port != in_port && v.path.size() < mad::kMaxDrHops) {
        DrPath next = v.path;
        next.push_back(uint8_t(port));
        queue.push_back(Visit{std::move(next), std::pair{guid, port}});
      }
    }
  }
  return true;
}

void SubnetManager::assign_lids() {
  endpoints_.clear();
  // The SM's own port first, then every CA port and switch in discovery order.
  std::vector<std::pair<SmNode*, int>> order;
  if (SmNode* self = find(sm_node_guid_); self && self->ports[sm_port_num_].known)
    order.emplace_back(self, sm_port_num_);
  for (auto& n : nodes_)
    for (auto& [num, p] : n.ports)
      if (p.known && is_endpoint_port(n, num) && !(n.guid == sm_node_guid_ && num == sm_port_num_))
        order.emplace_back(&n, num);
  // Keep every LID a port already has, unless two ports claim the same one:
  // a master that takes over a configured subnet must not renumber it.
  std::set<uint16_t> taken;
  std::vector<uint16_t> lids(order.size(), 0);
  std::vector<const char*> how(order.size(), "kept");
  for (size_t i = 0; i < order.size(); ++i) {
    const uint16_t cur = order[i].first->ports[order[i].second].info.lid();
    if (mad::is_unicast_lid(cur) && taken.insert(cur).second) lids[i] = cur;
  }
  // A port that lost its LID (a reset CA) gets back the one it had.
  for (size_t i = 0; i < order.size(); ++i) {
    if (lids[i]) continue;
    auto it = lid_cache_.find(order[i].first->ports[order[i].second].guid);
    if (it != lid_cache_.end() && taken.insert(it->second).second) {
      lids[i] = it->second;
      how[i] = "restored";
    }
  }
  // New LIDs from 1 up, leaving alone those remembered for absent ports
  // while any other LID is free.
  std::set<uint16_t> reserved;
  for (const auto& [guid, lid] : lid_cache_) reserved.insert(lid);
  uint16_t next = 1;
  for (size_t i = 0; i < order.size(); ++i) {
    if (lids[i]) continue;
    while (mad::is_unicast_lid(next) && (taken.count(next) || reserved.count(next))) ++next;
    if (!mad::is_unicast_lid(next)) {  // only reserved LIDs left: use them
      next = 1;
      while (mad::is_unicast_lid(next) && taken.count(next)) ++next;
      reserved.clear();
    }
    if (!mad::is_unicast_lid(next)) break;  // 49151 LIDs in use: leave the rest at 0
    lids[i] = next;
    how[i] = "assigned";
    taken.insert(next);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    auto& [node, port] = order[i];
    endpoints_.push_back(SmEndpoint{node->guid, port, lids[i]});
    if (lids[i] && node->ports[port].guid) lid_cache_[node->ports[port].guid] = lids[i];
    log(fmt::format("{} {:#018x} \"{}\" port {}: LID {} ({})", mad::to_string(node->type),
                    node->guid, node->description, port, lids[i], lids[i] ? how[i] : "none left"));
    if (node->guid == sm_node_guid_ && port == sm_port_num_) sm_lid_ = lids[i];
  }
}

bool SubnetManager::set_port(SmNode& n, int port, PortState state) {
  SmPort& p = n.ports[port];
  mad::PortInfo out = p.info;
  // IBA 14.2.5.6: zero means "no change" for these on SubnSet.
  out.set_port_state(state);
  out.set_port_physical_state(0);
  out.set_link_down_default_state(0);
  out.set_link_width_enabled(0);
  out.set_link_speed_enabled(0);
  out.set_link_speed_ext_enabled(0);
  out.set_operational_vls(0);
  out.set_client_reregister(false);
  if (is_endpoint_port(n, port)) {
    for (const auto& e : endpoints_)
      if (e.node_guid == n.guid && e.port == port) out.set_lid(e.lid);
    out.set_master_sm_lid(sm_lid_);
    out.set_lmc(0);
    out.set_subnet_timeout(kSubnetTimeout);
  }
  // The link's MTU is the smaller of the two ends' MTUCap.
  uint8_t mtu = p.info.mtu_cap();
  if (p.remote)
    if (SmNode* r = find(p.remote->first); r && r->ports.count(p.remote->second))
      if (uint8_t rc = r->ports[p.remote->second].info.mtu_cap(); rc && rc < mtu) mtu = rc;
  if (mtu) out.set_neighbor_mtu(mtu);

  auto resp = set<mad::PortInfo>(AttrId::kPortInfo, uint32_t(port), p.path, out);
  if (!resp) return false;
  p.info = *resp;
  if (state != PortState::kNop && resp->port_state() != state) {
    log(fmt::format("{:#018x} port {}: asked for {}, port is {}", n.guid, port, to_string(state),
                    to_string(resp->port_state())));
    return false;
  }
  return true;
}

bool SubnetManager::managed(const SmNode& n, int num, const SmPort& p) {
  return p.known && (is_endpoint_port(n, num) || p.linked);
}

bool SubnetManager::program_pkey_tables() {
  bool ok = true;
  for (auto& n : nodes_) {
    const size_t capacity = std::min<size_t>(n.info.partition_cap(), mad::PKeyTable::kEntries);
    for (auto& [num, p] : n.ports) {
      if (!is_endpoint_port(n, num) || !managed(n, num, p)) continue;
      const EndPort port{p.guid, n.type == NodeType::kSwitch, p.guid == sm_port_guid_};
      const std::vector<uint16_t> want = pkey_table(partitions_, port, capacity);
      // Block 0 (ports with more than 32 entries keep the rest); a
      // switch's port 0 is port 0 of the modifier.
      auto have = get<mad::PKeyTable>(AttrId::kPKeyTable, 0, p.path);
      if (!have) {
        ok = false;
        continue;
      }
      mad::PKeyTable table = *have;
      for (size_t i = 0; i < capacity; ++i) table.set_pkey(i, want[i]);
      if (table.bytes == have->bytes) continue;
      if (!set<mad::PKeyTable>(AttrId::kPKeyTable, 0, p.path, table)) {
        ok = false;
        continue;
      }
      std::string keys;
      for (uint16_t k : want)
        if (k) keys += fmt::format(" {:#06x}", k);
      log(fmt::format("{:#018x} port {}: P_Key table{}", n.guid, num, keys));
    }
  }
  return ok;
}

bool SubnetManager::configure_ports() {
  bool ok = true;
  for (auto& n : nodes_)
    for (auto& [num, p] : n.ports) {
      if (!managed(n, num, p)) continue;
      const PortState cur = p.info.port_state();
      if (cur == PortState::kDown) continue;  // no link: nothing to configure
      const PortState want = cur == PortState::kInit ? PortState::kArmed : PortState::kNop;
      if (!set_port(n, num, want)) {
        ok = false;
        continue;
      }
      if (want == PortState::kArmed && is_endpoint_port(n, num))
        log(fmt::format("{:#018x} port {}: Armed, LID {}", n.guid, num, p.info.lid()));
      else if (want == PortState::kArmed)
        log(fmt::format("{:#018x} port {}: Armed", n.guid, num));
    }
  return ok;
}

uint8_t SubnetManager::route(const SmNode& sw, const SmEndpoint& dst) const {
  if (dst.node_guid == sw.guid) return 0;
  const SmNode* target = nullptr;
  for (const auto& n : nodes_)
    if (n.guid == dst.node_guid) target = &n;
  if (!target) return kNoRoute;
  const bool to_switch = target->type == NodeType::kSwitch;
  // Breadth-first through switches only: min-hop routing. A CA port is
  // reached by the link that ends on that very port.
  std::map<uint64_t, uint8_t> first_port;
  std::deque<const SmNode*> queue;
  first_port[sw.guid] = 0;
  queue.push_back(&sw);
  while (!queue.empty()) {
    const SmNode* n = queue.front();
    queue.pop_front();
    for (const auto& [num, p] : n->ports) {
      if (num == 0 || !p.remote || !p.linked) continue;
      const auto [next, next_port] = *p.remote;
      const uint8_t via = n == &sw ? uint8_t(num) : first_port[n->guid];
      if (next == dst.node_guid && (to_switch || next_port == dst.port)) return via;
      if (first_port.count(next)) continue;
      for (const auto& m : nodes_)
        if (m.guid == next && m.type == NodeType::kSwitch) {
          first_port[next] = via;
          queue.push_back(&m);
        }
    }
  }
  return kNoRoute;
}

bool SubnetManager::program_switches() {
  bool ok = true;
  uint16_t max_lid = 0;
  for (const auto& e : endpoints_) max_lid = std::max(max_lid, e.lid);
  for (auto& n : nodes_) {
    if (n.type != NodeType::kSwitch) continue;
    auto si = get<mad::SwitchInfo>(AttrId::kSwitchInfo, 0, n.path);
    if (!si) {
      ok = false;
      continue;
    }
    si->set_linear_fdb_top(max_lid);
    si->set_port_state_change(true);  // writing one clears it (IBA 14.2.5.4)
    if (!set<mad::SwitchInfo>(AttrId::kSwitchInfo, 0, n.path, *si)) {
      ok = false;
      continue;
    }
    n.lft_top = max_lid;
    for (uint32_t block = 0; block <= uint32_t(max_lid) / 64; ++block) {
      mad::LinearForwardingTable lft;
      for (size_t i = 0; i < lft.kEntries; ++i) lft.set_port(i, kNoRoute);
      for (const auto& e : endpoints_)
        if (e.lid / 64 == block) lft.set_port(e.lid % 64, route(n, e));
      if (!set<mad::LinearForwardingTable>(AttrId::kLinearForwardingTable, block, n.path, lft))
        ok = false;
    }
    log(fmt::format("switch {:#018x}: forwarding table set for LIDs 1..{}", n.guid, max_lid));
  }
  return ok;
}

bool SubnetManager::activate_ports() {
  // IBA 7.2: Armed everywhere first, then Active, so that no port passes
  // data before every port and forwarding table is configured.
  bool all_armed = true;
  for (auto& n : nodes_)
    for (auto& [num, p] : n.ports)
      if (managed(n, num, p) && p.info.port_state() != PortState::kArmed &&
          p.info.port_state() != PortState::kActive)
        all_armed = false;
  if (!all_armed) log("not every port is Armed; activating those that are");
  bool ok = all_armed;
  for (auto& n : nodes_)
    for (auto& [num, p] : n.ports) {
      if (!managed(n, num, p) || p.info.port_state() != PortState::kArmed) continue;
      if (!set_port(n, num, PortState::kActive)) {
        ok = false;
        continue;
      }
      log(fmt::format("{:#018x} port {}: Active", n.guid, num));
    }
  return ok;
}

void SubnetManager::set_state(SmState next, const std::string& why) {
  if (next == state_) return;
  log(fmt::format("state {} -> {}: {}", state_name(state_), state_name(next), why));
  state_ = next;
  if (state_listener_) state_listener_(priority_, state_);
}

std::vector<PeerSm> SubnetManager::query_other_sms() {
  std::vector<PeerSm> peers;
  for (auto& n : nodes_)
    for (auto& [num, p] : n.ports) {
      if (!p.known || !is_endpoint_port(n, num) || !(p.info.capability_mask() & mad::kCapIsSm))
        continue;
      if (n.guid == sm_node_guid_ && num == sm_port_num_) continue;  // this SM
      auto si = get<mad::SmInfo>(AttrId::kSmInfo, 0, p.path);
      if (!si) continue;  // dr() logged it
      PeerSm peer{SmRank{si->priority(), si->guid()}, si->sm_state(), p.path};
      log(fmt::format("SM {} on {:#018x} port {}", describe(peer), n.guid, num));
      peers.push_back(std::move(peer));
    }
  return peers;
}

bool SubnetManager::negotiate() {
  const SmRank self{priority_, sm_port_guid_};
  const std::vector<PeerSm> peers = query_other_sms();
  const std::optional<PeerSm> leader = sm_to_follow(self, state_ == SmState::kMaster, peers);
  std::string why = std::move(takeover_reason_);
  takeover_reason_.clear();
  if (!leader) {
    if (why.empty())
      why = peers.empty() ? "no other SM on the subnet"
                          : fmt::format("no other SM outranks this one (priority {})", priority_);
    set_state(SmState::kMaster, why);
    return true;
  }
  // A master defers only to a master that outranks it (sm_to_follow).
  const std::string reason =
      state_ == SmState::kMaster || leader->state != SmState::kMaster
          ? fmt::format("SM {} outranks this one (priority {})", describe(*leader), priority_)
          : fmt::format("master {} is running", describe(*leader));
  const bool new_leader =
      state_ != SmState::kStandby || master_watch_.master().rank.guid != leader->rank.guid;
  master_watch_.follow(*leader);
  if (state_ != SmState::kStandby)
    set_state(SmState::kStandby, reason);
  else if (new_leader || !why.empty())
    log(fmt::format("staying STANDBY{}: {}", why.empty() ? "" : ", although " + why, reason));
  return false;
}

bool SubnetManager::poll_master() {
  const PeerSm& m = master_watch_.master();
  auto si = get<mad::SmInfo>(AttrId::kSmInfo, 0, m.path);
  const bool same_sm = si && si->guid() == m.rank.guid;
  const bool is_master = same_sm && si->sm_state() == SmState::kMaster;
  const bool lost = master_watch_.record_poll(is_master);
  const std::string what = same_sm ? "reports " + state_name(si->sm_state()) : "does not answer";
  if (!lost) {
    if (!is_master)
      log(fmt::format("master {:#018x} {}: poll {} of {} missed", m.rank.guid, what,
                      master_watch_.missed_polls(), MasterWatch::kMaxMissedPolls));
    return false;
  }
  takeover_reason_ =
      same_sm ? fmt::format("master {:#018x} is no longer master (it {})", m.rank.guid, what)
              : fmt::format("master {:#018x} stopped answering", m.rank.guid);
  return true;
}

bool SubnetManager::sweep() {
  ++sweeps_;
  if (state_ == SmState::kNotActive) set_state(SmState::kDiscovering, "starting");
  log(fmt::format("sweep {}: discovering", sweeps_));
  if (!discover()) {
    log(fmt::format("sweep {}: the SM's own port does not answer", sweeps_));
    swept_ok_ = false;
    return false;
  }
  // IBA 14.4.1: only the master configures the subnet.
  if (!negotiate()) {
    log(fmt::format("sweep {}: STANDBY, the master configures the subnet", sweeps_));
    swept_ok_ = true;
    return true;
  }
  // A partial picture still gets configured (a node that does not answer
  // must not hold up the rest), but the sweep counts as failed so the next
  // poll sweeps again.
  if (discovery_errors_)
    log(fmt::format("sweep {}: {} SMPs of the discovery went unanswered", sweeps_,
                    discovery_errors_));
  assign_lids();
  bool ok = discovery_errors_ == 0;
  ok = configure_ports() && ok;
  if (program_pkeys_) ok = program_pkey_tables() && ok;
  ok = program_switches() && ok;
  ok = activate_ports() && ok;
  log(fmt::format("sweep {}: {} nodes, {} LIDs, SM LID {}: {}", sweeps_, nodes_.size(),
                  endpoints_.size(), sm_lid_, ok ? "subnet up" : "incomplete, will retry"));
  swept_ok_ = ok;
  return ok;
}

bool SubnetManager::changed() {
  for (auto& n : nodes_) {
    if (n.type == NodeType::kSwitch) {
      for (int port = 0; port <= n.num_ports; ++port)
        if (!n.ports.count(port) || !n.ports[port].known) return true;  // never read
      auto si = get<mad::SwitchInfo>(AttrId::kSwitchInfo, 0, n.path);
      if (!si) return true;
      if (si->port_state_change()) {
        log(fmt::format("switch {:#018x}: a port changed state", n.guid));
        return true;
      }
    }
    for (auto& [num, p] : n.ports) {
      if (!p.known) continue;
      auto pi = get<mad::PortInfo>(AttrId::kPortInfo, uint32_t(num), p.path);
      if (!pi) return true;
      const bool linked = num > 0 && pi->port_physical_state() == uint8_t(PhysState::kLinkUp);
      bool same = linked == p.linked;
      // Every port the sweep configured is expected Active.
      if (same && managed(n, num, p) && pi->port_state() != PortState::kActive) same = false;
      if (same && is_endpoint_port(n, num)) {
        for (const auto& e : endpoints_)
          if (e.node_guid == n.guid && e.port == num && e.lid != pi->lid()) same = false;
        if (pi->master_sm_lid() != sm_lid_) same = false;
      }
      if (!same) {
        log(fmt::format("{:#018x} port {}: now {} {}, LID {}", n.guid, num,
                        to_string(pi->port_state()),
                        to_string(PhysState(pi->port_physical_state())), pi->lid()));
        return true;
      }
    }
  }
  return false;
}

void SubnetManager::poll() {
  if (state_ == SmState::kStandby) {
    if (poll_master()) sweep();
    return;
  }
  if (!swept_ok_ || changed()) sweep();
}

}  // namespace ibemu::sm
