#include "emulator-daemon/xrc_domains.h"

#include <cerrno>

namespace ibemu {

std::optional<uint32_t> XrcDomains::open(SessionId session, int device, const std::string& file,
                                         bool create, bool exclusive, int* err) {
  if (!file.empty())
    for (auto& [id, d] : domains_)
      if (d.device == device && d.file == file) {
        if (create && exclusive) {
          *err = EEXIST;
          return std::nullopt;
        }
        ++d.refs[session];
        return id;
      }
  if (!file.empty() && !create) {
    *err = ENOENT;
    return std::nullopt;
  }
  const uint32_t id = next_++;
  domains_[id] = Domain{device, file, {{session, 1}}};
  return id;
}

bool XrcDomains::close(SessionId session, int device, uint32_t xrcd) {
  auto it = domains_.find(xrcd);
  if (it == domains_.end() || it->second.device != device) return false;
  auto ref = it->second.refs.find(session);
  if (ref == it->second.refs.end()) return false;
  if (--ref->second == 0) it->second.refs.erase(ref);
  if (it->second.refs.empty()) domains_.erase(it);
  return true;
}

void XrcDomains::close_all(SessionId session) {
  for (auto it = domains_.begin(); it != domains_.end();) {
    it->second.refs.erase(session);
    it = it->second.refs.empty() ? domains_.erase(it) : std::next(it);
  }
}

}  // namespace ibemu
