// DC Extended Transport Header, 16 bytes: it follows the BTH of every request
// of the Dynamically Connected transport (ConnectX's DC; docs/dc.md). IBA has
// no DC chapter and Mellanox publishes no wire format, so this layout is
// ibemu's own:
//
//   bytes 0-7    DC access key: must equal the target DCT's dct_access_key
//   byte  8      flags: bit 0 "connect" — this packet opens a connection
//   bytes 9-11   the DCI's QP number: where the DCT sends its responses
//   bytes 12-15  connection number: which of the DCI's connections the
//                packet belongs to; it grows with every connection the DCI
//                opens, RESET included, so a target can tell a new
//                connection from a late packet of an old one
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "transport/wire/byte_order.h"

namespace ibemu::wire {

struct Dceth {
  static constexpr size_t kSize = 16;
  static constexpr uint8_t kConnect = 0x01;
  uint8_t raw[kSize]{};

  static Dceth from(const uint8_t* p) noexcept {
    Dceth h;
    std::memcpy(h.raw, p, kSize);
    return h;
  }
  void to(uint8_t* p) const noexcept { std::memcpy(p, raw, kSize); }

  uint64_t access_key() const noexcept { return load_be64(raw); }
  void set_access_key(uint64_t v) noexcept { store_be64(raw, v); }
  bool connect() const noexcept { return raw[8] & kConnect; }
  void set_connect(bool v) noexcept {
    raw[8] = static_cast<uint8_t>(v ? raw[8] | kConnect : raw[8] & ~kConnect);
  }
  uint32_t dci_qpn() const noexcept { return load_be24(raw + 9); }
  void set_dci_qpn(uint32_t v) noexcept { store_be24(raw + 9, v); }
  uint32_t connection() const noexcept { return load_be32(raw + 12); }
  void set_connection(uint32_t v) noexcept { store_be32(raw + 12, v); }
};

static_assert(sizeof(Dceth) == Dceth::kSize);
static_assert(std::is_trivially_copyable_v<Dceth>);

}  // namespace ibemu::wire
