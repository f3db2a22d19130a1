#pragma once
// rdma_cm's port numbers, one space per port space (RDMA_PS_TCP, UDP, IB,
// IPOIB) for the whole host, as the kernel keeps them: a program binding an
// id reserves (address, port); two reservations of one port conflict when
// either address is a wildcard or both are the same. Sessions hold their
// reservations until they release them or close.
#include <cstdint>
#include <string>
#include <vector>

namespace ibemu {

struct CmPortBinding {
  uint64_t session = 0;
  int ps = 0;
  std::string ip;  // canonical text; "0.0.0.0" or "::" for a wildcard
  uint16_t port = 0;
};

class CmPortSpace {
 public:
  /// Reserves `port` (0: a free one of the ephemeral range) for `session`:
  /// the port, or 0 when it is taken (EADDRINUSE) or none is free.
  uint16_t bind(uint64_t session, int ps, const std::string& ip, uint16_t port);
  /// Drops one reservation of the session; false when it had none such.
  bool unbind(uint64_t session, int ps, const std::string& ip, uint16_t port);
  void release_all(uint64_t session);
  const std::vector<CmPortBinding>& bindings() const { return bindings_; }
  /// How many reservations the session holds.
  size_t held_by(uint64_t session) const;

  /// RDMA_PS_TCP, UDP, IB or IPOIB: rdma_create_id takes no other.
  static bool known_port_space(int ps) {
    return ps == 0x106 || ps == 0x111 || ps == 0x13f || ps == 0x2;
  }
  /// Linux's default ip_local_port_range.
  static constexpr uint16_t kEphemeralFirst = 32768, kEphemeralLast = 60999;

 private:
  bool taken(int ps, const std::string& ip, uint16_t port) const;

  std::vector<CmPortBinding> bindings_;
  uint16_t next_ephemeral_ = kEphemeralFirst;
};

}  // namespace ibemu
