#pragma once
// The subnet management interface of the emulated nodes: how an SMP moves
// over the cables. Directed routes follow IBA 14.2.2 (outbound rules
// C14-9, returning rules C14-13); LID routes follow the switch's linear
// forwarding table (IBA 14.2.5.10).
#include <optional>

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

/// Carries a DR SMP that the SM sends out of `origin` (a CA port) to the
/// node it addresses, updating the hop pointer and return path on the way.
/// nullopt when a node on the way discards it.
std::optional<DrDelivery> dr_outbound(const SubnetModel& m, Hop origin, mad::Smp& smp);

/// Carries the SMA's response (D bit set) from the delivery point back;
/// true when it reaches the SM on `origin`.
bool dr_return(const SubnetModel& m, Hop origin, const DrDelivery& d, mad::Smp& resp);

/// Carries a LID-routed packet sent from `from` (a CA port, or a switch with
/// port 0) to the port that consumes `dlid`: a CA port owning it, or a switch
/// whose port 0 owns it (reported with the port it came in by). nullopt when
/// a link is down or a forwarding table has no entry.
std::optional<Hop> lid_route(const SubnetModel& m, Hop from, uint16_t dlid);

}  // namespace ibemu::subnet_detail
