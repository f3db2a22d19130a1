#include "provider/core/forced_nak_table.h"

namespace ibemu::provider {

engine::ForcedNak ForcedNakTable::take(uint32_t qpn) noexcept {
  if (!page_ || !page_->forced_nak_entries.load(std::memory_order_relaxed))
    return engine::ForcedNak::kNone;
  ForcedNakView entries[kMaxForcedNaks];
  for (;;) {  // a consistent copy (seqlock)
    const uint64_t before = page_->seq.load(std::memory_order_acquire);
    if (before & 1) continue;
    for (int i = 0; i < kMaxForcedNaks; ++i) entries[i] = page_->forced_naks[i];
    std::atomic_thread_fence(std::memory_order_acquire);
    if (page_->seq.load(std::memory_order_relaxed) == before) break;
  }
  std::lock_guard lock(mutex_);
  for (const ForcedNakView& e : entries) {
    if (!e.id || e.device != device_ || e.qpn != qpn) continue;
    uint32_t& used = used_[e.id];
    if (used >= e.count) continue;
    ++used;
    return engine::ForcedNak(e.kind);
  }
  return engine::ForcedNak::kNone;
}

}  // namespace ibemu::provider
