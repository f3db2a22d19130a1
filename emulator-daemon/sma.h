#pragma once
// The subnet management agent of every emulated node (IBA 14.3): answers
// SubnGet and SubnSet of NodeDescription, NodeInfo, SwitchInfo, GUIDInfo,
// PortInfo, P_KeyTable, LinearForwardingTable and SMInfo, with the status
// codes of IBA 13.4.7 for whatever it cannot do.
#include <optional>

#include "common/mad/smp.h"
#include "emulator-daemon/subnet_model.h"

namespace ibemu::subnet_detail {

class Sma {
 public:
  explicit Sma(SubnetModel& model) : m_(model) {}

  /// Handles `req`, which reached node `at.node` through port `at.port`
  /// (switch port 0 for an SMP that a switch sends itself). Returns the
  /// GetResp to send back, with the request's TID, class and paths, or
  /// nullopt when no response is due: responses and traps are never
  /// answered, and an M_Key check failure drops the SMP (IBA 14.2.4).
  std::optional<mad::Smp> handle(Hop at, const mad::Smp& req);

 private:
  mad::MadStatus get_node_description(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus get_node_info(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus do_switch_info(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus do_port_info(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus get_guid_info(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus do_pkey_table(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus do_lft(Hop at, const mad::Smp& req, mad::Smp* resp);
  mad::MadStatus get_sm_info(Hop at, const mad::Smp& req, mad::Smp* resp);

  /// PortInfo of port `p` of node `node` as the SMA reports it to an SMP
  /// that came in through `in_port`.
  mad::PortInfo read_port_info(int node, int p, int in_port) const;
  /// Validates every field of a Set first and changes nothing when one is
  /// invalid (IBA 14.2.5.6, 13.4.7: a Set is applied whole or not at all).
  mad::MadStatus set_port_info(int node, int p, const mad::PortInfo& in);

  SubnetModel& m_;
  bool hide_m_key_ = false;    // M_Key protection level 1 (IBA 14.2.4)
  std::optional<Hop> bounce_;  // a link to retrain once the response is built
};

}  // namespace ibemu::subnet_detail
