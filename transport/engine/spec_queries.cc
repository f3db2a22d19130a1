// Questions IBEMU_CHECK asks the engine about a program's outstanding work
// (transport/engine/spec_observer.h has what the engine reports by itself).
// Never on the data path: asked only when the checks are on.
#include "transport/engine/hca_engine.h"
#include "transport/engine/qp.h"

namespace ibemu::engine {
namespace {

template <typename Wqe>
bool names_lkey(const Wqe& w, uint32_t lkey) {
  for (int s = 0; s < w.num_sge; ++s)
    if (w.sge[s].lkey == lkey) return true;
  return false;
}

}  // namespace

uint32_t Qp::wrs_using_lkey(uint32_t lkey) noexcept {
  std::lock_guard lock(core_.mutex);
  uint32_t n = 0;
  for (uint64_t pos = core_.sq.head(); pos < core_.sq.tail(); ++pos) {
    const SendWqe& w = core_.sq.at(pos);
    // Inline data was copied when the WR was posted: its buffer is free.
    if (!w.is_inline && names_lkey(w, lkey)) ++n;
  }
  // A receive counts once a message is being placed into it. One still
  // waiting may never be used: programs deregister before they destroy the
  // QP that holds it, and nothing arrives in between.
  if (RecvWqe* w = responder_.placing_into(); w && names_lkey(*w, lkey)) ++n;
  return n;
}

uint32_t HcaEngine::wrs_using_lkey(uint32_t lkey) const {
  uint32_t n = 0;
  for (auto& qp : all_qps()) n += qp->wrs_using_lkey(lkey);
  return n;
}

}  // namespace ibemu::engine
