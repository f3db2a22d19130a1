#pragma once
// Where packets that arrive from other hosts go: into the inbox ring of the
// process that owns the destination QP (or of every member of a multicast
// group), exactly as a provider on this host would send them. The fabric's
// receive thread is a data-plane client of its own daemon: it asks `resolve`
// over the control socket like any provider, and packets pass the faults of
// the destination port's link and are shown to captures on the way
// (provider/core/shm_link.h does all of that).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/control_channel.h"
#include "common/counter_page.h"
#include "common/state_page.h"
#include "provider/core/shm_link.h"

namespace ibemu {

class FabricDelivery {
 public:
  FabricDelivery() = default;
  ~FabricDelivery();
  FabricDelivery(const FabricDelivery&) = delete;
  FabricDelivery& operator=(const FabricDelivery&) = delete;

  /// Opens a session with the daemon at `runtime_dir` as role "fabric";
  /// 0 or an errno.
  int connect(const std::string& runtime_dir);
  bool connected() const { return link_ != nullptr; }
  /// Unblocks and ends a request in progress (the daemon is stopping).
  void shut_down();

  /// One packet for (DLID, QPN) of this host; false when nobody takes it.
  /// A packet whose ring is full waits on this side (ShmLink), in order.
  bool deliver(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len);
  /// Sends packets that link faults held back; when the next is due (0: none).
  int64_t release_held(int64_t now_ns);
  /// Sends packets that waited for room in full rings (ShmLink::flush_queued).
  void flush_queued(int64_t now_ns);
  /// Whether packets wait for room: the caller looks again soon.
  bool queuing() const { return link_ && link_->queuing(); }

 private:
  ControlClient client_;
  std::atomic<int> fd_{-1};
  const StatePage* page_ = nullptr;
  /// Per device: what the receiving links' faults dropped of packets from
  /// other hosts, and what a stalled receiver lost, counted into the
  /// device's port counters like a context's.
  std::vector<CounterPage> drops_;
  std::unique_ptr<provider::ShmLink> link_;
};

}  // namespace ibemu
