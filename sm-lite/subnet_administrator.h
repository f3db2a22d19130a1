#pragma once
// The SA of ibemu-sm (IBA 15): answers the queries programs send to the SM's
// LID on QP1, from what the last sweep found, and keeps the multicast groups.
//   - ClassPortInfo Get;
//   - NodeRecord Get/GetTable: one per CA port and per switch;
//   - PathRecord Get/GetTable between two CA ports (by GID or LID): the path
//     MTU and rate are the smaller of the two ports';
//   - MCMemberRecord Set (join, creating the group and assigning its MLID),
//     Delete (leave; the group goes with its last member), Get/GetTable.
// Anything else is answered with the MAD status the spec gives for it.
//
// Single-threaded, no I/O: the SM's loop hands it request MADs and sends what
// it returns.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/mad/sa.h"
#include "sm-lite/subnet_manager.h"

namespace ibemu::sm {

using Gid = std::array<uint8_t, 16>;

/// A multicast group (IBA 15.2.5.17) and the join state of each member port.
struct McGroup {
  mad::McMemberRecord record;  // the group's parameters; PortGID and JoinState unused
  std::map<Gid, uint8_t> members;
};

class SubnetAdministrator {
 public:
  explicit SubnetAdministrator(const SubnetManager& sm) : sm_(sm) {}

  /// The response to an SA request MAD from the port with LID
  /// `requester_lid`, or nullopt when there is none to send (a response, or
  /// not an SA MAD).
  std::optional<std::vector<uint8_t>> handle(const uint8_t* mad, size_t len,
                                             uint16_t requester_lid);

  const std::map<Gid, McGroup>& groups() const { return groups_; }

 private:
  /// A CA port as the SA describes paths to it.
  struct PortView {
    Gid gid{};
    uint16_t lid = 0;
    uint8_t mtu = 0;   // IBA enum: NeighborMTU
    uint8_t rate = 0;  // IBA 15.2.5.16 rate enum
  };
  std::vector<PortView> ports() const;
  std::optional<PortView> port_by_gid(const uint8_t* gid) const;
  std::optional<PortView> port_by_lid(uint16_t lid) const;

  using Records = std::vector<std::vector<uint8_t>>;
  mad::SaStatus path_records(const uint8_t* query, uint64_t mask, uint16_t requester_lid,
                             Records* out) const;
  mad::SaStatus join(const uint8_t* query, uint64_t mask, Records* out);
  mad::SaStatus leave(const uint8_t* query, uint64_t mask, Records* out);
  mad::SaStatus member_records(const uint8_t* query, uint64_t mask, Records* out) const;
  mad::SaStatus node_records(const uint8_t* query, uint64_t mask, Records* out) const;
  Gid assign_mgid();
  uint16_t assign_mlid() const;

  const SubnetManager& sm_;
  std::map<Gid, McGroup> groups_;
  uint32_t next_mgid_ = 1;
};

}  // namespace ibemu::sm
