#include "provider/core/cq_numbers.h"

#include <algorithm>

namespace ibemu::provider {

uint32_t CqNumbers::add(const engine::CompletionQueue* cq) {
  std::lock_guard lock(mutex_);
  return numbers_[cq] = next_++;
}

void CqNumbers::remove(const engine::CompletionQueue* cq) {
  std::lock_guard lock(mutex_);
  numbers_.erase(cq);
}

uint32_t CqNumbers::number(const engine::CompletionQueue* cq) const {
  std::lock_guard lock(mutex_);
  auto it = numbers_.find(cq);
  return it == numbers_.end() ? 0 : it->second;
}

// The registry's lock is held while each CQ is read: a CQ is removed from
// here before it is destroyed, so none goes away under the snapshot.
std::vector<engine::CqSnapshot> CqNumbers::snapshot(size_t limit, size_t* total) const {
  std::lock_guard lock(mutex_);
  *total = numbers_.size();
  std::vector<engine::CqSnapshot> out;
  out.reserve(numbers_.size());
  for (const auto& [cq, number] : numbers_) {
    engine::CqSnapshot s = cq->snapshot();
    s.cqn = number;
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.cqn < b.cqn; });
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace ibemu::provider
