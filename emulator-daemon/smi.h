#pragma once
// The subnet management interface of the emulated nodes: how an SMP moves
// over the cables. Directed routes follow IBA 14.2.2 (outbound rules
// C14-9, returning rules C14-13); LID routes follow the switch's linear
// forwarding table (IBA 14.2.5.10).
//
// A route may leave this host through an inter-host port: the SMP then
// travels to the other host's daemon as a VL15 packet and continues there
// from the port it arrives by (the *_arrived functions), exactly where it
// stopped here. Each function reports where the SMP went: delivered, off
// the host (a Departure), or nowhere (dropped, as a node on the way drops
// it).
#include <optional>
#include <variant>

#include "common/mad/smp.h"
#include "emulator-daemon/subnet_model.h"

namespace ibemu::subnet_detail {

/// Where an outbound DR SMP was delivered: the node and the port it came in
/// by, and the switch that LID-routed its last part when DrDLID was not
/// permissive (the response goes back to that switch first).
struct DrDelivery {
  Hop at;
  std::optional<int> tail_switch;
};

/// The SMP leaves the host by `egress`, a switch port with an inter-host link.
struct Departure {
  Hop egress;
};

/// Dropped, arrived (T), or gone to another host.
template <typename T>
using Onward = std::variant<std::monostate, T, Departure>;

/// Carries a DR SMP that the SM sends out of `origin` (a CA port) toward
/// the node it addresses, updating the hop pointer and return path.
Onward<DrDelivery> dr_outbound(const SubnetModel& m, Hop origin, mad::Smp& smp);
/// Continues an outbound DR SMP that came from another host in by `at`.
Onward<DrDelivery> dr_outbound_arrived(const SubnetModel& m, Hop at, mad::Smp& smp);

/// Carries the SMA's response (D bit set) from the delivery point back to
/// the end of its return path: the CA port where the SM that sent the
/// request must be.
Onward<Hop> dr_return(const SubnetModel& m, const DrDelivery& d, mad::Smp& resp);
/// Continues a returning DR SMP that came from another host in by `at`.
Onward<Hop> dr_return_arrived(const SubnetModel& m, Hop at, mad::Smp& resp);

/// Carries a LID-routed packet sent from `from` (a CA port, or a switch with
/// port 0) to the port that consumes `dlid`: a CA port owning it, or a switch
/// whose port 0 owns it (reported with the port it came in by). Dropped when
/// a link is down or a forwarding table has no entry.
Onward<Hop> lid_route_onward(const SubnetModel& m, Hop from, uint16_t dlid);
/// Continues a LID-routed packet that came from another host in by `at`.
Onward<Hop> lid_route_arrived(const SubnetModel& m, Hop at, uint16_t dlid);
/// lid_route_onward for routes that must stay on this host.
std::optional<Hop> lid_route(const SubnetModel& m, Hop from, uint16_t dlid);

}  // namespace ibemu::subnet_detail
