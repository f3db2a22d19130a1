#include "emulator-daemon/state_page_publisher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "transport/link/sealed_memfd.h"

namespace ibemu {

StatePagePublisher::StatePagePublisher(const Config& config, const Subnet& subnet)
    : config_(config), subnet_(subnet) {
  // Sealed: clients may map it writable through /proc, but cannot resize it.
  fd_ = link::create_sealed_memfd("ibemu-state", sizeof(StatePage));
  if (fd_ < 0) throw std::runtime_error("cannot create the state page memfd");
  void* p = mmap(nullptr, sizeof(StatePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot map the state page");
  page_ = new (p) StatePage{};
  page_->magic = StatePage::kMagic;
  page_->daemon_epoch =
      std::chrono::steady_clock::now().time_since_epoch().count() ^ (uint64_t(getpid()) << 40);
  page_->num_devices = static_cast<uint32_t>(config.devices.size());
  for (size_t d = 0; d < config.devices.size() && d < kMaxDevices; ++d) {
    const DeviceConfig& dev = config.devices[d];
    DeviceStateView& v = page_->devices[d];
    std::snprintf(v.name, sizeof(v.name), "%s", dev.name.c_str());
    std::snprintf(v.fw_ver, sizeof(v.fw_ver), "%s", dev.fw_ver.c_str());
    v.node_guid = dev.node_guid;
    v.sys_image_guid = dev.sys_image_guid;
    v.vendor_id = dev.vendor_id;
    v.vendor_part_id = dev.vendor_part_id;
    v.hw_ver = dev.hw_ver;
    v.num_ports = dev.ports;
    for (int port = 1; port <= dev.ports; ++port) fill_port({static_cast<int>(d), port});
  }
}

StatePagePublisher::~StatePagePublisher() {
  if (page_) munmap(page_, sizeof(StatePage));
  if (fd_ >= 0) close(fd_);
}

bool StatePagePublisher::fill_port(PortRef port) noexcept {
  PortAttributes a = subnet_.port(port);
  PortStateView& v = page_->devices[port.device].ports[port.port - 1];
  v.state = static_cast<uint8_t>(a.state);
  v.phys_state = static_cast<uint8_t>(a.phys_state);
  v.max_mtu = static_cast<uint8_t>(mtu_enum_from_bytes(config_.max_mtu));
  // The active MTU is what the SM negotiated with the neighbour (PortInfo:NeighborMTU).
  v.active_mtu = a.neighbor_mtu ? std::min(a.neighbor_mtu, v.max_mtu) : v.max_mtu;
  v.lid = a.lid;
  v.sm_lid = a.sm_lid;
  v.lmc = a.lmc;
  v.sm_sl = a.sm_sl;
  v.active_width = a.link_width_active;
  v.active_speed = a.link_speed_active;
  v.cap_mask = a.cap_mask;
  v.port_guid = a.port_guid;
  v.subnet_prefix = a.subnet_prefix;
  const bool pkeys_changed =
      v.num_pkeys != a.num_pkeys || !std::equal(a.pkeys.begin(), a.pkeys.end(), v.pkeys);
  v.num_pkeys = a.num_pkeys;
  std::copy(a.pkeys.begin(), a.pkeys.end(), v.pkeys);
  return pkeys_changed;
}

void StatePagePublisher::update_port(PortRef port) noexcept {
  page_->seq.fetch_add(1, std::memory_order_acq_rel);
  const bool pkeys_changed = fill_port(port);
  page_->seq.fetch_add(1, std::memory_order_release);
  if (pkeys_changed) page_->pkey_generation.fetch_add(1, std::memory_order_release);
  update_impaired();
}

void StatePagePublisher::set_link_faults(PortRef port, const LinkFaultView& faults) noexcept {
  if (port.device >= kMaxDevices || port.port < 1 || port.port > kMaxPorts) return;
  page_->seq.fetch_add(1, std::memory_order_acq_rel);
  page_->faults[port.device][port.port - 1] = faults;
  page_->seq.fetch_add(1, std::memory_order_release);
  update_impaired();
}

void StatePagePublisher::set_forced_naks(const std::vector<ForcedNakView>& entries) noexcept {
  page_->seq.fetch_add(1, std::memory_order_acq_rel);
  for (int i = 0; i < kMaxForcedNaks; ++i)
    page_->forced_naks[i] = size_t(i) < entries.size() ? entries[i] : ForcedNakView{};
  page_->seq.fetch_add(1, std::memory_order_release);
  page_->forced_nak_entries.store(uint32_t(std::min<size_t>(entries.size(), kMaxForcedNaks)),
                                  std::memory_order_release);
}

void StatePagePublisher::update_impaired() noexcept {
  static const LinkFaultView kNone{};
  bool impaired = false;
  for (size_t d = 0; d < config_.devices.size() && d < kMaxDevices; ++d)
    for (int p = 1; p <= config_.devices[d].ports && p <= kMaxPorts; ++p) {
      impaired |= std::memcmp(&page_->faults[d][p - 1], &kNone, sizeof kNone) != 0;
      impaired |= page_->devices[d].ports[p - 1].state != uint8_t(PortState::kActive);
    }
  page_->links_impaired.store(impaired, std::memory_order_release);
}

void StatePagePublisher::set_capture_sessions(uint32_t n) noexcept {
  page_->capture_sessions.store(n, std::memory_order_release);
}

int StatePagePublisher::reader_fd() const noexcept {
  std::string path = "/proc/self/fd/" + std::to_string(fd_);
  return open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

void StatePagePublisher::note_inbox_closed() noexcept {
  page_->inboxes_closed.fetch_add(1, std::memory_order_release);
}

uint64_t StatePagePublisher::request_snapshots() noexcept {
  return page_->snapshot_request.fetch_add(1, std::memory_order_release) + 1;
}

}  // namespace ibemu
