#include "emulator-daemon/sysfs_tree.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ibemu {

namespace fs = std::filesystem;

namespace {

// Readers may open a file while we rewrite it: write aside, then rename, so
// they see the old or the new value, never a truncated one.
bool write_file(const std::string& path, const std::string& value) noexcept {
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return false;
  bool ok = std::fputs(value.c_str(), f) >= 0;
  ok &= std::fclose(f) == 0;
  return ok && std::rename(tmp.c_str(), path.c_str()) == 0;
}

void must_write(const std::string& path, const std::string& value) {
  if (!write_file(path, value)) throw std::runtime_error("cannot write " + path);
}

const char* state_name(PortState s) {
  switch (s) {
    case PortState::kDown:
      return "1: DOWN";
    case PortState::kInit:
      return "2: INIT";
    case PortState::kArmed:
      return "3: ARMED";
    case PortState::kActive:
      return "4: ACTIVE";
    default:
      return "0: NOP";
  }
}

const char* phys_state_name(PhysState s) {
  switch (s) {
    case PhysState::kSleep:
      return "1: Sleep";
    case PhysState::kPolling:
      return "2: Polling";
    case PhysState::kDisabled:
      return "3: Disabled";
    case PhysState::kLinkUp:
      return "5: LinkUp";
  }
  return "0: <unknown>";
}

}  // namespace

std::string format_sysfs_guid(uint64_t g) {
  return fmt::format("{:04x}:{:04x}:{:04x}:{:04x}", (g >> 48) & 0xffff, (g >> 32) & 0xffff,
                     (g >> 16) & 0xffff, g & 0xffff);
}

std::string format_sysfs_gid(uint64_t prefix, uint64_t guid) {
  return format_sysfs_guid(prefix) + ":" + format_sysfs_guid(guid);
}

SysfsTree::SysfsTree(std::string root, const Config& config)
    : root_(std::move(root)), config_(config) {}

SysfsTree::~SysfsTree() = default;

std::string SysfsTree::parent_device_dir(int device) const {
  return root_ + "/" + parent_device_path(config_.devices[device].name);
}

std::string SysfsTree::device_dir(int device) const {
  return parent_device_dir(device) + "/infiniband/" + config_.devices[device].name;
}

std::string parent_device_path(const std::string& ibdev) {
  return "devices/virtual/ibemu/" + ibdev;
}

// A kernel class entry is a symlink to the device's place under devices/,
// which sits inside the directory of the device it hangs off (its parent,
// `device`). Tools read that parent: UCX takes the directory two levels up
// from the resolved class entry as the HCA's bus device and reads its
// `vendor` and `device` there; others read `device/numa_node`. A real HCA's
// parent is a PCI function; ibemu's is a virtual device of its own class,
// so nothing claims a bus address that does not exist. Relative links keep
// the tree valid wherever its root is.
void SysfsTree::create_parent_device(int device) {
  const DeviceConfig& dev = config_.devices[device];
  std::string parent = parent_device_dir(device);
  fs::create_directories(parent);
  // The ids the HCA reports (ibv_query_device), in the format of a PCI
  // device's files.
  must_write(parent + "/vendor", fmt::format("0x{:04x}\n", dev.vendor_id));
  must_write(parent + "/device", fmt::format("0x{:04x}\n", dev.vendor_part_id));
  // No NUMA affinity, as the kernel reports for a device off any node.
  must_write(parent + "/numa_node", "-1\n");
  fs::create_directory_symlink("../../../" + dev.name, device_dir(device) + "/device");
  fs::create_directory_symlink("../../" + parent_device_path(dev.name) + "/infiniband/" + dev.name,
                               root_ + "/class/infiniband/" + dev.name);
}

std::string SysfsTree::port_dir(PortRef port) const {
  return device_dir(port.device) + "/ports/" + std::to_string(port.port);
}

