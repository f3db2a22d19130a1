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
  /// 0xFFFFFF names a multicast group's QPs (IBA 10.5.2.1), never one QP.
  static constexpr uint32_t kMaxQpn = 0xfffffe;

  /// Allocates a QPN on `device` for `owner`, or nullopt when all are in use.
  std::optional<uint32_t> allocate(int device, SessionId owner);
  /// Frees a QPN if `owner` holds it; returns whether it did.
  bool release(int device, uint32_t qpn, SessionId owner);
  /// Sets aside QPNs [first, first + count) of `device` for `owner`, which
  /// numbers its QPs there itself (ibemu.ko's kernel QPs): allocate() skips
  /// them and owner() names `owner` for each. False when the range leaves
  /// [kFirstQpn, kMaxQpn] or holds a QPN in use or another block.
  bool reserve(int device, uint32_t first, uint32_t count, SessionId owner);
  /// Frees everything a session held (its process exited), blocks included;
  /// returns the QPNs freed, not counting blocks.
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
  struct Block {
    int device;
    uint32_t first;
    uint32_t end;  // one past the last
    SessionId owner;
  };
  const Block* block_holding(int device, uint32_t qpn) const;

  std::map<Key, SessionId> owners_;
  std::vector<Block> blocks_;
  // Allocation walks forward so a QPN is not reused soon after it is freed:
  // late packets for a dead QP must not reach a new one.
  std::vector<uint32_t> next_;
};

}  // namespace ibemu
