#pragma once
// The QPs whose requesters stopped because the link queued one of their
// packets (no room at the destination, PacketSink::TxResult::kQueued). When
// the link has sent what it queued, the engine resumes exactly these,
// rather than visiting every QP of the context.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ibemu::engine {

class LinkWaiters {
 public:
  void add(uint32_t qpn) {
    std::lock_guard lock(mutex_);
    qpns_.push_back(qpn);
    any_.store(true, std::memory_order_release);
  }
  /// Everyone waiting now; the list starts empty again.
  std::vector<uint32_t> take() {
    std::vector<uint32_t> all;
    if (!any_.load(std::memory_order_acquire)) return all;
    std::lock_guard lock(mutex_);
    all.swap(qpns_);
    any_.store(false, std::memory_order_relaxed);
    return all;
  }

 private:
  std::atomic<bool> any_{false};
  std::mutex mutex_;
  std::vector<uint32_t> qpns_;
};

}  // namespace ibemu::engine
