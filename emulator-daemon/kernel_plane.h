#pragma once
// Kernel mode: the daemon's data plane for kernel consumers' QPs. One
// KernelContext (an engine of the device) per ibemu.ko device; the data
// channel's reader applies the module's records to them; a forwarder thread
// hands completions and events back (IBEMU_IOC_COMPLETE). Started after the
// control server, since its contexts are sessions of this very daemon; the
// daemon's Asio thread never waits for it. docs/design/kernel-consumers.md,
// section 5.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/control_channel.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/kernel_context.h"
#include "emulator-daemon/kernel_data_channel.h"

namespace ibemu {

class KernelPlane {
 public:
  /// Opens the data channel with the handler given: 0 or an errno
  /// (KernelBridge::open_data_channel).
  using OpenChannel = std::function<int(KernelDataChannel::Handler)>;

  /// `devices`: the daemon's devices by index; `qpn_first`/`qpn_count`: the
  /// QPN block the module numbers kernel QPs from.
  KernelPlane(RuntimePaths paths, std::vector<std::string> devices, uint32_t qpn_first,
              uint32_t qpn_count, KernelDataChannel& channel, OpenChannel open_channel);
  ~KernelPlane();
  KernelPlane(const KernelPlane&) = delete;
  KernelPlane& operator=(const KernelPlane&) = delete;

  /// Opens the contexts and then the channel on a thread of its own (the
  /// contexts' requests need the daemon's Asio thread running).
  void start();
  /// Stops the channel's reader, the forwarder and the contexts. Never
  /// waits for the Asio thread, so it may run on it.
  void stop();

  Json status() const;

 private:
  void open_all();
  void on_record(const ibemu_data_hdr& hdr, const uint8_t* record);
  void wake();
  void forward_loop();

  const RuntimePaths paths_;
  const std::vector<std::string> devices_;
  const uint32_t qpn_first_, qpn_count_;
  KernelDataChannel& channel_;
  OpenChannel open_channel_;

  std::vector<std::unique_ptr<KernelContext>> contexts_;  // by device index, once opened
  std::thread opener_;
  std::thread forwarder_;
  mutable std::mutex mutex_;
  std::condition_variable woken_;
  bool pending_ = false;              // under mutex_
  bool stopping_ = false;             // under mutex_
  std::atomic<bool> serving_{false};  // the channel is open and contexts_ complete
  std::atomic<uint64_t> complete_errors_{0};
  std::string failure_;  // why the plane is not serving, once the opener ended
};

}  // namespace ibemu