void SysfsTree::create(const Subnet& subnet) {
  remove();
  fs::create_directories(root_ + "/class/infiniband");
  fs::create_directories(root_ + "/class/infiniband_verbs");
  fs::create_directories(root_ + "/class/infiniband_mad");
  fs::create_directories(root_ + "/dev/infiniband");
  // IB_USER_VERBS_ABI_VERSION of the uverbs core, and the per-device driver ABI
  // the provider matches on (provider/verbs_provider.c).
  must_write(root_ + "/class/infiniband_verbs/abi_version", "6\n");
  must_write(root_ + "/class/infiniband_mad/abi_version", "5\n");
  int umad = 0;  // the kernel numbers umad files by port, in device order
  for (size_t d = 0; d < config_.devices.size(); ++d) {
    const DeviceConfig& dev = config_.devices[d];
    for (int p = 1; p <= dev.ports; ++p, ++umad) {
      // What libibumad reads to map "device, port" to /dev/infiniband/umadN
      // (the socket UmadService binds there).
      std::string dir = root_ + "/class/infiniband_mad/umad" + std::to_string(umad);
      fs::create_directories(dir);
      must_write(dir + "/ibdev", dev.name + "\n");
      must_write(dir + "/port", std::to_string(p) + "\n");
      must_write(dir + "/dev", "0:0\n");
      // Its issm file: opening it sets the port's IsSM bit (the shim asks
      // the umad socket); the node is here for `ls /dev/infiniband`.
      std::string issm = root_ + "/class/infiniband_mad/issm" + std::to_string(umad);
      fs::create_directories(issm);
      must_write(issm + "/ibdev", dev.name + "\n");
      must_write(issm + "/port", std::to_string(p) + "\n");
      must_write(issm + "/dev", "0:0\n");
      must_write(root_ + "/dev/infiniband/issm" + std::to_string(umad), "");
    }
    std::string uverbs = root_ + "/class/infiniband_verbs/uverbs" + std::to_string(d);
    fs::create_directories(uverbs);
    must_write(uverbs + "/ibdev", dev.name + "\n");
    // 0:0 tells libibverbs not to compare the cdev's dev_t (no real cdev here).
    must_write(uverbs + "/dev", "0:0\n");
    must_write(uverbs + "/abi_version", "1\n");
    must_write(root_ + "/dev/infiniband/uverbs" + std::to_string(d), "");

    std::string dir = device_dir(d);
    fs::create_directories(dir + "/ports");
    create_parent_device(static_cast<int>(d));
    must_write(dir + "/node_type", "1: CA\n");
    must_write(dir + "/node_guid", format_sysfs_guid(dev.node_guid) + "\n");
    must_write(dir + "/sys_image_guid", format_sysfs_guid(dev.sys_image_guid) + "\n");
    must_write(dir + "/fw_ver", dev.fw_ver + "\n");
    must_write(dir + "/hw_rev", fmt::format("0x{:x}\n", dev.hw_ver));
    must_write(dir + "/hca_type", "ibemu\n");
    must_write(dir + "/board_id", dev.board_id + "\n");
    must_write(dir + "/node_desc", dev.node_desc + "\n");
    for (int p = 1; p <= dev.ports; ++p) {
      PortRef ref{static_cast<int>(d), p};
      std::string pd = port_dir(ref);
      fs::create_directories(pd + "/gids");
      fs::create_directories(pd + "/pkeys");
      fs::create_directories(pd + "/gid_attrs/types");
      fs::create_directories(pd + "/gid_attrs/ndevs");
      must_write(pd + "/link_layer", "InfiniBand\n");
      must_write(pd + "/gid_attrs/types/0", "IB/RoCE v1\n");
      update_port(subnet, ref);
    }
  }
}

void SysfsTree::update_port(const Subnet& subnet, PortRef port) noexcept {
  PortAttributes a = subnet.port(port);
  std::string pd = port_dir(port);
  write_file(pd + "/state", std::string(state_name(a.state)) + "\n");
  write_file(pd + "/phys_state", std::string(phys_state_name(a.phys_state)) + "\n");
  write_file(pd + "/lid", fmt::format("0x{:x}\n", a.lid));
  write_file(pd + "/sm_lid", fmt::format("0x{:x}\n", a.sm_lid));
  write_file(pd + "/lid_mask_count", fmt::format("{}\n", a.lmc));
  write_file(pd + "/sm_sl", fmt::format("{}\n", a.sm_sl));
  write_file(pd + "/cap_mask", fmt::format("0x{:08x}\n", a.cap_mask));
  write_file(pd + "/rate", rate_string(a) + "\n");
  write_file(pd + "/gids/0", format_sysfs_gid(a.subnet_prefix, a.port_guid) + "\n");
  for (size_t i = 0; i < a.num_pkeys; ++i)
    write_file(pd + "/pkeys/" + std::to_string(i), fmt::format("0x{:04x}\n", a.pkeys[i]));
}

void SysfsTree::remove() noexcept {
  std::error_code ec;
  fs::remove_all(root_, ec);
}

}  // namespace ibemu
