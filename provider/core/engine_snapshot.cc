// A context's answer to `ibemu status`: its QPs, CQs and memory regions,
// written into its snapshot page (common/snapshot_page.h) when the daemon
// asks through the state page.
#include "common/context_snapshot.h"
#include "provider/core/engine_host.h"

namespace ibemu::provider {

void EngineHost::answer_snapshot_request() noexcept {
  const uint64_t request = page_->snapshot_request.load(std::memory_order_acquire);
  if (request == snapshot_answered_ || !snapshot_page_.attached()) return;
  snapshot_answered_ = request;
  try {
    ContextSnapshot s;
    size_t total = 0;
    s.qps = engine_->qp_snapshots(
        ContextSnapshot::kMaxListed,
        [this](const engine::CompletionQueue* cq) { return cq_numbers_.number(cq); }, &total);
    s.qps_total = total;
    s.cqs = cq_numbers_.snapshot(ContextSnapshot::kMaxListed, &total);
    s.cqs_total = total;
    s.mrs = engine_->mrs().snapshot(ContextSnapshot::kMaxListed);
    s.mrs_total = engine_->mrs().size();
    snapshot_page_.publish(request, to_json(s).dump());
  } catch (const std::exception&) {
    // Out of memory: this request goes unanswered, as from a hung program.
  }
}

}  // namespace ibemu::provider
