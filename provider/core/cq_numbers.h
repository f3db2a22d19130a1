#pragma once
// The CQs of one HCA context by number, for `ibemu status`: verbs CQs have no
// number a program sees, so the context numbers them in creation order (as
// a driver's CQ numbers) and QP snapshots name their CQs by it.
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "transport/engine/completion_queue.h"

namespace ibemu::provider {

class CqNumbers {
 public:
  /// Any thread (ibv_create_cq). Returns the CQ's number, from 1.
  uint32_t add(const engine::CompletionQueue* cq);
  /// Any thread (ibv_destroy_cq).
  void remove(const engine::CompletionQueue* cq);
  /// 0 for a CQ it does not know (or none).
  uint32_t number(const engine::CompletionQueue* cq) const;
  /// Up to `limit` CQs by number; `*total` gets how many there are.
  std::vector<engine::CqSnapshot> snapshot(size_t limit, size_t* total) const;

 private:
  mutable std::mutex mutex_;
  std::map<const engine::CompletionQueue*, uint32_t> numbers_;
  uint32_t next_ = 1;
};

}  // namespace ibemu::provider
