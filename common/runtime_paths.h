#pragma once
// Where a host's ibemu state lives. One runtime directory per daemon: its control
// socket, lock, logs and the fake sysfs tree of no-kernel mode.
#include <string>

namespace ibemu {

/// $IBEMU_RUNTIME_DIR, else $XDG_RUNTIME_DIR/ibemu, else /run/ibemu for root,
/// else /tmp/ibemu-<uid>.
std::string default_runtime_dir();
/// The runtime directory of the system's daemon, the one that drives
/// ibemu.ko's devices: $IBEMU_RUNTIME_DIR, else /run/ibemu.
std::string system_runtime_dir();

struct RuntimePaths {
  std::string dir;
  std::string socket() const { return dir + "/ibemud.sock"; }
  std::string lock() const { return dir + "/ibemud.lock"; }
  std::string sysfs() const { return dir + "/sysfs"; }
  std::string daemon_log() const { return dir + "/ibemud.log"; }
  std::string sm_log() const { return dir + "/ibemu-sm.log"; }
  std::string sm_lock() const { return dir + "/ibemu-sm.lock"; }
};

inline RuntimePaths runtime_paths() { return RuntimePaths{default_runtime_dir()}; }

}  // namespace ibemu
