#pragma once
// The snapshot pages of the HCA contexts open on this host (common/snapshot_page.h):
// which session and device each belongs to, whether it answered a request,
// and what it answered, checked and re-encoded for `status`.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "common/snapshot_page.h"

namespace ibemu {

class ContextSnapshots {
 public:
  using SessionId = uint64_t;

  void add(uint64_t context, SessionId session, int device, SnapshotPage page);
  void remove(uint64_t context);
  void remove_session(SessionId session);

  /// Whether every context of the sessions `wanted` picks answered `request`.
  bool answered(uint64_t request, const std::function<bool(SessionId)>& wanted) const;

  /// The contexts of `session`, in opening order: `{context, device,
  /// answered}` and, when it answered `request` with a well-formed
  /// snapshot, the snapshot's fields. `*budget` is the room left in the
  /// reply (bytes); a snapshot that would not fit is left out and the
  /// context says `"omitted": true`.
  Json session_json(SessionId session, uint64_t request,
                    const std::vector<std::string>& device_names, size_t* budget) const;

 private:
  struct Context {
    SessionId session = 0;
    int device = 0;
    SnapshotPage page;
  };
  std::map<uint64_t, Context> contexts_;
};

}  // namespace ibemu
