#pragma once
// The emulated subnet of one host: the configured CAs, one switch that every
// CA port is cabled to, and the subnet management agents (SMAs) that answer
// the SMPs an SM sends. This is what makes `ibemu-sm`, ibstat and smpquery see
// a subnet shaped like a real one: ports come up INIT with LID 0 and stay so
// until an SM configures them (IBA 7.2, 14.2.5.6).
//
// Topology, in config order: switch port 1 is cabled to ibemu0/1, port 2 to
// ibemu0/2, port 3 to ibemu1/1, and so on; switch port 0 is its management
// port (a base port 0, without a physical link). With a fabric configured,
// the ports after the CA ports are inter-host ports ("uplinks"), each cabled
// to the switch of one other host through the daemons' UDP link: an SMP
// whose route leaves by one travels to that host as a packet and continues
// there (receive_smp); its response comes back the same way.
//
// Not thread-safe: the daemon calls it from one thread. on_port_change
// callbacks run on that thread, after the SMP that caused them has been
// processed, and must not call process_smp.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/mad/smp_attributes.h"
#include "common/state_page.h"

namespace ibemu {

namespace subnet_detail {
struct SubnetModel;
}
namespace mad {
struct Smp;
}

/// A CA port of this host: device index into Config::devices, 1-based port.
struct PortRef {
  int device = 0;
  int port = 1;
  bool operator==(const PortRef&) const = default;
};

/// What sysfs, ibv_query_port and ibstat report for a CA port.
struct PortAttributes {
  PortState state = PortState::kDown;
  PhysState phys_state = PhysState::kPolling;
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint8_t lmc = 0;
  uint8_t sm_sl = 0;
  uint8_t neighbor_mtu = 0;       // IBA enum 1..5 (256..4096): the active MTU
  uint8_t max_mtu = 0;            // IBA enum: PortInfo:MTUCap
  uint32_t cap_mask = 0;          // PortInfo:CapabilityMask, host order
  uint64_t port_guid = 0;         // host order
  uint64_t subnet_prefix = 0;     // PortInfo:GidPrefix, host order
  uint8_t link_width_active = 0;  // IBA bits = ibv enum: 1 = 1X, 2 = 4X, 4 = 8X, 8 = 12X
  uint8_t link_speed_active = 0;  // ibv enum: 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR
  uint16_t rate_gbps = 0;         // width x lane speed, as sysfs `rate` prints it
  /// Bumped each time an SM sets PortInfo:ClientReregister (IBA 14.2.5.6):
  /// the daemon raises IBV_EVENT_CLIENT_REREGISTER when it changes.
  uint32_t client_reregister_count = 0;
  /// The P_Key table (IBA 10.9, 14.2.5.7): num_pkeys entries (PartitionCap),
  /// as the config gave it or an SM set it; 0x0000 is an empty entry.
  std::array<uint16_t, kMaxPkeys> pkeys{};
  uint8_t num_pkeys = 0;
  bool operator==(const PortAttributes&) const = default;
};

/// sysfs `rate` text, e.g. "100 Gb/sec (4X EDR)".
std::string rate_string(const PortAttributes& a);

class Subnet {
 public:
  /// Builds the topology from a finalized config. Throws std::invalid_argument
  /// when the config cannot be cabled (no ports, more than 254 CA ports).
  explicit Subnet(const Config& cfg);
  ~Subnet();
  Subnet(const Subnet&) = delete;
  Subnet& operator=(const Subnet&) = delete;

  /// Processes an SMP that the SM sent out of `sm_port` and returns the
  /// response as the SM receives it, or nullopt when the SMP or its response
  /// is dropped (as hardware drops them: the SM sees a timeout).
  ///
  /// Directed-route SMPs (class 0x81) travel hop by hop by IBA 14.2.2 (hop
  /// pointer and count, initial and return path, permissive DrSLID/DrDLID;
  /// a non-permissive DrDLID makes the end switch LID-route the rest). The
  /// route starts at the SM's own CA: the SM is always on `sm_port`.
  /// LID-routed SMPs (class 0x01) go to `dlid` (the LRH DLID, which the MAD
  /// does not carry; permissive = the SM's link neighbour) through the
  /// switch's LinearForwardingTable, and their response back to the SM
  /// port's LID the same way.
  /// Any 256 bytes are safe input; other lengths are dropped.
  /// An SMP whose route leaves the host is handed to on_departure and
  /// `*departed` is set; its response, if any, comes to on_returned_smp.
  std::optional<std::array<uint8_t, 256>> process_smp(PortRef sm_port, const uint8_t* mad,
                                                      size_t len, uint16_t dlid = 0xffff,
                                                      bool* departed = nullptr);

