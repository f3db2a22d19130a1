// Invalidate Extended Transport Header, 4 bytes (IBA 9.3): the R_Key that a
// SEND with Invalidate asks the responder to invalidate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Ieth {
  static constexpr size_t kSize = 4;
  uint8_t raw[kSize]{};

  static Ieth from(const uint8_t* p) noexcept {
    Ieth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint32_t rkey() const noexcept { return load_be32(raw); }
  void set_rkey(uint32_t v) noexcept { store_be32(raw, v); }
};

static_assert(sizeof(Ieth) == Ieth::kSize);
static_assert(std::is_trivially_copyable_v<Ieth>);

}  // namespace ibemu::wire
