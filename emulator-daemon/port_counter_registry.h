#pragma once
// The port counters of every emulated HCA: the counter pages of the contexts
// open on it now, and what the closed ones counted. Counters only grow while
// the daemon runs, as an HCA's do while it is powered.
#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "common/config.h"
#include "common/control_channel.h"
#include "common/counter_page.h"

namespace ibemu {

class PortCounterRegistry {
 public:
  explicit PortCounterRegistry(const Config& config);

  /// A context opened on `device` with its counter page; returns its id.
  uint64_t add(int device, CounterPage page);
  /// The context closed (or its process went away): keep what it counted.
  void remove(uint64_t id);

  /// One port's counters: closed contexts plus open ones.
  PortTotals port_totals(int device, int port) const;
  Json port_json(int device, int port) const { return port_totals(device, port).to_json(); }
  /// Drops no port could be charged with (malformed, DLID of no port).
  Json device_drops_json(int device) const;
  /// Regions the device's live contexts hold on GPU memory: {"regions", "bytes"}.
  Json gpu_memory_json(int device) const;

 private:
  struct Live {
    int device;
    CounterPage page;
  };
  struct DeviceTotals {
    std::array<PortTotals, engine::kCounterPorts + 1> ports{};
    uint64_t malformed = 0, wrong_dlid = 0;
  };
  void fold(int device, const engine::EngineCounters& c, DeviceTotals* into) const;

  std::map<uint64_t, Live> live_;
  std::vector<DeviceTotals> closed_;
  uint64_t next_id_ = 1;
};

}  // namespace ibemu
