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

#include "transport/engine/work_queues.h"

namespace ibemu::engine {

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

 private:
  mutable std::mutex mutex_;
  WorkRing<RecvWqe> ring_;
  const uint32_t max_wr_, max_sge_;
  uint32_t limit_ = 0;  // 0: not armed
  std::function<void()> on_limit_;
};

}  // namespace ibemu::engine
