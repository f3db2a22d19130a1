// Immediate Data Extended Transport Header, 4 bytes (IBA 9.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct ImmDt {
  static constexpr size_t kSize = 4;
  uint8_t raw[kSize]{};

  static ImmDt from(const uint8_t* p) noexcept {
    ImmDt h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  /// The wire bytes copied into a host integer without byte swapping: verbs
  /// carry immediate data as a big-endian __be32 (ibv_send_wr::imm_data), so the
  /// value passes from work request to completion untouched.
  uint32_t imm() const noexcept {
    uint32_t v;
    std::memcpy(&v, raw, sizeof v);
    return v;
  }
  void set_imm(uint32_t v) noexcept { std::memcpy(raw, &v, sizeof v); }
  /// The same four bytes read as a big-endian number, for traces.
  uint32_t imm_be() const noexcept { return load_be32(raw); }
};

static_assert(sizeof(ImmDt) == ImmDt::kSize);
static_assert(std::is_trivially_copyable_v<ImmDt>);

}  // namespace ibemu::wire
