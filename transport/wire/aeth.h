// ACK Extended Transport Header, 4 bytes (IBA 9.3): Syndrome, MSN.
// Syndrome encoding per IBA 9.7.5.1.1 (table "AETH Syndrome"):
//
//   bit 7: reserved   bits 6-5: 00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//   bits 4-0: credit count (ACK), RNR timer code (RNR NAK), NAK code (NAK)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Aeth {
  static constexpr size_t kSize = 4;
  uint8_t raw[kSize]{};

  static Aeth from(const uint8_t* p) noexcept {
    Aeth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint8_t syndrome() const noexcept { return raw[0]; }
  void set_syndrome(uint8_t v) noexcept { raw[0] = v; }
  /// Message Sequence Number, 24 bits (IBA 9.7.5.1.1).
  uint32_t msn() const noexcept { return load_be24(raw + 1); }
  void set_msn(uint32_t v) noexcept { store_be24(raw + 1, v); }
};

static_assert(sizeof(Aeth) == Aeth::kSize);
static_assert(std::is_trivially_copyable_v<Aeth>);

enum class AckType : uint8_t { kAck, kRnrNak, kNak, kReserved };

/// NAK codes carried in the low five syndrome bits when the type is NAK.
enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

/// Credit code 31 in an ACK means "invalid credit count" (the AETH credit
/// encoding, IBA 9.7.5.1.1): the requester must not take it as a count.
inline constexpr uint8_t kAethCreditInvalid = 0x1f;

/// Decodes syndrome bits 6-5. Bit 7 is reserved and, like every reserved
/// field, ignored on receive.
inline constexpr AckType aeth_type(uint8_t syndrome) noexcept {
  switch ((syndrome >> 5) & 0x3) {
    case 0:
      return AckType::kAck;
    case 1:
      return AckType::kRnrNak;
    case 3:
      return AckType::kNak;
    default:
      return AckType::kReserved;
  }
}

/// The five-bit value: credit count, RNR timer code, or NAK code.
inline constexpr uint8_t aeth_value(uint8_t syndrome) noexcept { return syndrome & 0x1f; }

inline constexpr uint8_t make_ack_syndrome(uint8_t credits) noexcept { return credits & 0x1f; }

inline constexpr uint8_t make_rnr_nak_syndrome(uint8_t rnr_timer) noexcept {
  return static_cast<uint8_t>(0x20 | (rnr_timer & 0x1f));
}

inline constexpr uint8_t make_nak_syndrome(NakCode code) noexcept {
  return static_cast<uint8_t>(0x60 | (static_cast<uint8_t>(code) & 0x1f));
}

const char* to_string(AckType t) noexcept;
const char* to_string(NakCode c) noexcept;

}  // namespace ibemu::wire
