#include "emulator-daemon/subnet_model.h"

namespace ibemu::subnet_detail {

namespace {

bool link_up(const PortModel& p) {
  return p.phys == PhysState::kLinkUp && p.state != PortState::kDown;
}

}  // namespace

std::optional<Hop> SubnetModel::cross(Hop from) const {
  if (!valid(from)) return std::nullopt;
  const PortModel& a = port(from);
  if (!a.peer || !valid(*a.peer)) return std::nullopt;
  if (!link_up(a) || !link_up(port(*a.peer))) return std::nullopt;
  return a.peer;
}

bool SubnetModel::leaves_host(Hop from) const {
  return valid(from) && port(from).uplink >= 0 && link_up(port(from));
}

bool SubnetModel::port_owns_lid(Hop h, uint16_t lid) const {
  if (!valid(h)) return false;
  const NodeModel& n = node(h.node);
  if (n.is_switch()) {
    // A switch is addressed through port 0's LID, whatever port it came in by.
    const PortModel& p0 = n.ports[0];
    return p0.lid != 0 && p0.lid == lid;
  }
  const PortModel& p = port(h);
  if (p.lid == 0 || h.port == 0) return false;
  const uint16_t mask = uint16_t(~((1u << (p.lmc & 7)) - 1));
  return (p.lid & mask) == (lid & mask);
}

void SubnetModel::set_link_down(Hop h) {
  if (!valid(h)) return;
  auto down = [this](Hop e) {
    PortModel& p = port(e);
    if (p.state != PortState::kDown && node(e.node).is_switch() && e.port != 0)
      node(e.node).port_state_change = true;  // IBA 14.2.5.4: link logic moved a port
    p.state = PortState::kDown;
    p.phys = p.disabled ? PhysState::kDisabled : PhysState::kPolling;
  };
  down(h);
  if (const auto& peer = port(h).peer; peer && valid(*peer)) down(*peer);
}

void SubnetModel::try_link_up(Hop h) {
  if (!valid(h)) return;
  PortModel& a = port(h);
  if (a.uplink >= 0) {
    // The far end trains with us when its host answers; both ends must
    // have their cables in.
    if (!a.cable || !a.far_alive || a.disabled) return;
    if (a.state == PortState::kDown || a.phys != PhysState::kLinkUp) {
      if (a.state == PortState::kDown) node(h.node).port_state_change = true;
      a.state = PortState::kInit;
      a.phys = PhysState::kLinkUp;
    }
    return;
  }
  if (!a.peer) {  // switch port 0: no physical link to train
    if (a.state == PortState::kDown) a.state = PortState::kInit;
    a.phys = PhysState::kLinkUp;
    return;
  }
  if (!valid(*a.peer)) return;
  PortModel& b = port(*a.peer);
  if (!a.cable || !b.cable || a.disabled || b.disabled) return;
  for (Hop e : {h, *a.peer}) {
    PortModel& p = port(e);
    if (p.state == PortState::kDown || p.phys != PhysState::kLinkUp) {
      if (node(e.node).is_switch() && p.state == PortState::kDown)
        node(e.node).port_state_change = true;
      // IBA 7.2: a link that finishes training puts the port in Init; the
      // LID and other SM settings stay until an SM changes them.
      p.state = PortState::kInit;
      p.phys = PhysState::kLinkUp;
    }
  }
}

void SubnetModel::set_uplink_alive(Hop h, bool alive) {
  if (!valid(h) || port(h).uplink < 0) return;
  port(h).far_alive = alive;
  if (alive)
    try_link_up(h);
  else
    set_link_down(h);
}

void SubnetModel::bounce_link(Hop h) {
  if (!valid(h)) return;
  if (port(h).peer || port(h).uplink >= 0)
    set_link_down(h);
  else
    port(h).state = PortState::kDown;
  try_link_up(h);
}

}  // namespace ibemu::subnet_detail
