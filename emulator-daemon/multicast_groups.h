#pragma once
// Multicast groups of the emulated subnet (IBA 10.5): which QPs of which
// processes are attached to each MLID. A UD packet sent to an MLID is copied
// to the inbox of every process that has a member (the emulated switch's
// multicast forwarding); each process's engine hands it to its attached QPs.
#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "emulator-daemon/control_server.h"

namespace ibemu {

class MulticastGroups {
 public:
  using Gid = std::array<uint8_t, 16>;

  /// ibv_attach_mcast: false when that QP is attached to that group already.
  bool attach(SessionId session, int device, uint32_t qpn, uint16_t mlid, const Gid& mgid);
  /// ibv_detach_mcast: false when it was not attached.
  bool detach(SessionId session, int device, uint32_t qpn, uint16_t mlid, const Gid& mgid);
  /// The process left: its QPs leave every group.
  void leave_all(SessionId session);
  /// The sessions with a member in the group of `mlid`, each once.
  std::vector<SessionId> sessions(uint16_t mlid) const;
  size_t size() const { return members_.size(); }

 private:
  struct Member {
    uint16_t mlid;
    SessionId session;
    int device;
    uint32_t qpn;
    Gid mgid;
    auto operator<=>(const Member&) const = default;
  };
  std::set<Member> members_;
};

}  // namespace ibemu
