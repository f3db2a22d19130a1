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
    // Errors count as solicited: a consumer waiting for solicited events must
    // still hear about a failure (IBA 11.4.2.2).
    const bool wakes_solicited = solicited || c.status != WcStatus::kSuccess;
    ring_[(head_ + count_) % ring_.size()] = {c, ++last_seq_, wakes_solicited};
    ++count_;
    if (armed_ == Armed::kNext || (armed_ == Armed::kSolicited && wakes_solicited)) {
      armed_ = Armed::kNo;
      announced_through_ = last_seq_;
      fire = true;
    }
  }
  if (fire && notify_) notify_();
  return true;
}

void CompletionQueue::pop_head() {
  head_ = (head_ + 1) % ring_.size();
  --count_;
}

int CompletionQueue::poll(int max, Completion* out) {
  return poll_each(max, [&out](const Completion& c) { *out++ = c; });
}

bool CompletionQueue::unannounced_waiting(bool solicited_only) const {
  // The unannounced completions are the newest: walk back from the tail.
  for (uint32_t i = count_; i > 0; --i) {
    const Entry& e = ring_[(head_ + i - 1) % ring_.size()];
    if (e.seq <= announced_through_) return false;
    if (!solicited_only || e.wakes_solicited) return true;
  }
  return false;
}

void CompletionQueue::arm(bool solicited_only) {
  bool fire = false;
  {
    std::lock_guard lock(mutex_);
    if (armed_ == Armed::kNext) return;  // "next" already covers solicited
    // An overrun CQ reported its error event and announces nothing more.
    if (!overrun_ && unannounced_waiting(solicited_only)) {
      armed_ = Armed::kNo;
      announced_through_ = last_seq_;
      fire = true;
    } else {
      armed_ = solicited_only ? Armed::kSolicited : Armed::kNext;
    }
  }
  if (fire && notify_) notify_();
}

int CompletionQueue::resize(uint32_t capacity) {
  std::lock_guard lock(mutex_);
  if (capacity < count_) return EINVAL;
  std::vector<Entry> ring(capacity);
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
  std::vector<Entry> keep;
  uint32_t errors = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const Entry& e = ring_[(head_ + i) % ring_.size()];
    const Completion& c = e.completion;
    if (c.qp_num != qpn)
      keep.push_back(e);
    else if (c.status != WcStatus::kSuccess && c.status != WcStatus::kWrFlushErr)
      ++errors;
  }
  head_ = 0;
  count_ = static_cast<uint32_t>(keep.size());
  for (uint32_t i = 0; i < count_; ++i) ring_[i] = keep[i];
  return errors;
}

}  // namespace ibemu::engine
