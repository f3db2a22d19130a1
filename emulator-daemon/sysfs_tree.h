#pragma once
// The fake sysfs tree of no-kernel mode: the files libibverbs, libibumad
// (ibstat), ibstatus and UCX read, in the formats and layout the kernel
// writes them. The preload shim points /sys/class/infiniband*,
// /sys/devices/virtual/ibemu and /dev/infiniband here.
#include <string>

#include "common/config.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

class SysfsTree {
 public:
  SysfsTree(std::string root, const Config& config);
  ~SysfsTree();

  /// Writes every device and port; throws on I/O errors (start-up only).
  void create(const Subnet& subnet);
  /// Rewrites one port's changing files (state, LIDs, ...). Never throws.
  void update_port(const Subnet& subnet, PortRef port) noexcept;
  /// Removes the whole tree.
  void remove() noexcept;

 private:
  void create_parent_device(int device);
  std::string parent_device_dir(int device) const;
  std::string device_dir(int device) const;
  std::string port_dir(PortRef port) const;

  std::string root_;
  const Config& config_;
};

/// Where the device an HCA hangs off lives, relative to the sysfs root:
/// "devices/virtual/ibemu/<ibdev>".
std::string parent_device_path(const std::string& ibdev);
/// "0002:c903:00ab:cd01" — the kernel's GUID format in sysfs.
std::string format_sysfs_guid(uint64_t guid);
/// "fe80:0000:0000:0000:0002:c903:00ab:cd02" — a GID as sysfs prints it.
std::string format_sysfs_gid(uint64_t prefix, uint64_t guid);

}  // namespace ibemu
