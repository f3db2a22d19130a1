#include "emulator-daemon/smi.h"

namespace ibemu::subnet_detail {

namespace {

// Longest LID route followed before giving up (a misprogrammed LFT can loop).
constexpr int kMaxLidHops = 64;

bool is_switch(const SubnetModel& m, int node) { return m.node(node).is_switch(); }

}  // namespace

std::optional<Hop> lid_route(const SubnetModel& m, Hop from, uint16_t dlid) {
  if (!m.valid(from) || dlid == 0) return std::nullopt;
  Hop at = from;
  if (!is_switch(m, from.node)) {
    // A CA delivers a packet for one of its own LIDs to itself (loopback).
    if (m.port_owns_lid(from, dlid)) return from;
    auto next = m.cross(from);
    if (!next) return std::nullopt;
    at = *next;
  }
  for (int hops = 0; hops < kMaxLidHops; ++hops) {
    const NodeModel& n = m.node(at.node);
    if (m.port_owns_lid(at, dlid)) return at;
    if (!n.is_switch()) return std::nullopt;  // a CA only accepts its own LIDs
    // IBA 14.2.5.4: LIDs above LinearFDBTop are not forwarded.
    if (dlid > n.lft_top || size_t(dlid) >= n.lft.size()) return std::nullopt;
    const int egress = n.lft[dlid];
    if (!n.valid_port(egress)) return std::nullopt;  // 0xFF (none) or a bad port
    auto next = m.cross(Hop{at.node, egress});
    if (!next) return std::nullopt;
    at = *next;
  }
  return std::nullopt;
}

std::optional<DrDelivery> dr_outbound(const SubnetModel& m, Hop origin, mad::Smp& smp) {
  if (!m.valid(origin)) return std::nullopt;
  const unsigned hc = smp.hop_count();
  unsigned hp = smp.hop_pointer();
  // IBA 14.2.1.2: at most 63 hops; the SM sends requests outbound (D = 0).
  if (hc > mad::kMaxDrHops || smp.direction()) return std::nullopt;

  // At the SM's node (C14-9 as the sender applies it).
  Hop at = origin;
  if (hp == 0 && hc == 0) {
    // A zero-hop route addresses the SM's own node: C14-9:3 then C14-9:4.
    if (smp.dr_dlid() != mad::kPermissiveLid) return std::nullopt;  // a CA cannot LID-route
    smp.set_hop_pointer(1);
    return DrDelivery{origin, std::nullopt};
  }
  if (hp != 0) return std::nullopt;  // C14-9:5: unreasonable hop pointer
  // C14-9:1: the first hop leaves by InitialPath[1], which on a CA must be
  // the port the SM sends from.
  if (smp.initial_path(1) != origin.port) return std::nullopt;
  hp = 1;
  auto next = m.cross(origin);
  if (!next) return std::nullopt;
  at = *next;

  // At each node the SMP reaches (C14-9 on receipt).
  for (;;) {
    const NodeModel& n = m.node(at.node);
    if (hp < hc) {
      // C14-9:2: an intermediate hop; only switches forward.
      if (!n.is_switch()) return std::nullopt;
      smp.set_return_path(hp, uint8_t(at.port));
      const int egress = smp.initial_path(hp + 1);
      if (!n.valid_port(egress)) return std::nullopt;
      ++hp;
      smp.set_hop_pointer(uint8_t(hp));
      next = m.cross(Hop{at.node, egress});
      if (!next) return std::nullopt;
      at = *next;
      continue;
    }
    // C14-9:3: the end of the directed part (hp == hc).
    smp.set_return_path(hp, uint8_t(at.port));
    smp.set_hop_pointer(uint8_t(hp + 1));
    if (smp.dr_dlid() == mad::kPermissiveLid) return DrDelivery{at, std::nullopt};
    // A non-permissive DrDLID: the switch LID-routes the rest to DrDLID;
    // a CA cannot and discards it.
    if (!n.is_switch()) return std::nullopt;
    auto dest = lid_route(m, Hop{at.node, 0}, smp.dr_dlid());
    if (!dest) return std::nullopt;
    return DrDelivery{*dest, at.node};
  }
}

bool dr_return(const SubnetModel& m, Hop origin, const DrDelivery& d, mad::Smp& resp) {
  if (!m.valid(d.at)) return false;
  const unsigned hc = resp.hop_count();
  unsigned hp = resp.hop_pointer();
  resp.set_direction(true);  // IBA 14.2.2: the responder sets D
  if (hc > mad::kMaxDrHops) return false;

  Hop at = d.at;
  if (d.tail_switch) {
    // The response first goes LID-routed back to the switch that ended the
    // directed part, which then continues by ReturnPath (C14-13:1).
    const PortModel& sw0 = m.node(*d.tail_switch).ports[0];
    auto back = lid_route(m, d.at, sw0.lid);
    if (!back || back->node != *d.tail_switch) return false;
    at = Hop{*d.tail_switch, 0};
  }

  if (hc == 0) {
    // Zero hops: the response is already at the SM's node (C14-13:3).
    if (hp != 1 || at != origin) return false;
    resp.set_hop_pointer(0);
    return resp.dr_slid() == mad::kPermissiveLid;
  }
  // C14-13:1: the responder sends by ReturnPath[HopCount]; a CA only by the
  // port the request came in by.
  if (hp != hc + 1) return false;
  hp = hc;
  int egress = resp.return_path(hp);
  const NodeModel& first = m.node(at.node);
  if (first.is_switch() ? !first.valid_port(egress) : egress != at.port) return false;
  resp.set_hop_pointer(uint8_t(hp));
  auto next = m.cross(Hop{at.node, egress});
  if (!next) return false;
  at = *next;

  for (;;) {
    const NodeModel& n = m.node(at.node);
    if (hp >= 2 && hp <= hc) {
      // C14-13:2: an intermediate hop on the way back; only switches forward.
      if (!n.is_switch()) return false;
      egress = resp.return_path(hp - 1);
      if (!n.valid_port(egress)) return false;
      --hp;
      resp.set_hop_pointer(uint8_t(hp));
      next = m.cross(Hop{at.node, egress});
      if (!next) return false;
      at = *next;
      continue;
    }
    if (hp != 1) return false;  // C14-13:5
    // C14-13:3: the start of the directed part. With a permissive DrSLID
    // the SM is here; otherwise a switch LID-routes it on to DrSLID.
    resp.set_hop_pointer(0);
    if (resp.dr_slid() == mad::kPermissiveLid) return at == origin;
    if (!n.is_switch()) return false;
    auto dest = lid_route(m, Hop{at.node, 0}, resp.dr_slid());
    return dest && *dest == origin;
  }
}

}  // namespace ibemu::subnet_detail
