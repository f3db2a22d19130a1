#include "sm-lite/sm_negotiation.h"

namespace ibemu::sm {

using mad::SmState;

bool outranks(const SmRank& a, const SmRank& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.guid < b.guid;
}

std::optional<PeerSm> sm_to_follow(const SmRank& self, bool self_is_master,
                                   const std::vector<PeerSm>& peers) {
  // The best-ranked peer in `state`, if any.
  auto best_in = [&peers](SmState state) -> const PeerSm* {
    const PeerSm* best = nullptr;
    for (const auto& p : peers)
      if (p.state == state && (!best || outranks(p.rank, best->rank))) best = &p;
    return best;
  };
  if (const PeerSm* master = best_in(SmState::kMaster)) {
    if (!self_is_master || outranks(master->rank, self)) return *master;
    return std::nullopt;
  }
  if (self_is_master) return std::nullopt;  // standbys never displace a master
  const PeerSm* best = nullptr;
  for (SmState state : {SmState::kDiscovering, SmState::kStandby})
    if (const PeerSm* p = best_in(state); p && (!best || outranks(p->rank, best->rank))) best = p;
  if (best && outranks(best->rank, self)) return *best;
  return std::nullopt;
}

void MasterWatch::follow(const PeerSm& master) {
  master_ = master;
  missed_ = 0;
}

bool MasterWatch::record_poll(bool answered_as_master) {
  missed_ = answered_as_master ? 0 : missed_ + 1;
  return missed_ >= kMaxMissedPolls;
}

}  // namespace ibemu::sm
