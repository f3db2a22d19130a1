#include "transport/engine/completion_queue.h"

#include <cerrno>

namespace ibemu::engine {

CompletionQueue::CompletionQueue(uint32_t capacity, std::function<void()> notify,
                                 std::function<void()> on_overrun)
    : ring_(capacity), notify_(std::move(notify)), on_overrun_(std::move(on_overrun)) {}

bool CompletionQueue::push(const Completion& c, bool solicited) {
  bool fire = false;
  {
    std::unique_lock lock(mutex_);
    if (overrun_) return false;
    if (count_ == ring_.size()) {
      overrun_ = true;
      lock.unlock();
      if (on_overrun_) on_overrun_();
      return false;
    }
    ring_[(head_ + count_) % ring_.size()] = c;
    ++count_;
    // Errors count as solicited: a consumer waiting for solicited events must
    // still hear about a failure (IBA 11.4.2.2).
    if (armed_ == Armed::kNext ||
        (armed_ == Armed::kSolicited && (solicited || c.status != WcStatus::kSuccess))) {
      armed_ = Armed::kNo;
      fire = true;
    }
  }
  if (fire && notify_) notify_();
  return true;
}

int CompletionQueue::poll(int max, Completion* out) {
  std::lock_guard lock(mutex_);
  int n = 0;
  while (n < max && count_) {
    out[n++] = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
  return n;
}

void CompletionQueue::arm(bool solicited_only) {
  std::lock_guard lock(mutex_);
  if (armed_ == Armed::kNext) return;  // "next" already covers solicited
  armed_ = solicited_only ? Armed::kSolicited : Armed::kNext;
}

int CompletionQueue::resize(uint32_t capacity) {
  std::lock_guard lock(mutex_);
  if (capacity < count_) return EINVAL;
  std::vector<Completion> ring(capacity);
  for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % ring_.size()];
  ring_ = std::move(ring);
  head_ = 0;
  return 0;
}

uint32_t CompletionQueue::capacity() const {
  std::lock_guard lock(mutex_);
  return static_cast<uint32_t>(ring_.size());
}

CqSnapshot CompletionQueue::snapshot() const {
  std::lock_guard lock(mutex_);
  CqSnapshot s;
  s.size = static_cast<uint32_t>(ring_.size());
  s.pending = count_.load(std::memory_order_relaxed);
  s.overrun = overrun_;
  return s;
}

bool CompletionQueue::overrun() const {
  std::lock_guard lock(mutex_);
  return overrun_;
}

uint32_t CompletionQueue::purge_qp(uint32_t qpn) {
  std::lock_guard lock(mutex_);
  std::vector<Completion> keep;
  uint32_t errors = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const Completion& c = ring_[(head_ + i) % ring_.size()];
    if (c.qp_num != qpn)
      keep.push_back(c);
    else if (c.status != WcStatus::kSuccess && c.status != WcStatus::kWrFlushErr)
      ++errors;
  }
  head_ = 0;
  count_ = static_cast<uint32_t>(keep.size());
  for (uint32_t i = 0; i < count_; ++i) ring_[i] = keep[i];
  return errors;
}

}  // namespace ibemu::engine
