#include "transport/engine/shared_receive_queue.h"

#include <cerrno>

namespace ibemu::engine {

SharedReceiveQueue::SharedReceiveQueue(uint32_t max_wr, uint32_t max_sge,
                                       std::function<void()> on_limit)
    : max_wr_(max_wr), max_sge_(max_sge), on_limit_(std::move(on_limit)) {
  ring_.reset(max_wr);
}

int SharedReceiveQueue::post(const RecvWqe* wrs, int count, int* bad) noexcept {
  std::lock_guard lock(mutex_);
  for (int i = 0; i < count; ++i) {
    *bad = i;
    const RecvWqe& w = wrs[i];
    // An SRQ of 0 WRs (mlx5 grants one when asked for 0) holds none.
    if (ring_.full() || max_wr_ == 0) return ENOMEM;
    if (w.num_sge < 0 || static_cast<uint32_t>(w.num_sge) > max_sge_) return EINVAL;
    RecvWqe& q = ring_.push();
    q = w;
    uint64_t len = 0;
    for (int s = 0; s < w.num_sge; ++s) len += w.sge[s].length;
    q.length = static_cast<uint32_t>(std::min<uint64_t>(len, UINT32_MAX));
  }
  *bad = -1;
  return 0;
}

bool SharedReceiveQueue::take(RecvWqe* out) noexcept {
  std::lock_guard lock(mutex_);
  if (ring_.empty()) return false;
  *out = ring_.at(ring_.head());
  ring_.pop();
  if (limit_ && ring_.tail() - ring_.head() < limit_) {
    limit_ = 0;  // one event per arming
    if (on_limit_) on_limit_();
  }
  return true;
}

bool SharedReceiveQueue::empty() const noexcept {
  std::lock_guard lock(mutex_);
  return ring_.empty();
}

int SharedReceiveQueue::arm_limit(uint32_t limit) noexcept {
  std::lock_guard lock(mutex_);
  if (limit > max_wr_) return EINVAL;
  limit_ = limit;
  return 0;
}

uint32_t SharedReceiveQueue::limit() const noexcept {
  std::lock_guard lock(mutex_);
  return limit_;
}

}  // namespace ibemu::engine
