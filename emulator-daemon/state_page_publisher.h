#pragma once
// Publishes the host's HCA state to every process through a shared memfd
// (common/state_page.h): one writer (the daemon thread), lock-free readers.
#include <vector>

#include "common/config.h"
#include "common/state_page.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

class StatePagePublisher {
 public:
  /// Creates the memfd; throws on failure (start-up only).
  StatePagePublisher(const Config& config, const Subnet& subnet);
  ~StatePagePublisher();
  StatePagePublisher(const StatePagePublisher&) = delete;
  StatePagePublisher& operator=(const StatePagePublisher&) = delete;

  void update_port(PortRef port) noexcept;
  void set_capture_sessions(uint32_t n) noexcept;
  void set_link_faults(PortRef port, const LinkFaultView& faults) noexcept;
  /// At most kMaxForcedNaks entries; the rest are ignored.
  void set_forced_naks(const std::vector<ForcedNakView>& entries) noexcept;
  /// A read-only fd for clients (a fresh O_RDONLY open of the memfd).
  int reader_fd() const noexcept;
  /// Asks every context for a snapshot; returns the request's number.
  uint64_t request_snapshots() noexcept;
  /// Tells route caches that some process's inbox is gone.
  void note_inbox_closed() noexcept;
  uint64_t epoch() const { return page_->daemon_epoch.load(); }

 private:
  /// Copies the port's attributes into the page; true when its P_Key
  /// table changed.
  bool fill_port(PortRef port) noexcept;
  /// links_impaired: any faults set, or a configured port not Active.
  void update_impaired() noexcept;

  const Config& config_;
  const Subnet& subnet_;
  int fd_ = -1;
  StatePage* page_ = nullptr;
};

}  // namespace ibemu
