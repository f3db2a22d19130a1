#include "emulator-daemon/port_counter_registry.h"

namespace ibemu {

PortCounterRegistry::PortCounterRegistry(const Config& config) : closed_(config.devices.size()) {}

uint64_t PortCounterRegistry::add(int device, CounterPage page) {
  const uint64_t id = next_id_++;
  live_.emplace(id, Live{device, std::move(page)});
  return id;
}

void PortCounterRegistry::remove(uint64_t id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (it->second.page.get())
    fold(it->second.device, *it->second.page.get(), &closed_[it->second.device]);
  live_.erase(it);
}

void PortCounterRegistry::fold(int, const engine::EngineCounters& c, DeviceTotals* into) const {
  for (int p = 1; p <= engine::kCounterPorts; ++p) into->ports[p].add(c.port[p]);
  into->malformed += c.rcv_malformed.load(std::memory_order_relaxed);
  into->wrong_dlid += c.rcv_wrong_dlid.load(std::memory_order_relaxed);
}

PortTotals PortCounterRegistry::port_totals(int device, int port) const {
  if (device < 0 || device >= int(closed_.size()) || port < 1 || port > engine::kCounterPorts)
    return {};
  PortTotals t = closed_[device].ports[port];
  for (const auto& [id, live] : live_)
    if (live.device == device && live.page.get()) t.add(live.page.get()->port[port]);
  return t;
}

Json PortCounterRegistry::gpu_memory_json(int device) const {
  uint64_t regions = 0, bytes = 0;
  for (const auto& [id, live] : live_)
    if (live.device == device && live.page.get()) {
      regions += live.page.get()->gpu_regions.load(std::memory_order_relaxed);
      bytes += live.page.get()->gpu_region_bytes.load(std::memory_order_relaxed);
    }
  return {{"regions", regions}, {"bytes", bytes}};
}

Json PortCounterRegistry::device_drops_json(int device) const {
  DeviceTotals t = closed_[device];
  for (const auto& [id, live] : live_)
    if (live.device == device && live.page.get()) fold(device, *live.page.get(), &t);
  return {{"malformed", t.malformed}, {"wrong_dlid", t.wrong_dlid}};
}

}  // namespace ibemu
