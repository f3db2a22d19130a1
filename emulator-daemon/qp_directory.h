#pragma once
// The host's QP directory: allocates QP numbers per HCA and answers "which
// process owns QPN q on the HCA that has LID l" for the data plane.
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace ibemu {

using SessionId = uint64_t;

class QpDirectory {
 public:
  /// QPNs 0 and 1 are the special QPs (IBA 10.2.5); ordinary ones start above.
  static constexpr uint32_t kFirstQpn = 0x000010;
  static constexpr uint32_t kMaxQpn = 0xffffff;

  /// Allocates a QPN on `device` for `owner`, or nullopt when all are in use.
  std::optional<uint32_t> allocate(int device, SessionId owner);
  /// Frees a QPN if `owner` holds it; returns whether it did.
  bool release(int device, uint32_t qpn, SessionId owner);
  /// Frees everything a session held (its process exited).
  size_t release_all(SessionId owner);
  std::optional<SessionId> owner(int device, uint32_t qpn) const;
  size_t count(SessionId owner) const;
  size_t size() const { return owners_.size(); }

 private:
  struct Key {
    int device;
    uint32_t qpn;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, SessionId> owners_;
  // Allocation walks forward so a QPN is not reused soon after it is freed:
  // late packets for a dead QP must not reach a new one.
  std::vector<uint32_t> next_;
};

}  // namespace ibemu
