// XRC Extended Transport Header, 4 bytes (IBA annex A14): the XRC SRQ number a
// request is for; it follows the BTH of every XRC request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Xrceth {
  static constexpr size_t kSize = 4;
  uint8_t raw[kSize]{};

  static Xrceth from(const uint8_t* p) noexcept {
    Xrceth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint32_t srqn() const noexcept { return load_be32(raw) & 0xffffff; }
  void set_srqn(uint32_t v) noexcept { store_be32(raw, v & 0xffffff); }
};

static_assert(sizeof(Xrceth) == Xrceth::kSize);
static_assert(std::is_trivially_copyable_v<Xrceth>);

}  // namespace ibemu::wire
