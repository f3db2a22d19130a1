#pragma once
// XRC domains (IBA annex A14, ibv_open_xrcd): processes that open a domain
// through the same file share it, as on hardware, where the kernel keys the
// domain by the file's inode. A domain opened without a file is private.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "emulator-daemon/control_server.h"

namespace ibemu {

class XrcDomains {
 public:
  /// Opens the domain of `file` ("" for a private one) on `device`. Returns
  /// the domain number, or an errno in *err: ENOENT (no domain for the file
  /// and !create), EEXIST (one exists and exclusive).
  std::optional<uint32_t> open(SessionId session, int device, const std::string& file, bool create,
                               bool exclusive, int* err);
  /// Drops one reference of `session`; false if it held none.
  bool close(SessionId session, int device, uint32_t xrcd);
  /// The process left: its references go.
  void close_all(SessionId session);

 private:
  struct Domain {
    int device;
    std::string file;
    std::map<SessionId, int> refs;
  };
  std::map<uint32_t, Domain> domains_;
  uint32_t next_ = 1;
};

}  // namespace ibemu
