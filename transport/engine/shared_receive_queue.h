#pragma once
// A shared receive queue (IBA 10.2.9.5, 11.2.3): receive WQEs that several QPs
// of one context draw from, one whole message each. A consumer may arm a
// limit: when the number of WQEs falls below it, the SRQ raises
// SRQ_LIMIT_REACHED once and disarms (IBA 10.2.9.5.2, 11.6.3).
//
// Locking: its own mutex, taken after a QP's (responders take WQEs while
// holding their QP's lock); posting takes only this one.
#include <cstdint>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "transport/engine/work_queues.h"

namespace ibemu::engine {

class CompletionQueue;

/// What an XRC SRQ carries for the XRC target QPs that deliver into it
/// (IBA annex A14): its number, domain, protection domain and CQ.
struct XrcBinding {
  uint32_t srqn = 0;
  uint32_t xrcd = 0;
  uint32_t pd = 0;
  CompletionQueue* cq = nullptr;
};

class SharedReceiveQueue {
 public:
  /// `on_limit` runs (under the SRQ's lock: it must not call back into the
  /// SRQ) when an armed limit is crossed.
  SharedReceiveQueue(uint32_t max_wr, uint32_t max_sge, std::function<void()> on_limit);

  /// Returns 0 or an errno; on error *bad is the index of the failing WR.
  int post(const RecvWqe* wrs, int count, int* bad) noexcept;
  /// Takes the oldest WQE for a new message; false when there is none.
  bool take(RecvWqe* out) noexcept;
  bool empty() const noexcept;

  /// ibv_modify_srq: only the limit can change (max_wr resizing is not
  /// offered, as on several hardware providers). 0 or an errno.
  int arm_limit(uint32_t limit) noexcept;
  uint32_t max_wr() const noexcept { return max_wr_; }
  uint32_t max_sge() const noexcept { return max_sge_; }
  uint32_t limit() const noexcept;

  void set_xrc(const XrcBinding& b) { xrc_ = b; }
  const XrcBinding& xrc() const { return xrc_; }

 private:
  XrcBinding xrc_;
  mutable std::mutex mutex_;
  WorkRing<RecvWqe> ring_;
  const uint32_t max_wr_, max_sge_;
  uint32_t limit_ = 0;  // 0: not armed
  std::function<void()> on_limit_;
};

}  // namespace ibemu::engine

namespace ibemu::engine {

/// The XRC SRQs of one HCA context by number: where an XRC target QP finds
/// the SRQ a request's XRCETH names.
class SrqDirectory {
 public:
  void add(uint32_t srqn, SharedReceiveQueue* srq) {
    std::unique_lock lock(mutex_);
    srqs_[srqn] = srq;
  }
  void remove(uint32_t srqn) {
    std::unique_lock lock(mutex_);
    srqs_.erase(srqn);
  }
  SharedReceiveQueue* find(uint32_t srqn) const {
    std::shared_lock lock(mutex_);
    auto it = srqs_.find(srqn);
    return it == srqs_.end() ? nullptr : it->second;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint32_t, SharedReceiveQueue*> srqs_;
};

}  // namespace ibemu::engine
