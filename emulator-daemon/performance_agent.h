#pragma once
// The performance management agent of every emulated port (IBA 16.1): answers
// PerfMgt Gets of ClassPortInfo, PortCounters and PortCountersExtended from
// the port counters the providers keep, and Sets that clear them. What
// perfquery reads.
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "emulator-daemon/port_counter_registry.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

class PerformanceAgent {
 public:
  PerformanceAgent(const Config& config, const PortCounterRegistry& counters)
      : config_(config), counters_(counters) {}

  /// The response to a PerfMgt request that arrived at `port`, or nullopt
  /// for a MAD that is not one.
  std::optional<std::vector<uint8_t>> handle(PortRef port, const uint8_t* mad, size_t len);

 private:
  /// A port's counters since they were last cleared; port 0xFF (AllPortSelect)
  /// sums the device's ports.
  PortTotals counted(int device, uint8_t port_select) const;
  void clear(int device, uint8_t port_select);

  const Config& config_;
  const PortCounterRegistry& counters_;
  std::map<std::pair<int, int>, PortTotals> cleared_at_;  // device, port -> totals then
};

}  // namespace ibemu
