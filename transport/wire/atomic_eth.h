// Atomic Extended Transport Header, 28 bytes (IBA 9.3):
// VA, R_Key, Swap (or Add) Data, Compare Data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct AtomicEth {
  static constexpr size_t kSize = 28;
  uint8_t raw[kSize]{};

  static AtomicEth from(const uint8_t* p) noexcept {
    AtomicEth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint64_t va() const noexcept { return load_be64(raw); }
  void set_va(uint64_t v) noexcept { store_be64(raw, v); }
  uint32_t rkey() const noexcept { return load_be32(raw + 8); }
  void set_rkey(uint32_t v) noexcept { store_be32(raw + 8, v); }
  /// Swap value for CmpSwap, addend for FetchAdd.
  uint64_t swap_add() const noexcept { return load_be64(raw + 12); }
  void set_swap_add(uint64_t v) noexcept { store_be64(raw + 12, v); }
  /// Compare value; ignored by FetchAdd.
  uint64_t compare() const noexcept { return load_be64(raw + 20); }
  void set_compare(uint64_t v) noexcept { store_be64(raw + 20, v); }
};

static_assert(sizeof(AtomicEth) == AtomicEth::kSize);
static_assert(std::is_trivially_copyable_v<AtomicEth>);

}  // namespace ibemu::wire
