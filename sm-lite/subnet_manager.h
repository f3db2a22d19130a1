#pragma once
// ibemu-sm's logic: discover the subnet with directed-route SMPs, give every
// CA port and switch a LID, program the switches' forwarding tables and bring
// every port to Active (IBA 14.4 subnet manager, 14.2.5 attributes). It keeps
// LIDs that ports already have, so an SM that takes over from one that died
// does not renumber the subnet.
//
// Several SMs may run on one subnet: each negotiates with the others it
// discovers (sm_negotiation.h) and only the MASTER configures anything; a
// STANDBY polls its master and takes over when the master is lost.
//
// Single-threaded: one SubnetManager per SM process, driven by its main loop.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/mad/smp.h"
#include "common/mad/smp_attributes.h"
#include "sm-lite/partitions.h"
#include "sm-lite/sm_negotiation.h"
#include "sm-lite/smp_transport.h"

namespace ibemu::sm {

/// One port of a discovered node.
struct SmPort {
  int num = 0;
  uint64_t guid = 0;    // port GUID (NodeInfo:PortGUID seen through this port)
  DrPath path;          // a DR path whose SMPs reach the node through this port
                        // (for a switch: the switch's path, for every port)
  mad::PortInfo info;   // last PortInfo read
  bool known = false;   // its PortInfo was read (a far end seen but not reached is not)
  bool linked = false;  // PortPhysicalState LinkUp
  std::optional<std::pair<uint64_t, int>> remote;  // node GUID and port at the far end
};

/// One discovered node.
struct SmNode {
  uint64_t guid = 0;
  mad::NodeType type = mad::NodeType::kCa;
  int num_ports = 0;
  std::string description;
  mad::NodeInfo info;           // as first read (PortGUID, LocalPortNum of that port)
  DrPath path;                  // the first path it was found by
  std::map<int, SmPort> ports;  // port 0 is a switch's management port
  uint16_t lft_top = 0;         // switches: LinearFDBTop last programmed
};

/// A LID the SM hands out: a CA port, or a switch (its port 0).
struct SmEndpoint {
  uint64_t node_guid = 0;
  int port = 0;
  uint16_t lid = 0;
};

class SubnetManager {
 public:
  using Log = std::function<void(const std::string&)>;

  /// Told the SM's priority and state each time its state changes, so that
  /// the SMA of its port answers SMInfo with them (IBA 14.2.5.13).
  using StateListener = std::function<void(uint8_t priority, mad::SmState state)>;

  explicit SubnetManager(SmpTransport& transport, Log log = {});

  /// SMInfo:Priority, 0..15 (higher wins the negotiation). Set before the
  /// first sweep.
  void set_priority(uint8_t priority) { priority_ = priority & 0xf; }
  void on_state_change(StateListener listener) { state_listener_ = std::move(listener); }
  /// Partitions to program into every end port's P_Key table as master
  /// (partitions.h). Without them the SM leaves the tables as they are.
  void set_partitions(std::vector<Partition> partitions) {
    partitions_ = std::move(partitions);
    program_pkeys_ = true;
  }

  /// Discovers the subnet and negotiates with the other SMs it finds. As
  /// MASTER it then assigns LIDs, programs forwarding tables and moves every
  /// linked port Init -> Armed -> Active; a STANDBY changes nothing. True
  /// when every port it found ended Active with its LID, or when it became
  /// STANDBY.
  bool sweep();
  /// Re-reads every known port's PortInfo and each switch's PortStateChange;
  /// true when the subnet no longer looks as the last sweep left it.
  bool changed();
  /// One step of the periodic loop. MASTER (or DISCOVERING after a failed
  /// sweep): a full sweep when none succeeded yet or the light check sees a
  /// change. STANDBY: one SubnGet(SMInfo) of its master; after
  /// MasterWatch::kMaxMissedPolls missed polls in a row it sweeps again,
  /// which makes it master unless another SM outranks it.
  void poll();

