#pragma once
// One emulated HCA's transport engine, hosted in a process: its daemon
// session, the state page, the inbox ring, the link to other inboxes, the
// port counter and snapshot pages, and the progress thread that plays the
// HCA's firmware (receives packets, runs transport timers) so that a target
// needs no thread of its own for its QPs to make progress. A verbs program's
// device context (ProviderContext) is one; nothing here knows verbs.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/control_channel.h"
#include "common/counter_page.h"
#include "common/runtime_paths.h"
#include "common/snapshot_page.h"
#include "common/state_page.h"
#include "provider/core/cq_numbers.h"
#include "provider/core/forced_nak_table.h"
#include "provider/core/packet_trace.h"
#include "provider/core/shm_link.h"
#include "provider/core/spec_checks.h"
#include "transport/engine/hca_engine.h"
#include "transport/link/shm_ring.h"

namespace ibemu::provider {

class EngineHost : public engine::PortTable {
 public:
  EngineHost() = default;
  ~EngineHost() override;
  EngineHost(const EngineHost&) = delete;
  EngineHost& operator=(const EngineHost&) = delete;

  /// Says hello to the daemon of `paths` as `role`, maps the state page,
  /// registers the inbox and the context's pages for device `ibdev_name`
  /// and builds the engine. The progress thread starts with
  /// start_progress(). Returns 0 or an errno (with a message on stderr that
  /// tells the user what to do).
  int open_engine(const RuntimePaths& paths, const char* ibdev_name, const char* role) noexcept;
  /// Starts the progress thread; the owner's hooks run on it from now on.
  void start_progress();
  /// Stops and joins the progress thread. An owner calls it before its own
  /// members go, since the thread calls its hooks.
  void stop_progress() noexcept;

  /// Stops the progress thread and closes the daemon session without a
  /// goodbye: for a host inside the daemon, which stops with it.
  void leave_daemon() noexcept;

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
  /// Whether open_engine() got as far as building the engine.
  bool has_engine() const { return engine_ != nullptr; }
  /// IBEMU_CHECK's warnings for this context; its hooks are called only
  /// when diagnostics::on(kChecks).
  SpecChecks& checks() { return checks_; }
  ControlClient& daemon() { return daemon_; }
  ShmLink& link() { return *link_; }
  /// The context's CQs by number, for `ibemu status`.
  CqNumbers& cq_numbers() { return cq_numbers_; }
  /// The daemon session of this context: how other contexts address it.
  uint64_t session() const { return session_; }
  /// Drains the inbox from an application thread (poll_cq found nothing):
  /// on a busy host this beats waiting for the progress thread to be
  /// scheduled. Returns whether packets were processed. Never blocks.
  bool try_progress() noexcept;

 protected:
  /// Progress thread, once per timer scan, after the host's own checks.
  virtual void on_scan() noexcept {}
  /// Progress thread, once: the daemon is gone and the engine has flushed
  /// every outstanding work request.
  virtual void on_daemon_lost() noexcept {}
  /// A message between contexts (context_link.h) that the engine did not take.
  virtual void on_message(const uint8_t*, size_t) noexcept {}

  const StatePage* page_ = nullptr;

 private:
  void progress_loop() noexcept;
  /// Notices the daemon going away (the emulated HCA's firmware dying).
  void watch_daemon() noexcept;
  /// Progress thread, once per timer scan: when the daemon asked for
  /// snapshots since the last answer, writes this context's into its
  /// snapshot page (engine_snapshot.cc).
  void answer_snapshot_request() noexcept;
  /// Sends what the link queued for rings that have room now and resumes
  /// the QPs that waited for it; whether anything moved.
  bool flush_link(engine::Nanos now) noexcept;
  /// A packet the link gave up after queuing it: counted at its port.
  void count_discard(const uint8_t* packet, size_t len, ShmLink::Discard why) noexcept;
  /// Processes up to `budget` packets; the caller holds consumer_mutex_.
  int drain_inbox(int budget) noexcept;

  ControlClient daemon_;
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
  std::thread progress_;
  std::atomic<bool> stopping_{false};
  bool daemon_lost_ = false;
};

}  // namespace ibemu::provider
