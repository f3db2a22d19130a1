#pragma once
// The state behind the emulated subnet: nodes, their ports and the cables
// between them. Shared by the SMA (which reads and sets attributes), the SMI
// (which moves SMPs over the cables) and Subnet (the daemon's API). Internal
// to the daemon: callers use subnet.h.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/mad/smp_attributes.h"
#include "common/state_page.h"

namespace ibemu::subnet_detail {

/// A node and one of its ports (for an SMP: the port it entered by).
struct Hop {
  int node = -1;
  int port = 0;
  bool operator==(const Hop&) const = default;
};

/// One port's PortInfo state (IBA 14.2.5.6). Fields only switch port 0 and CA
/// ports use (LID, M_Key, ...) are ignored on switch external ports.
struct PortModel {
  uint64_t guid = 0;
  std::optional<Hop> peer;  // the other end of the cable; none for switch port 0
  /// A switch port cabled to another host's switch (emulator-daemon/
  /// fabric_link.h): the index of that inter-host link, or -1. Its far end
  /// is not in this model; the link is up while that host answers.
  int uplink = -1;
  bool far_alive = false;  // inter-host port: the other host answers
  bool cable = true;       // false: unplugged (set_link_up)
  bool disabled = false;   // PortPhysicalState set to Disabled by an SM
  PortState state = PortState::kDown;
  PhysState phys = PhysState::kPolling;

  uint64_t m_key = 0;
  uint64_t gid_prefix = 0;
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint8_t lmc = 0;
  uint8_t sm_sl = 0;
  uint16_t m_key_lease_period = 0;
  uint8_t m_key_protect_bits = 0;
  uint32_t cap_mask = 0;
  uint8_t link_width_enabled = 0;
  uint8_t link_speed_enabled = 0;
  uint8_t link_speed_ext_enabled = 0;
  uint8_t link_down_default_state = 2;  // Polling
  uint8_t neighbor_mtu = 0;
  uint8_t mtu_cap = 0;
  uint8_t operational_vls = 1;
  uint8_t vl_high_limit = 0;
  uint8_t init_type_reply = 0;
  uint8_t vl_stall_count = 0;
  uint8_t hoq_life = 16;
  bool partition_enforcement_inbound = false;
  bool partition_enforcement_outbound = false;
  bool filter_raw_inbound = false;
  bool filter_raw_outbound = false;
  uint16_t m_key_violations = 0;
  uint16_t p_key_violations = 0;
  uint16_t q_key_violations = 0;
  uint8_t multicast_pkey_trap_suppression = 0;
  /// P_KeyTable (IBA 14.2.5.7), entry 0 first: the node's first
  /// partition_cap entries; 0x0000 is an empty entry. A CA port's is its
  /// own; of a switch only port 0 has one (no partition enforcement).
  std::array<uint16_t, kMaxPkeys> pkeys{};
  uint8_t subnet_timeout = 0;
  uint8_t local_phy_errors = 0;
  uint8_t overrun_errors = 0;
  uint32_t client_reregister_count = 0;
  uint32_t sm_act_count = 0;  // SMInfo:ActCount of an SM on this port
  // What the SM on this port published of itself (control op sm_info): its
  // SMInfo:Priority and SMState. An SM that has just attached is DISCOVERING
  // (IBA 14.4.1).
  uint8_t sm_priority = 0;
  mad::SmState sm_state = mad::SmState::kNotActive;
};

struct NodeModel {
  mad::NodeType type = mad::NodeType::kCa;
  uint64_t guid = 0;
  uint64_t sys_image_guid = 0;
  std::string description;
  uint32_t vendor_id = 0;
  uint16_t device_id = 0;
  uint32_t revision = 0;
  uint16_t partition_cap = 1;  // NodeInfo:PartitionCap: P_Key table entries per port
  /// Indexed by port number: a switch's port 0 is its management port, a
  /// CA's entry 0 is unused.
  std::vector<PortModel> ports;

  // Switch only (IBA 14.2.5.4, 14.2.5.10).
  std::vector<uint8_t> lft;
  uint16_t lft_top = 0;
  uint8_t default_port = 0;
  uint8_t default_mcast_primary_port = 0xff;
  uint8_t default_mcast_not_primary_port = 0xff;
  uint8_t life_time_value = 0;
  bool port_state_change = false;

  bool is_switch() const { return type == mad::NodeType::kSwitch; }
  int num_ports() const { return int(ports.size()) - 1; }
  bool valid_port(int p) const { return p >= 1 && p <= num_ports(); }
};

/// Link properties every port reports (4X EDR).
inline constexpr uint8_t kWidthSupported = mad::kLinkWidth1x | mad::kLinkWidth4x;
inline constexpr uint8_t kWidthActive = mad::kLinkWidth4x;
inline constexpr uint8_t kSpeedSupported =
    mad::kLinkSpeedSdr | mad::kLinkSpeedDdr | mad::kLinkSpeedQdr;
inline constexpr uint8_t kSpeedActive = mad::kLinkSpeedQdr;
inline constexpr uint8_t kSpeedExtSupported = mad::kLinkSpeedExtFdr | mad::kLinkSpeedExtEdr;
inline constexpr uint8_t kSpeedExtActive = mad::kLinkSpeedExtEdr;
inline constexpr uint8_t kVlCap = 1;               // VL0 only
inline constexpr uint8_t kRespTimeValue = 16;      // 4.096 us * 2^16, about 268 ms
inline constexpr uint16_t kLinearFdbCap = 0xc000;  // every unicast LID

struct SubnetModel {
  std::vector<NodeModel> nodes;  // CA i = device i; the switch last
  int switch_node = -1;
  uint64_t lft_generation = 0;  // bumped by every LinearForwardingTable Set

  NodeModel& node(int i) { return nodes[size_t(i)]; }
  const NodeModel& node(int i) const { return nodes[size_t(i)]; }
  PortModel& port(Hop h) { return nodes[size_t(h.node)].ports[size_t(h.port)]; }
  const PortModel& port(Hop h) const { return nodes[size_t(h.node)].ports[size_t(h.port)]; }
  bool valid(Hop h) const {
    return h.node >= 0 && size_t(h.node) < nodes.size() && h.port >= 0 &&
           size_t(h.port) < nodes[size_t(h.node)].ports.size();
  }

  /// Where a packet sent out of `from` arrives: the peer port, if the link
  /// is up (IBA 7.2: a port in Down has no link; VL15 flows in Init and up).
  /// nullopt for an inter-host port: see leaves_host().
  std::optional<Hop> cross(Hop from) const;
  /// Whether a packet sent out of `from` leaves this host: an inter-host
  /// port whose link is up.
  bool leaves_host(Hop from) const;
  /// Whether `lid` addresses this port (base LID with its LMC range; switch
  /// port 0 has no LMC, IBA 14.2.5.6 for base port 0).
  bool port_owns_lid(Hop h, uint16_t lid) const;

  /// Takes the link of `h` down (both ends Down, Polling or Disabled), then
  /// lets it retrain to Init/LinkUp if the cable is in and neither end is
  /// disabled (IBA 7.2: the link state machine). Switch port 0 has
  /// no link: it goes straight back to Init.
  void bounce_link(Hop h);
  /// Brings the link of `h` up to Init if it can be (cable in, not disabled).
  void try_link_up(Hop h);
  void set_link_down(Hop h);
  /// The other host of inter-host port `h` answers (or stopped answering):
  /// the link trains to Init (or goes Down, Polling).
  void set_uplink_alive(Hop h, bool alive);
};

}  // namespace ibemu::subnet_detail
