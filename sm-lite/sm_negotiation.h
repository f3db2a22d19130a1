#pragma once
// Which of a subnet's SMs is its master (IBA 14.4.1, the SM state machine):
// what an SM learned of the other SMs through SubnGet(SMInfo), the rule that
// picks the one it defers to, and a STANDBY's watch over its master.
//
// Pure logic: SubnetManager sends the SMPs and acts on the answers.
#include <cstdint>
#include <optional>
#include <vector>

#include "common/mad/smp_attributes.h"

namespace ibemu::sm {

using DrPath = std::vector<uint8_t>;  // egress port per hop, from the SM's port

/// What orders two SMs (IBA 14.4.1.1): SMInfo:Priority, then SMInfo:GUID.
struct SmRank {
  uint8_t priority = 0;  // 0..15
  uint64_t guid = 0;     // the SM's port GUID
};

/// Whether `a` outranks `b`: the higher priority wins; at equal priority the
/// lower GUID does.
bool outranks(const SmRank& a, const SmRank& b);

/// Another SM found during discovery, as its SMInfo answered.
struct PeerSm {
  SmRank rank;
  mad::SmState state = mad::SmState::kNotActive;
  DrPath path;  // DR path to its port, for SMInfo polls
};

/// The SM that an SM ranked `self` defers to, or nullopt when it is to be
/// master itself.
///
/// An SM that is not master yet follows an existing MASTER, whatever the
/// priorities: a running master is not displaced by one that starts later.
/// Without a master it follows the best-ranked DISCOVERING or STANDBY SM that
/// outranks it. A MASTER follows only another MASTER that outranks it: when
/// two subnets with a master each are joined, the lower-ranked master steps
/// down and the other keeps the subnet. NOTACTIVE SMs take no part.
std::optional<PeerSm> sm_to_follow(const SmRank& self, bool self_is_master,
                                   const std::vector<PeerSm>& peers);

/// A STANDBY's view of the SM it follows: that SM counts as lost after
/// kMaxMissedPolls consecutive polls that went unanswered or found it not
/// MASTER (IBA 14.4.1.2: the standby then takes over).
class MasterWatch {
 public:
  static constexpr int kMaxMissedPolls = 3;

  /// Starts watching `master` with no poll missed.
  void follow(const PeerSm& master);
  /// Records one poll: `answered_as_master` when its SMInfo came back from
  /// the same SM in state MASTER. True once the master counts as lost.
  bool record_poll(bool answered_as_master);

  const PeerSm& master() const { return master_; }
  int missed_polls() const { return missed_; }

 private:
  PeerSm master_;
  int missed_ = 0;
};

}  // namespace ibemu::sm
