// Kernel mode's data plane in the daemon: the plane's start, the request
// by which its contexts claim the kernel's QP numbers, and its status.
#include <unistd.h>

#include "common/json_integer.h"
#include "common/log.h"
#include "emulator-daemon/daemon.h"

namespace ibemu {

void Daemon::start_kernel_plane() {
  std::vector<std::string> names;
  for (const DeviceConfig& d : config_.devices) names.push_back(d.name);
  kernel_plane_ = std::make_unique<KernelPlane>(
      paths_, std::move(names), KernelBridge::kKernelQpnFirst, KernelBridge::kKernelQpnCount,
      kernel_.data_channel(), [this](KernelDataChannel::Handler handler) {
        return kernel_.open_data_channel(std::move(handler));
      });
  kernel_plane_->start();
}

// The kernel plane's context of a device takes the block of QPNs ibemu.ko
// numbers kernel QPs from: packets for them then reach its inbox. Only the
// daemon's own threads may (a program holding the block could read kernel
// consumers' traffic).
Json Daemon::do_kernel_plane(SessionInfo& s, const Json& req) {
  if (s.pid != getpid()) return error_reply(EPERM, "kernel_plane is the daemon's own");
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  if (client_of(s).inbox_fd < 0) return error_reply(EINVAL, "register an inbox first");
  const auto first = json_integer<uint32_t>(req.at("qpn_first"));
  const auto count = json_integer<uint32_t>(req.at("qpn_count"));
  if (!qps_.reserve(d, first, count, s.id))
    return error_reply(EBUSY, "those QP numbers are not free");
  return {{"ok", true}};
}

Json Daemon::kernel_status() const {
  const KernelDataChannel& channel = kernel_.data_channel();
  const KernelDataCounters& c = channel.counters();
  Json status = {{"registered", kernel_.active()},
                 {"process_mad", kernel_.counters().process_mad},
                 {"mads_sent", kernel_.counters().mads_sent},
                 {"mads_received", kernel_.counters().mads_received},
                 {"data_channel",
                  {{"open", channel.active()},
                   {"batches", c.batches.load()},
                   {"records", c.records.load()},
                   {"malformed", c.malformed.load()},
                   {"completions", c.completions.load()},
                   {"copies", c.copies.load()},
                   {"copy_bytes", c.copy_bytes.load()},
                   {"copy_errors", c.copy_errors.load()}}}};
  if (kernel_plane_) status["plane"] = kernel_plane_->status();
  return status;
}

}  // namespace ibemu
