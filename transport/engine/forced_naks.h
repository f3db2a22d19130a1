#pragma once
// A test hook on the responder (ibemu fault nak): the fabric may ask that the
// next requests of a QP be answered with a NAK instead of being executed, to
// exercise a requester's RNR and go-back-N paths on demand.
#include <cstdint>

namespace ibemu::engine {

enum class ForcedNak : uint8_t { kNone = 0, kRnr = 1, kPsnSequence = 2 };

class ForcedNakSource {
 public:
  virtual ~ForcedNakSource() = default;
  /// The NAK the next new request to `qpn` gets, consuming it; kNone mostly.
  virtual ForcedNak take(uint32_t qpn) noexcept = 0;
};

}  // namespace ibemu::engine
