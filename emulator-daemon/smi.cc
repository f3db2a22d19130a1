#include "emulator-daemon/smi.h"

namespace ibemu::subnet_detail {

namespace {

// Longest LID route followed before giving up (a misprogrammed LFT can loop).
constexpr int kMaxLidHops = 64;

/// Out of `egress`: the port it arrives by on this host, off the host, or
/// nowhere (the link is down).
Onward<Hop> leave_by(const SubnetModel& m, Hop egress) {
  if (m.leaves_host(egress)) return Departure{egress};
  if (auto next = m.cross(egress)) return *next;
  return std::monostate{};
}

/// The LID route from a node the packet is at (arrived by `at`, or a
/// switch's port 0 it starts from).
Onward<Hop> lid_route_from(const SubnetModel& m, Hop at, uint16_t dlid) {
  for (int hops = 0; hops < kMaxLidHops; ++hops) {
    const NodeModel& n = m.node(at.node);
    if (m.port_owns_lid(at, dlid)) return at;
    if (!n.is_switch()) return std::monostate{};  // a CA only accepts its own LIDs
    // IBA 14.2.5.4: LIDs above LinearFDBTop are not forwarded.
    if (dlid > n.lft_top || size_t(dlid) >= n.lft.size()) return std::monostate{};
    const int egress = n.lft[dlid];
    if (!n.valid_port(egress)) return std::monostate{};  // 0xFF (none) or a bad port
    auto next = leave_by(m, Hop{at.node, egress});
    if (!std::holds_alternative<Hop>(next)) return next;
    at = std::get<Hop>(next);
  }
  return std::monostate{};
}

/// Outbound DR SMP at the node it arrived at by `at`; its hop pointer
/// counts the hop that brought it (C14-9 on receipt).
Onward<DrDelivery> outbound_from(const SubnetModel& m, Hop at, mad::Smp& smp) {
  const unsigned hc = smp.hop_count();
  for (unsigned hp = smp.hop_pointer();;) {
    const NodeModel& n = m.node(at.node);
    if (hp < hc) {
      // C14-9:2: an intermediate hop; only switches forward.
      if (!n.is_switch()) return std::monostate{};
      smp.set_return_path(hp, uint8_t(at.port));
      const int egress = smp.initial_path(hp + 1);
      if (!n.valid_port(egress)) return std::monostate{};
      ++hp;
      smp.set_hop_pointer(uint8_t(hp));
      auto next = leave_by(m, Hop{at.node, egress});
      if (auto* d = std::get_if<Departure>(&next)) return *d;
      if (!std::holds_alternative<Hop>(next)) return std::monostate{};
      at = std::get<Hop>(next);
      continue;
    }
    // C14-9:3: the end of the directed part (hp == hc).
    smp.set_return_path(hp, uint8_t(at.port));
    smp.set_hop_pointer(uint8_t(hp + 1));
    if (smp.dr_dlid() == mad::kPermissiveLid) return DrDelivery{at, std::nullopt};
    // A non-permissive DrDLID: the switch LID-routes the rest to DrDLID;
    // a CA cannot and discards it. The LID-routed part stays on this host.
    if (!n.is_switch()) return std::monostate{};
    auto dest = lid_route(m, Hop{at.node, 0}, smp.dr_dlid());
    if (!dest) return std::monostate{};
    return DrDelivery{*dest, at.node};
  }
}

/// Returning DR SMP at the node it arrived at by `at` (C14-13 on receipt).
Onward<Hop> return_from(const SubnetModel& m, Hop at, mad::Smp& resp) {
  const unsigned hc = resp.hop_count();
  for (unsigned hp = resp.hop_pointer();;) {
    const NodeModel& n = m.node(at.node);
    if (hp >= 2 && hp <= hc) {
      // C14-13:2: an intermediate hop on the way back; only switches forward.
      if (!n.is_switch()) return std::monostate{};
      const int egress = resp.return_path(hp - 1);
      if (!n.valid_port(egress)) return std::monostate{};
      --hp;
      resp.set_hop_pointer(uint8_t(hp));
      auto next = leave_by(m, Hop{at.node, egress});
      if (!std::holds_alternative<Hop>(next)) return next;
      at = std::get<Hop>(next);
      continue;
    }
    if (hp != 1) return std::monostate{};  // C14-13:5
    // C14-13:3: the start of the directed part. With a permissive DrSLID
    // the SM is here; otherwise a switch LID-routes it on to DrSLID.
    resp.set_hop_pointer(0);
    if (resp.dr_slid() == mad::kPermissiveLid) return at;
    if (!n.is_switch()) return std::monostate{};
    if (auto dest = lid_route(m, Hop{at.node, 0}, resp.dr_slid())) return *dest;
    return std::monostate{};
  }
}

}  // namespace

Onward<Hop> lid_route_onward(const SubnetModel& m, Hop from, uint16_t dlid) {
  if (!m.valid(from) || dlid == 0) return std::monostate{};
  if (m.node(from.node).is_switch()) return lid_route_from(m, from, dlid);
  // A CA delivers a packet for one of its own LIDs to itself (loopback).
  if (m.port_owns_lid(from, dlid)) return from;
  auto next = leave_by(m, from);
  if (!std::holds_alternative<Hop>(next)) return next;
  return lid_route_from(m, std::get<Hop>(next), dlid);
}

Onward<Hop> lid_route_arrived(const SubnetModel& m, Hop at, uint16_t dlid) {
  if (!m.valid(at) || dlid == 0) return std::monostate{};
  return lid_route_from(m, at, dlid);
}

std::optional<Hop> lid_route(const SubnetModel& m, Hop from, uint16_t dlid) {
  auto r = lid_route_onward(m, from, dlid);
  if (auto* h = std::get_if<Hop>(&r)) return *h;
  return std::nullopt;
}

Onward<DrDelivery> dr_outbound(const SubnetModel& m, Hop origin, mad::Smp& smp) {
  if (!m.valid(origin)) return std::monostate{};
  const unsigned hc = smp.hop_count();
  // IBA 14.2.1.2: at most 63 hops; the SM sends requests outbound (D = 0).
  if (hc > mad::kMaxDrHops || smp.direction()) return std::monostate{};

  // At the SM's node (C14-9 as the sender applies it).
  if (smp.hop_pointer() == 0 && hc == 0) {
    // A zero-hop route addresses the SM's own node: C14-9:3 then C14-9:4.
    if (smp.dr_dlid() != mad::kPermissiveLid) return std::monostate{};  // a CA cannot LID-route
    smp.set_hop_pointer(1);
    return DrDelivery{origin, std::nullopt};
  }
  if (smp.hop_pointer() != 0) return std::monostate{};  // C14-9:5: unreasonable hop pointer
  // C14-9:1: the first hop leaves by InitialPath[1], which on a CA must be
  // the port the SM sends from.
  if (smp.initial_path(1) != origin.port) return std::monostate{};
  smp.set_hop_pointer(1);
  auto next = leave_by(m, origin);
  if (auto* d = std::get_if<Departure>(&next)) return *d;
  if (!std::holds_alternative<Hop>(next)) return std::monostate{};
  return outbound_from(m, std::get<Hop>(next), smp);
}

Onward<DrDelivery> dr_outbound_arrived(const SubnetModel& m, Hop at, mad::Smp& smp) {
  const unsigned hc = smp.hop_count();
  const unsigned hp = smp.hop_pointer();
  if (!m.valid(at) || hc > mad::kMaxDrHops || smp.direction() || hp < 1 || hp > hc)
    return std::monostate{};
  return outbound_from(m, at, smp);
}

Onward<Hop> dr_return(const SubnetModel& m, const DrDelivery& d, mad::Smp& resp) {
  if (!m.valid(d.at)) return std::monostate{};
  const unsigned hc = resp.hop_count();
  const unsigned hp = resp.hop_pointer();
  resp.set_direction(true);  // IBA 14.2.2: the responder sets D
  if (hc > mad::kMaxDrHops) return std::monostate{};

  Hop at = d.at;
  if (d.tail_switch) {
    // The response first goes LID-routed back to the switch that ended the
    // directed part, which then continues by ReturnPath (C14-13:1).
    const PortModel& sw0 = m.node(*d.tail_switch).ports[0];
    auto back = lid_route(m, d.at, sw0.lid);
    if (!back || back->node != *d.tail_switch) return std::monostate{};
    at = Hop{*d.tail_switch, 0};
  }

  if (hc == 0) {
    // Zero hops: the response is already at the SM's node (C14-13:3).
    if (hp != 1 || resp.dr_slid() != mad::kPermissiveLid) return std::monostate{};
    resp.set_hop_pointer(0);
    return at;
  }
  // C14-13:1: the responder sends by ReturnPath[HopCount]; a CA only by the
  // port the request came in by.
  if (hp != hc + 1) return std::monostate{};
  const int egress = resp.return_path(hc);
  const NodeModel& first = m.node(at.node);
  if (first.is_switch() ? !first.valid_port(egress) : egress != at.port) return std::monostate{};
  resp.set_hop_pointer(uint8_t(hc));
  auto next = leave_by(m, Hop{at.node, egress});
  if (!std::holds_alternative<Hop>(next)) return next;
  return return_from(m, std::get<Hop>(next), resp);
}

Onward<Hop> dr_return_arrived(const SubnetModel& m, Hop at, mad::Smp& resp) {
  const unsigned hc = resp.hop_count();
  const unsigned hp = resp.hop_pointer();
  if (!m.valid(at) || hc > mad::kMaxDrHops || !resp.direction() || hp < 1 || hp > hc)
    return std::monostate{};
  return return_from(m, at, resp);
}

}  // namespace ibemu::subnet_detail
