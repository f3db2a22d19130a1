#pragma once
// The state page: a read-only shared-memory view of the host's HCAs that ibemud
// publishes to every process (memfd, passed at "hello"). ibv_query_port and
// ibv_query_device read it without a round trip to the daemon. Writers (the
// daemon only) bump `seq` to odd before changing a port and to even after,
// readers retry while it is odd or changed (a seqlock).
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace ibemu {

inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxPorts = 4;
inline constexpr int kMaxPkeys = 16;  // P_Key table entries of a port (PartitionCap)

/// IBA 14.2.5.6 PortInfo:PortState values.
enum class PortState : uint8_t { kNop = 0, kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };
/// PortInfo:PortPhysicalState (2 = Polling, 3 = Disabled, 5 = LinkUp).
enum class PhysState : uint8_t { kSleep = 1, kPolling = 2, kDisabled = 3, kLinkUp = 5 };

struct PortStateView {
  uint8_t state;       // PortState
  uint8_t phys_state;  // PhysState
  uint8_t max_mtu;     // IBA enum 1..5
  uint8_t active_mtu;
  uint16_t lid;
  uint16_t sm_lid;
  uint8_t lmc;
  uint8_t sm_sl;
  uint8_t active_width;  // ibv enum: 1=1x 2=4x
  uint8_t active_speed;  // ibv enum: 1=SDR ... 32=EDR
  uint32_t cap_mask;
  uint64_t port_guid;
  uint64_t subnet_prefix;
  uint16_t pkeys[kMaxPkeys];  // the P_Key table (IBA 10.9)
  uint8_t num_pkeys;
  uint8_t reserved[7];
};

struct DeviceStateView {
  char name[32];
  uint64_t node_guid;
  uint64_t sys_image_guid;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t num_ports;
  char fw_ver[32];
  PortStateView ports[kMaxPorts];
};

/// Fault injection on the link of one port (ibemu fault): what happens to
/// every packet that crosses it. Zero everywhere: a perfect link.
struct LinkFaultView {
  uint32_t drop_ppm;     // parts per million of packets lost
  uint32_t dup_ppm;      // ... delivered twice
  uint32_t reorder_ppm;  // ... held back behind the next packet
  uint32_t delay_us;     // added to every packet
  uint32_t jitter_us;    // plus a uniform 0..jitter
  uint32_t rate_mbps;    // bandwidth cap, 0: none
  uint64_t seed;         // the decisions' random sequence
};
static_assert(sizeof(LinkFaultView) == 32);

/// ibemu fault nak: the next `count` new requests to QP `qpn` of a device
/// are NAKed by its responder. An entry is identified by `id` (non-zero);
/// each process counts what it has consumed of each id itself.
struct ForcedNakView {
  uint32_t id;
  uint16_t device;
  uint8_t kind;  // engine::ForcedNak
  uint8_t reserved;
  uint32_t qpn;
  uint32_t count;
};
inline constexpr int kMaxForcedNaks = 16;

struct StatePage {
  static constexpr uint64_t kMagic = 0x65746174'53554d45ull;  // "EMUState"
  uint64_t magic;
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> daemon_epoch;  // changes when a new daemon starts
  uint32_t num_devices;
  /// Captures running (ibemu capture): providers mirror what they send to
  /// the daemon's capture socket while it is non-zero (common/capture_record.h).
  std::atomic<uint32_t> capture_sessions;
  DeviceStateView devices[kMaxDevices];
  /// Non-zero while some link has faults or a port is not Active: senders
  /// then look at `faults` and the port states for every packet.
  std::atomic<uint32_t> links_impaired;
  /// Bumped after an SM changed some port's P_Key table: QPs then look up
  /// the P_Key at their pkey_index again.
  std::atomic<uint32_t> pkey_generation;
  LinkFaultView faults[kMaxDevices][kMaxPorts];  // under `seq`, like the ports
  std::atomic<uint32_t> forced_nak_entries;      // non-zero: look at forced_naks
  uint32_t reserved3;
  ForcedNakView forced_naks[kMaxForcedNaks];  // under `seq`
  /// Bumped by the daemon when `ibemu status` wants every context's objects:
  /// each provider answers in its snapshot page (common/snapshot_page.h).
  std::atomic<uint64_t> snapshot_request;
  /// Bumped by the daemon when a process with an inbox left: whoever caches
  /// routes to inboxes drops them, so that departed programs' rings are
  /// unmapped (provider/core/shm_link.h).
  std::atomic<uint64_t> inboxes_closed;

  /// Copies one link's faults consistently (seqlock read).
  LinkFaultView read_faults(int dev, int port_index) const {
    LinkFaultView out;
    for (;;) {
      uint64_t before = seq.load(std::memory_order_acquire);
      if (before & 1) continue;
      out = faults[dev][port_index];
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq.load(std::memory_order_relaxed) == before) return out;
    }
  }

  /// The port (1-based) of device `dev` whose LIDs (base LID and its LMC
  /// range) include `lid`, or 0.
  int port_of_lid(int dev, uint16_t lid) const {
    for (uint32_t i = 0; i < devices[dev].num_ports && i < uint32_t(kMaxPorts); ++i) {
      const PortStateView p = read_port(dev, int(i));
      if (p.lid && lid >= p.lid && lid < p.lid + (1u << p.lmc)) return int(i) + 1;
    }
    return 0;
  }

  /// Copies one port's view consistently (seqlock read).
  PortStateView read_port(int dev, int port_index) const {
    PortStateView out;
    for (;;) {
      uint64_t before = seq.load(std::memory_order_acquire);
      if (before & 1) continue;
      out = devices[dev].ports[port_index];
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq.load(std::memory_order_relaxed) == before) return out;
    }
  }
};

static_assert(std::is_standard_layout_v<StatePage>);
static_assert(sizeof(PortStateView) == 72);

}  // namespace ibemu
