#pragma once
// One opened emulated HCA inside an application process: the engine host
// (daemon session, inbox, progress thread; engine_host.h) plus what verbs
// add to it: the uverbs file of a kernel device, async events, and XRC
// receive QPs shared with other contexts.
#include <memory>

#include "provider/core/engine_host.h"
#include "provider/core/shared_xrc_qps.h"

namespace ibemu::provider {

class ProviderContext : public EngineHost {
 public:
  ProviderContext() = default;
  ~ProviderContext() override;

  /// Connects and starts the progress thread. Returns 0 or an errno (with a
  /// message on stderr that tells the user what to do).
  /// `cmd_fd` is the context's uverbs file; on a kernel device (ibemu.ko)
  /// the context also opens in the kernel, for its async events and
  /// completion channels.
  int open(const char* ibdev_name, int cmd_fd) noexcept;

  /// ibv_open_qp's handles on XRC receive QPs, of this context and others.
  SharedXrcQps& shared_qps() { return shared_qps_; }
  int async_read_fd() const { return async_pipe_[0]; }
  /// Kernel mode: the uverbs file of this context; -1 in no-kernel mode.
  int kernel_cmd_fd() const { return kernel_cmd_fd_; }
  /// Queues an async event (ibv_async_event's element and type) for ibv_get_async_event.
  void post_async_event(uint64_t element, uint32_t type) noexcept;

 private:
  /// Raises the async events a real HCA raises: port state, LID and SM
  /// changes seen on the state page (in kernel mode: those the kernel
  /// raised).
  void on_scan() noexcept override;
  /// DEVICE_FATAL when ibemud goes away.
  void on_daemon_lost() noexcept override;
  void on_message(const uint8_t* msg, size_t len) noexcept override;
  /// Kernel mode: moves the events the kernel raised to the async pipe.
  void forward_kernel_events() noexcept;

  SharedXrcQps shared_qps_{*this};
  int async_pipe_[2] = {-1, -1};
  int kernel_cmd_fd_ = -1;
  int kernel_async_fd_ = -1;  // the kernel's async events, moved to async_pipe_
  PortStateView last_ports_[kMaxPorts] = {};
};

}  // namespace ibemu::provider
