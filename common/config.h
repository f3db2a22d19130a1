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
};

struct Config {
  std::vector<DeviceConfig> devices;
  int max_mtu = 4096;  // bytes: 256, 512, 1024, 2048 or 4096
  uint16_t default_pkey = 0xffff;
  uint64_t subnet_prefix = 0xfe80000000000000ull;
  uint32_t host_id = 0;  // 0 = derived from the hostname; distinguishes GUIDs of hosts
  std::string log_level = "info";

  /// Parses the JSON text; throws std::runtime_error with a readable reason.
  static Config parse(const std::string& json_text);
  /// Reads and parses a file; an empty path gives the defaults.
  static Config load(const std::string& path);
  /// Fills in derived defaults (devices, GUIDs, node descriptions).
  void finalize();
};

/// Maps an MTU in bytes to the IBA enum (1 = 256 … 5 = 4096); 0 if invalid.
int mtu_enum_from_bytes(int bytes);

}  // namespace ibemu
