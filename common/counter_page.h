#pragma once
// The port counters of one HCA context in shared memory: the provider creates
// the page and counts into it; the daemon maps it read-only, sums the pages of
// a device's live contexts and keeps what closed contexts counted, as an HCA's
// counters outlive the programs that used it.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "transport/engine/counters.h"

namespace ibemu {

class CounterPage {
 public:
  CounterPage() = default;
  CounterPage(CounterPage&& other) noexcept;
  CounterPage& operator=(CounterPage&& other) noexcept;
  ~CounterPage();

  /// A new zeroed page (the provider). Returns 0 or an errno.
  int create() noexcept;
  /// Maps a page someone created, read-only (the daemon); takes `fd`.
  int attach_read_only(int fd) noexcept;

  int fd() const { return fd_; }
  engine::EngineCounters* get() { return counters_; }
  const engine::EngineCounters* get() const { return counters_; }

 private:
  void release() noexcept;

  int fd_ = -1;
  engine::EngineCounters* counters_ = nullptr;
};

/// Plain totals of counters (what closed contexts counted, or a sum).
struct PortTotals {
  uint64_t xmit_packets = 0, xmit_bytes = 0, rcv_packets = 0, rcv_bytes = 0, xmit_discards = 0;
  uint64_t rcv_unknown_qp = 0, rcv_qkey_violations = 0, rcv_no_receive = 0, fault_drops = 0;
  uint64_t rcv_pkey_violations = 0, xmit_stalled_discards = 0;
  void add(const engine::PortCounters& c) noexcept;
  nlohmann::json to_json() const;
};

}  // namespace ibemu
