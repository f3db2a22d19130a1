#include "transport/link/ring_sender.h"

#include <unistd.h>

namespace ibemu::link {

int RingSender::attach(int fd) noexcept {
  const int err = ring_.attach(fd);
  if (err) close(fd);
  return err;
}

RingSender::Result RingSender::send(const uint8_t* data, size_t len, SlotKind kind,
                                    int64_t now_ns) noexcept {
  if (!ring_.fits(len)) return Result::kDiscarded;
  std::lock_guard lock(mutex_);
  // Behind packets that wait, never past them: the link keeps order.
  if (held_.empty() && ring_.push(data, len, kind)) return Result::kSent;
  if (held_bytes_ + len > max_held_) return Result::kDiscarded;
  if (held_.empty()) {
    consumed_seen_ = ring_.consumed_hint();
    progress_at_ns_ = now_ns;
  }
  try {
    held_.push_back({std::vector<uint8_t>(data, data + len), kind});
  } catch (...) {
    return Result::kDiscarded;  // out of memory: as a full output queue
  }
  held_bytes_ += len;
  return Result::kHeld;
}

std::deque<RingSender::Held> RingSender::take_all_locked() noexcept {
  std::deque<Held> all;
  all.swap(held_);
  held_bytes_ = 0;
  return all;
}

size_t RingSender::flush(int64_t now_ns, const OnDiscard& on_discard) noexcept {
  std::deque<Held> expired;
  size_t moved = 0;
  {
    std::lock_guard lock(mutex_);
    while (!held_.empty()) {
      Held& h = held_.front();
      if (!ring_.push(h.bytes.data(), h.bytes.size(), h.kind)) break;
      held_bytes_ -= h.bytes.size();
      held_.pop_front();
      ++moved;
    }
    if (held_.empty()) return moved;
    if (const uint64_t consumed = ring_.consumed_hint(); moved || consumed != consumed_seen_) {
      consumed_seen_ = consumed;
      progress_at_ns_ = now_ns;
    } else if (now_ns - progress_at_ns_ >= kHoqLifetimeNs) {
      expired = take_all_locked();
    }
  }
  for (const Held& h : expired) on_discard(h.bytes.data(), h.bytes.size(), h.kind);
  return moved + expired.size();
}

size_t RingSender::discard_held(const OnDiscard& on_discard) noexcept {
  std::deque<Held> all;
  {
    std::lock_guard lock(mutex_);
    all = take_all_locked();
  }
  for (const Held& h : all) on_discard(h.bytes.data(), h.bytes.size(), h.kind);
  return all.size();
}

bool RingSender::holding() const noexcept {
  std::lock_guard lock(mutex_);
  return !held_.empty();
}

}  // namespace ibemu::link
