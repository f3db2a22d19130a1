#pragma once
// Fault injection on the links a packet crosses (`ibemu fault`): the link of
// the port that sends it and the link of the port that owns its DLID. The
// daemon publishes each link's faults and every port's state in the state
// page; while a link is impaired, every packet this context sends passes
// here: a link that is down carries nothing; a faulty one drops, duplicates,
// holds a packet back behind the next (reordering), delays or paces them.
//
// Decisions come from a counter-based generator: the k-th packet this
// context sends over a link gets the same fate for the same seed, so a
// failing run can be replayed.
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/state_page.h"
#include "transport/engine/counters.h"
#include "transport/engine/packet_sink.h"

namespace ibemu::provider {

class LinkFaults {
 public:
  /// Puts one packet on the wire.
  using Send =
      std::function<engine::TxResult(uint16_t dlid, uint32_t dest_qp, const uint8_t*, size_t)>;

  LinkFaults(const StatePage* page, int device, engine::EngineCounters* counters,
             std::function<void()> wake)
      : page_(page), device_(device), counters_(counters), wake_(std::move(wake)) {}

  /// Whether packets must come here at all (one relaxed load).
  bool impaired() const noexcept {
    return page_ && page_->links_impaired.load(std::memory_order_relaxed);
  }
  /// Applies the faults; sends now, holds for later, or drops (kSent: the
  /// sender cannot tell a packet the wire lost).
  engine::TxResult transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len,
                            const Send& send) noexcept;
  /// Sends the held packets whose time has come; the time the next one is
  /// due (0: none held).
  int64_t release_due(int64_t now_ns, const Send& send) noexcept;
  /// Where a packet that no port of this host sent (it came from another
  /// host) and that the receiving link dropped is counted: at that port.
  using CountDrop = std::function<void(int device, int port)>;
  void count_drops_of_other_hosts(CountDrop count) { count_remote_drop_ = std::move(count); }
  /// Told of each packet the faults drop and why (IBEMU_TRACE=packets).
  using Dropped = std::function<void(const uint8_t* packet, size_t len, const char* reason)>;
  void on_drop(Dropped dropped) { on_drop_ = std::move(dropped); }

 private:
  struct Link {
    int device = -1;
    int port = 0;  // 1-based
  };
  struct Held {
    int64_t due = 0;
    uint16_t dlid = 0;
    uint32_t dest_qp = 0;
    std::vector<uint8_t> packet;
  };
  Link sending_link(uint16_t slid) const noexcept;
  Link receiving_link(uint16_t dlid) const noexcept;
  /// The next random 64 bits of a link's sequence.
  uint64_t draw(const Link& l, const LinkFaultView& f) noexcept;

  const StatePage* page_;
  const int device_;
  engine::EngineCounters* counters_;
  std::function<void()> wake_;
  CountDrop count_remote_drop_;
  Dropped on_drop_;
  std::mutex mutex_;
  uint64_t sequence_[kMaxDevices][kMaxPorts] = {};
  int64_t busy_until_[kMaxPorts] = {};  // the sending link paces up to here
  std::vector<Held> held_;              // delayed, in any order
  std::vector<Held> behind_next_;       // reordered: go after the next packet
};

}  // namespace ibemu::provider
