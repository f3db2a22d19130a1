#pragma once
// One opened emulated HCA inside an application process: the connection to
// ibemud, the state page, the inbox ring and the progress thread that plays
// the HCA's firmware (receives packets, runs transport timers) so a target
// process needs no thread of its own for its QPs to make progress.
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "common/control_channel.h"
#include "common/counter_page.h"
#include "common/snapshot_page.h"
#include "common/state_page.h"
#include "provider/core/cq_numbers.h"
#include "provider/core/forced_nak_table.h"
#include "provider/core/packet_trace.h"
#include "provider/core/shared_xrc_qps.h"
#include "provider/core/shm_link.h"
#include "provider/core/spec_checks.h"
#include "transport/engine/hca_engine.h"
#include "transport/link/shm_ring.h"

namespace ibemu::provider {

class ProviderContext : public engine::PortTable {
 public:
  ProviderContext() = default;
  ~ProviderContext() override;

  /// Connects and starts the progress thread. Returns 0 or an errno (with a
  /// message on stderr that tells the user what to do).
  /// `cmd_fd` is the context's uverbs file; on a kernel device (ibemu.ko)
  /// the context also opens in the kernel, for its async events and
  /// completion channels.
  int open(const char* ibdev_name, int cmd_fd) noexcept;

  engine::PortAddress port(uint8_t port_num) const noexcept override;
  uint32_t pkey_generation() const noexcept override {
    return page_->pkey_generation.load(std::memory_order_acquire);
  }
  const DeviceStateView& device() const { return page_->devices[device_index_]; }
  PortStateView port_view(uint8_t port_num) const {
    return page_->read_port(device_index_, port_num - 1);
  }
  int num_ports() const { return static_cast<int>(device().num_ports); }
  int device_index() const { return device_index_; }

  engine::HcaEngine& engine() { return *engine_; }
  /// IBEMU_CHECK's warnings for this context; its hooks are called only
  /// when diagnostics::on(kChecks).
  SpecChecks& checks() { return checks_; }
  ControlClient& daemon() { return daemon_; }
  ShmLink& link() { return *link_; }
  /// ibv_open_qp's handles on XRC receive QPs, of this context and others.
  SharedXrcQps& shared_qps() { return shared_qps_; }
  /// The context's CQs by number, for `ibemu status`.
  CqNumbers& cq_numbers() { return cq_numbers_; }
  /// The daemon session of this context: how other contexts address it.
  uint64_t session() const { return session_; }
  int async_read_fd() const { return async_pipe_[0]; }
  /// Kernel mode: the uverbs file of this context; -1 in no-kernel mode.
  int kernel_cmd_fd() const { return kernel_cmd_fd_; }
  /// Drains the inbox from an application thread (poll_cq found nothing):
  /// on a busy host this beats waiting for the progress thread to be
  /// scheduled. Returns whether packets were processed. Never blocks.
  bool try_progress() noexcept;
  /// Queues an async event (ibv_async_event's element and type) for ibv_get_async_event.
  void post_async_event(uint64_t element, uint32_t type) noexcept;

 private:
  void progress_loop() noexcept;
  /// Raises the async events a real HCA raises: port state, LID and SM
  /// changes seen on the state page (in kernel mode: those the kernel
  /// raised), and DEVICE_FATAL when ibemud goes away.
  void watch_device() noexcept;
  /// Kernel mode: moves the events the kernel raised to the async pipe.
  void forward_kernel_events() noexcept;
  /// Progress thread, once per timer scan: when the daemon asked for
  /// snapshots since the last answer, writes this context's into its
  /// snapshot page (provider_snapshot.cc).
  void answer_snapshot_request() noexcept;
  /// Sends what the link queued for rings that have room now and resumes
  /// the QPs that waited for it; whether anything moved.
  bool flush_link(engine::Nanos now) noexcept;
  /// A packet the link gave up after queuing it: counted at its port.
  void count_discard(const uint8_t* packet, size_t len, ShmLink::Discard why) noexcept;
  /// Processes up to `budget` packets; the caller holds consumer_mutex_.
  int drain_inbox(int budget) noexcept;

  ControlClient daemon_;
  const StatePage* page_ = nullptr;
  int device_index_ = -1;
  link::ShmRing inbox_;
  // The inbox has one consumer at a time: the progress thread or an
  // application thread in try_progress().
  std::mutex consumer_mutex_;
  // When an application thread polled last; while it polls, the progress
  // thread stays out of its way (on a 2-core host every spinning thread
  // costs the poller its CPU).
  std::atomic<int64_t> last_app_poll_{0};
  CounterPage counters_;            // this context's port counters, shared with ibemud
  SnapshotPage snapshot_page_;      // where `ibemu status` reads its objects
  uint64_t snapshot_answered_ = 0;  // progress thread only
  CqNumbers cq_numbers_;
  uint64_t context_id_ = 0;  // ibemud's name for this context
  uint64_t session_ = 0;
  std::unique_ptr<ShmLink> link_;
  // IBEMU_TRACE=packets only: the engine sends through it to link_.
  std::unique_ptr<TracingPacketSink> traced_link_;
  std::unique_ptr<ForcedNakTable> forced_naks_;
  SpecChecks checks_;  // outlives the engine, which reports to it
  std::unique_ptr<engine::HcaEngine> engine_;
  SharedXrcQps shared_qps_{*this};
  std::thread progress_;
  std::atomic<bool> stopping_{false};
  int async_pipe_[2] = {-1, -1};
  int kernel_cmd_fd_ = -1;
  int kernel_async_fd_ = -1;  // the kernel's async events, moved to async_pipe_
  PortStateView last_ports_[kMaxPorts] = {};
  bool daemon_lost_ = false;
};

}  // namespace ibemu::provider
