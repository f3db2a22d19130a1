// RDMA Extended Transport Header, 16 bytes (IBA 9.3): VA, R_Key, DMA Length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Reth {
  static constexpr size_t kSize = 16;
  uint8_t raw[kSize]{};

  static Reth from(const uint8_t* p) noexcept {
    Reth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint64_t va() const noexcept { return load_be64(raw); }
  void set_va(uint64_t v) noexcept { store_be64(raw, v); }
  uint32_t rkey() const noexcept { return load_be32(raw + 8); }
  void set_rkey(uint32_t v) noexcept { store_be32(raw + 8, v); }
  /// Length of the whole RDMA operation, not of this packet.
  uint32_t dma_len() const noexcept { return load_be32(raw + 12); }
  void set_dma_len(uint32_t v) noexcept { store_be32(raw + 12, v); }
};

static_assert(sizeof(Reth) == Reth::kSize);
static_assert(std::is_trivially_copyable_v<Reth>);

}  // namespace ibemu::wire
