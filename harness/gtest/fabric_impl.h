#pragma once
// What a Fabric holds, shared by its lifecycle (fabric.cc) and its controls
// (fabric_controls.cc).
#include <sys/types.h>

#include <string>

#include "common/control_channel.h"
#include "ibemu/gtest_fabric.h"

namespace ibemu::testing {

struct Fabric::Impl {
  std::string dir;
  bool owner = false;
  // Only the process that started the fabric stops it: children that fork
  // (death tests) run the same exit path.
  pid_t owner_pid = 0;
  ControlClient capture_session;  // a capture lives as long as its session
  uint64_t capture_id = 0;

  /// One request on a fresh session; the reply when "ok", else FabricError.
  Json request(const Json& req) const;
  Json status() const { return request({{"op", "status"}}); }
  /// The `status` entry of a port; FabricError when there is none.
  Json port_status(const std::string& device, int port) const;
};

}  // namespace ibemu::testing
