#pragma once
// Authentication of the datagrams between hosts (config fabric.secret_file).
//
// Every datagram of a host that has the shared secret ends with a trailer:
//
//   counter (8 bytes, big-endian) | HMAC-SHA256(secret, datagram | counter),
//                                   first 16 bytes
//
// and has bit 0 of header byte 6 set. The counter starts at the sender's
// start time in seconds << 32 and grows by one per datagram, so a receiver
// refuses a datagram it has seen (a replay) with a 64-datagram window per
// sender for the reordering a network does; a restarted sender starts above
// where it was. A datagram that fails the check, or whose flag disagrees
// with whether this host has a secret, is dropped and counted.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace ibemu::fabric {

inline constexpr size_t kAuthTrailer = 8 + 16;
inline constexpr uint8_t kAuthFlag = 0x01;  // header byte 6

class DatagramAuth {
 public:
  /// An empty secret: datagrams are neither signed nor checked.
  explicit DatagramAuth(std::string secret = {});
  bool enabled() const { return !secret_.empty(); }

  /// Copies `len` bytes of datagram to `out` (room for len + kAuthTrailer),
  /// flagged and signed; returns the signed length. Without a secret, a
  /// plain copy.
  size_t sign(const uint8_t* datagram, size_t len, uint8_t* out);
  /// Whether the datagram from `sender` passes: authentic and not seen
  /// before (with a secret), or unflagged (without one). On success `*len`
  /// becomes the length without the trailer.
  bool verify(const uint8_t* datagram, size_t* len, uint64_t sender);

 private:
  std::array<uint8_t, 16> tag(const uint8_t* data, size_t len) const;
  struct Window {
    uint64_t highest = 0;
    uint64_t seen = 0;  // bit i: highest - i arrived
  };
  /// Records `counter` from `sender`; false if it is a replay or too old.
  bool fresh(uint64_t sender, uint64_t counter);

  std::string secret_;
  std::atomic<uint64_t> counter_;
  std::mutex windows_mutex_;
  std::map<uint64_t, Window> windows_;
};

}  // namespace ibemu::fabric
