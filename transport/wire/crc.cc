#include "transport/wire/crc.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "transport/wire/bth.h"
#include "transport/wire/grh.h"
#include "transport/wire/lrh.h"

namespace ibemu::wire {
namespace {

constexpr size_t kMaskedHeaderMax = Lrh::kSize + Grh::kSize + Bth::kSize;
constexpr size_t kBthResv8aOffset = 4;

// Replaces the ICRC variant fields (IBA 7.8.1) in a copy of the first header
// bytes. `n` may be shorter than the headers when a caller hands in a
// truncated buffer; only bytes inside it are touched.
void mask_variant_fields(uint8_t* h, size_t n, bool has_grh) noexcept {
  auto set = [&](size_t off, uint8_t bits) {
    if (off < n) h[off] |= bits;
  };
  if (has_grh) {
    for (size_t i = 0; i < Lrh::kSize; ++i) set(i, 0xff);
    const size_t g = Lrh::kSize;
    set(g + 0, 0x0f);  // TClass[7:4]
    set(g + 1, 0xff);  // TClass[3:0], FlowLabel[19:16]
    set(g + 2, 0xff);  // FlowLabel[15:8]
    set(g + 3, 0xff);  // FlowLabel[7:0]
    set(g + 7, 0xff);  // HopLmt
    set(g + Grh::kSize + kBthResv8aOffset, 0xff);
  } else {
    set(0, 0xf0);  // VL
    set(Lrh::kSize + kBthResv8aOffset, 0xff);
  }
}

// CRC-16, polynomial 0x100B, processed least significant bit first: the
// reflected polynomial is 0xD008. The table is derived from the polynomial at
// compile time.
constexpr uint16_t kVcrcPolyReflected = 0xd008;

constexpr std::array<uint16_t, 256> make_vcrc_table() {
  std::array<uint16_t, 256> t{};
  for (unsigned n = 0; n < 256; ++n) {
    uint16_t c = static_cast<uint16_t>(n);
    for (int k = 0; k < 8; ++k) {
      c = static_cast<uint16_t>((c & 1) ? (c >> 1) ^ kVcrcPolyReflected : c >> 1);
    }
    t[n] = c;
  }
  return t;
}

constexpr std::array<uint16_t, 256> kVcrcTable = make_vcrc_table();

}  // namespace

uint32_t compute_icrc(const uint8_t* pkt, size_t len_without_crcs, bool has_grh) noexcept {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  if (len_without_crcs == 0) return static_cast<uint32_t>(crc);
  uint8_t masked[kMaskedHeaderMax];
  const size_t hdr =
      std::min(len_without_crcs, has_grh ? kMaskedHeaderMax : Lrh::kSize + Bth::kSize);
  std::memcpy(masked, pkt, hdr);
  mask_variant_fields(masked, hdr, has_grh);
  crc = crc32_z(crc, masked, hdr);
  crc = crc32_z(crc, pkt + hdr, len_without_crcs - hdr);
  return static_cast<uint32_t>(crc);
}

uint16_t compute_vcrc(const uint8_t* pkt, size_t len_including_icrc) noexcept {
  uint16_t c = 0xffff;
  for (size_t i = 0; i < len_including_icrc; ++i) {
    c = static_cast<uint16_t>(kVcrcTable[(c ^ pkt[i]) & 0xff] ^ (c >> 8));
  }
  return static_cast<uint16_t>(~c);
}

}  // namespace ibemu::wire
