// Datagram Extended Transport Header, 8 bytes (IBA 9.3):
// Q_Key, 8 reserved bits, source QP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Deth {
  static constexpr size_t kSize = 8;
  uint8_t raw[kSize]{};

  static Deth from(const uint8_t* p) noexcept {
    Deth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint32_t qkey() const noexcept { return load_be32(raw); }
  void set_qkey(uint32_t v) noexcept { store_be32(raw, v); }
  uint32_t src_qp() const noexcept { return load_be24(raw + 5); }
  void set_src_qp(uint32_t v) noexcept { store_be24(raw + 5, v); }
};

static_assert(sizeof(Deth) == Deth::kSize);
static_assert(std::is_trivially_copyable_v<Deth>);

}  // namespace ibemu::wire
