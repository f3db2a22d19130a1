// Atomic Acknowledge Extended Transport Header, 8 bytes (IBA 9.3):
// the remote data before the atomic operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct AtomicAckEth {
  static constexpr size_t kSize = 8;
  uint8_t raw[kSize]{};

  static AtomicAckEth from(const uint8_t* p) noexcept {
    AtomicAckEth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint64_t orig_data() const noexcept { return load_be64(raw); }
  void set_orig_data(uint64_t v) noexcept { store_be64(raw, v); }
};

static_assert(sizeof(AtomicAckEth) == AtomicAckEth::kSize);
static_assert(std::is_trivially_copyable_v<AtomicAckEth>);

}  // namespace ibemu::wire
