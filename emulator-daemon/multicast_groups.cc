#include "emulator-daemon/multicast_groups.h"

namespace ibemu {

bool MulticastGroups::attach(SessionId session, int device, uint32_t qpn, uint16_t mlid,
                             const Gid& mgid) {
  return members_.insert(Member{mlid, session, device, qpn, mgid}).second;
}

bool MulticastGroups::detach(SessionId session, int device, uint32_t qpn, uint16_t mlid,
                             const Gid& mgid) {
  return members_.erase(Member{mlid, session, device, qpn, mgid}) > 0;
}

void MulticastGroups::leave_all(SessionId session) {
  std::erase_if(members_, [session](const Member& m) { return m.session == session; });
}

std::vector<SessionId> MulticastGroups::sessions(uint16_t mlid) const {
  std::set<SessionId> out;
  for (auto it = members_.lower_bound(Member{mlid, 0, 0, 0, {}});
       it != members_.end() && it->mlid == mlid; ++it)
    out.insert(it->session);
  return {out.begin(), out.end()};
}

}  // namespace ibemu