  /// IBA 14.4 SM state: NOTACTIVE before the first sweep, then DISCOVERING,
  /// then MASTER or STANDBY.
  mad::SmState state() const { return state_; }
  uint8_t priority() const { return priority_; }
  /// The GUID of the SM's port (SMInfo:GUID), known after the first sweep.
  uint64_t port_guid() const { return sm_port_guid_; }
  /// The SM a STANDBY follows.
  const PeerSm& master() const { return master_watch_.master(); }

  /// What the last sweep found, in discovery order.
  const std::vector<SmNode>& nodes() const { return nodes_; }
  const std::vector<SmEndpoint>& endpoints() const { return endpoints_; }
  uint16_t sm_lid() const { return sm_lid_; }
  int sweeps() const { return sweeps_; }
  /// Whether the last sweep reached and configured everything it found.
  bool last_sweep_ok() const { return swept_ok_; }

 private:
  /// Sends one DR request and checks the response: nullopt (and a log line)
  /// on timeout or a non-zero status.
  std::optional<mad::Smp> dr(mad::Method m, mad::AttrId attr, uint32_t mod, const DrPath& path,
                             const uint8_t* data = nullptr, size_t data_len = 0);
  template <typename A>
  std::optional<A> get(mad::AttrId attr, uint32_t mod, const DrPath& path);
  template <typename A>
  std::optional<A> set(mad::AttrId attr, uint32_t mod, const DrPath& path, const A& value);

  /// Walks the subnet breadth-first. False when the SM's own node does not
  /// answer; SMPs lost on the way are counted in discovery_errors_.
  bool discover();
  /// SubnGet(SMInfo) of every other SM port that discovery found (PortInfo
  /// CapabilityMask.IsSM); SMs that do not answer take no part.
  std::vector<PeerSm> query_other_sms();
  /// Becomes MASTER or STANDBY after a discovery; true when MASTER.
  bool negotiate();
  /// A STANDBY's poll of its master; true once the master counts as lost.
  bool poll_master();
  /// Changes state, logs the change with its reason and tells the listener.
  void set_state(mad::SmState next, const std::string& why);
  void assign_lids();
  bool configure_ports();
  bool program_switches();
  /// Writes each end port's P_Key table where it differs from partitions_.
  bool program_pkey_tables();
  bool activate_ports();

  SmNode* find(uint64_t guid);
  /// Egress port of switch `sw` toward an endpoint (0 = the switch itself):
  /// the first hop of a shortest path through switches that ends on the
  /// endpoint's own port; 0xFF when there is none.
  uint8_t route(const SmNode& sw, const SmEndpoint& dst) const;
  /// Sets PortInfo of one port: `state` to move to (kNop = stay), LID fields
  /// from the endpoint table where it has a LID.
  bool set_port(SmNode& n, int port, PortState state);
  /// The ports the SM configures: every CA port it reached, each switch's
  /// port 0, and switch ports with a link.
  static bool managed(const SmNode& n, int num, const SmPort& p);
  void log(const std::string& line) const;

  SmpTransport& transport_;
  Log log_;
  uint64_t next_tid_;
  std::vector<SmNode> nodes_;
  std::vector<SmEndpoint> endpoints_;
  /// Port GUID -> LID of every endpoint ever configured: a port that comes
  /// back with LID 0 gets its old LID, and no one else is given it meanwhile.
  std::map<uint64_t, uint16_t> lid_cache_;
  uint64_t sm_node_guid_ = 0;
  int sm_port_num_ = 0;
  uint64_t sm_port_guid_ = 0;
  uint8_t priority_ = 0;
  mad::SmState state_ = mad::SmState::kNotActive;
  StateListener state_listener_;
  MasterWatch master_watch_;
  std::string takeover_reason_;  // why a STANDBY renegotiates: its master was lost
  uint16_t sm_lid_ = 0;
  int sweeps_ = 0;
  int discovery_errors_ = 0;
  bool swept_ok_ = false;
  std::vector<Partition> partitions_;
  bool program_pkeys_ = false;
};

}  // namespace ibemu::sm
