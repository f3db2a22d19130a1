#pragma once
// ibemud's configuration: what HCAs the host has and how they look. Read from a
// JSON file (docs/configuration.md); every field has a default, so an empty
// file (or none) gives 2 devices ibemu0/ibemu1 with 2 IB ports each, MTU 4096.
#include <cstdint>
#include <string>
#include <vector>

namespace ibemu {

struct DeviceConfig {
  std::string name;        // ibemu0
  uint64_t node_guid = 0;  // host order; 0 = derived from host id and index
  uint64_t sys_image_guid = 0;
  int ports = 2;
  uint32_t vendor_id = 0x02c9;       // IEEE OUI reported in ibv_devinfo
  uint32_t vendor_part_id = 0xbe00;  // generic id: not a ConnectX (perftest reads it)
  uint32_t hw_ver = 0;
  std::string fw_ver = "1.0.0";
  std::string board_id = "IBEMU0000000001";
  std::string node_desc;  // default "<hostname> <name>"
  /// The ports' IPoIB-style addresses for rdma_cm, "a.b.c.d/len", one per
  /// port; empty = the default (finalize()). IPv6 ones are optional.
  std::vector<std::string> ipv4;
  std::vector<std::string> ipv6;
};

/// The UDP links to the daemons of other hosts (docs/configuration.md,
/// "fabric"). Off unless the config has a "fabric" object.
struct FabricConfig {
  bool enabled = false;
  std::string bind = "0.0.0.0";    // IPv4 address the daemon's UDP socket binds
  uint16_t port = 18515;           // UDP port, here and the default of peers
  std::vector<std::string> peers;  // "host[:port]": the other hosts, fixed
  std::string seed;                // "host[:port]": a member through which this host joins
  int max_hosts = 16;              // the switch gets max_hosts - 1 inter-host ports
  int hello_ms = 100;              // how often each peer is told we are alive
  int dead_ms = 1000;              // a peer silent this long is down: its link goes Down
  int datagram_bytes = 16384;      // packets share a datagram up to this size
  std::string secret;              // from secret_file: datagrams are authenticated (HMAC)
};

/// Faults a port's link has from the start (`ibemu fault set` / `link`).
struct FaultConfig {
  std::string device;                           // name
  int port = 0;                                 // 0: every port of the device
  double drop = 0, duplicate = 0, reorder = 0;  // percent
  uint32_t delay_us = 0, jitter_us = 0, rate_mbps = 0;
  uint64_t seed = 1;
  bool link_down = false;  // the cable is pulled
};

/// A config is a few KiB; one far larger is a mistake, refused before it
/// is parsed.
inline constexpr size_t kMaxConfigBytes = 1 << 20;

struct Config {
  std::vector<DeviceConfig> devices;
  int max_mtu = 4096;  // bytes: 256, 512, 1024, 2048 or 4096
  uint16_t default_pkey = 0xffff;
  /// The P_Key table of every CA port (IBA 10.9): entry 0 first. Empty:
  /// one entry, default_pkey.
  std::vector<uint16_t> pkeys;
  /// The table as ports have it.
  std::vector<uint16_t> pkey_table() const {
    return pkeys.empty() ? std::vector<uint16_t>{default_pkey} : pkeys;
  }
  uint64_t subnet_prefix = 0xfe80000000000000ull;
  uint32_t host_id = 0;  // 0 = derived from the hostname; distinguishes GUIDs of hosts
  std::string log_level = "info";
  /// Registering the devices with ib_core through ibemu.ko's /dev/ibemu:
  /// "auto" when the module is loaded, "on" (fail without it) or "off".
  std::string kernel = "auto";
  /// "isolated": a process reaches (resolves the inbox of) only processes of
  /// its own user, root reaches all; "shared": any process reaches any.
  std::string users = "isolated";
  /// What one device context (a process's ibv_open_device) may hold, so that
  /// one program cannot starve the others: QP numbers of a device (the
  /// device's max_qp), and bytes registered as memory regions (0: no limit).
  uint32_t qps_per_context = 65536;
  uint64_t registered_bytes_per_context = 0;
  /// What one client of the control socket may hold, so that one user
  /// cannot exhaust the daemon's file descriptors or memory: connections of
  /// one user (root's are not counted), device contexts of one connection,
  /// rdma_cm port reservations of one connection.
  uint32_t sessions_per_user = 1024;
  uint32_t contexts_per_session = 1024;
  uint32_t cm_binds_per_session = 4096;
  FabricConfig fabric;
  std::vector<FaultConfig> faults;

  /// Parses the JSON text; throws std::runtime_error with a readable reason.
  static Config parse(const std::string& json_text);
  /// Reads and parses a file of at most kMaxConfigBytes; an empty path
  /// gives the defaults.
  static Config load(const std::string& path);
  /// Fills in derived defaults (devices, GUIDs, node descriptions).
  void finalize();
};

/// Maps an MTU in bytes to the IBA enum (1 = 256 … 5 = 4096); 0 if invalid.
int mtu_enum_from_bytes(int bytes);

}  // namespace ibemu