  // --- inter-host ports ---
  /// How many inter-host ports the switch has (Config::fabric.max_hosts - 1).
  int uplink_count() const;
  /// The switch port number of inter-host link `uplink`.
  int uplink_port(int uplink) const;
  /// The host at the other end answers, or stopped answering.
  void set_uplink_alive(int uplink, bool alive);
  /// Whether inter-host link `uplink` is up (both hosts alive, cable in).
  bool uplink_up(int uplink) const;
  /// The inter-host link the switch forwards `lid` to, if its forwarding
  /// table says so.
  std::optional<int> uplink_for_lid(uint16_t lid) const;
  /// A packet (LRH .. MAD) that leaves by inter-host link `uplink`.
  using DepartureFn = std::function<void(int uplink, const std::vector<uint8_t>& packet)>;
  void on_departure(DepartureFn fn) { departure_ = std::move(fn); }
  /// A response that came back from another host to the SM on `port`.
  using ReturnedFn =
      std::function<void(PortRef port, uint16_t slid, const std::array<uint8_t, 256>& response)>;
  void on_returned_smp(ReturnedFn fn) { returned_ = std::move(fn); }
  /// An SMP packet (request or response) that came in by inter-host link
  /// `uplink`, with its LRH's LIDs: it continues its route here.
  void receive_smp(int uplink, uint16_t slid, uint16_t dlid, const uint8_t* mad, size_t len);
  /// Called after an SMP changed the switch's forwarding table.
  void on_lft_change(std::function<void()> cb) { lft_changed_ = std::move(cb); }

  /// Attributes of a CA port; a default (Down) value for a port that does
  /// not exist.
  PortAttributes port(PortRef p) const;
  /// Sets or clears PortInfo:CapabilityMask.IsSM (an SM attached on that port).
  /// An SM that attaches starts DISCOVERING with priority 0; one that leaves
  /// is NOTACTIVE.
  void set_is_sm(PortRef p, bool is_sm);
  /// A consumer's ib_modify_port: sets, then clears, CapabilityMask bits
  /// (the kernel's CM announces IsCommunicationManagementSupported). IsSM
  /// goes through set_is_sm.
  void modify_capabilities(PortRef p, uint32_t set, uint32_t clear);
  /// What the SM on port `p` says of itself: the SMA of the port answers
  /// SubnGet(SMInfo) with this priority (0..15) and state (IBA 14.2.5.13).
  void set_sm_info(PortRef p, uint8_t priority, mad::SmState state);
  struct SmInfoView {
    uint8_t priority = 0;
    mad::SmState state = mad::SmState::kNotActive;
  };
  /// The priority and state last set for the SM on port `p`.
  SmInfoView sm_info(PortRef p) const;
  /// Plugs or unplugs the cable of a CA port (both ends go Down and Polling,
  /// or retrain to Init): how a test or `ibemu` simulates a link failure.
  void set_link_up(PortRef p, bool up);
  /// Called for every CA port whose PortAttributes changed because of an SMP
  /// or a link event. Several callbacks may be registered.
  void on_port_change(std::function<void(PortRef)> cb);

  /// The local CA port that owns `lid` (base LID .. base + 2^LMC - 1).
  std::optional<PortRef> port_by_lid(uint16_t lid) const;
  /// Every CA port, in config order (the switch's port order).
  std::vector<PortRef> ports() const;
  /// The switch and every port, as JSON for `ibemu status`.
  nlohmann::json describe() const;

  /// The switch's GUID and LID (0 before an SM assigned one).
  uint64_t switch_guid() const;
  uint16_t switch_lid() const;
  /// The switch's LFT entry for `lid` (0xFF = none).
  uint8_t switch_lft(uint16_t lid) const;

 private:
  std::vector<PortAttributes> snapshot() const;
  void notify(const std::vector<PortAttributes>& before);
  /// Sends an SMP packet out of the host (no-op without on_departure).
  void depart(int uplink, uint16_t slid, uint16_t dlid, const uint8_t* mad);
  /// A response reached `to` on its way back: a CA port of this host (the
  /// SM's: on_returned_smp) or an inter-host port (it leaves).
  template <typename Outcome>
  void forward_response(const Outcome& to, uint16_t slid, uint16_t dlid,
                        const std::array<uint8_t, 256>& resp);
  /// An SMP that came in by switch port `switch_port` from another host.
  void receive_directed(int switch_port, mad::Smp& smp, uint16_t slid, uint16_t dlid);
  void receive_lid_routed(int switch_port, mad::Smp& smp, uint16_t slid, uint16_t dlid);

  Config cfg_;
  std::unique_ptr<subnet_detail::SubnetModel> model_;
  std::vector<std::function<void(PortRef)>> callbacks_;
  DepartureFn departure_;
  ReturnedFn returned_;
  std::function<void()> lft_changed_;
  int first_uplink_port_ = 0;
};

}  // namespace ibemu
