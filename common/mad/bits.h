#pragma once
// Big-endian bit fields of management datagrams. The IBA attribute tables
// (IBA 14.2.5) give every field as a bit offset from the start of the
// attribute, counting from the most significant bit of byte 0, and a length
// in bits; Field carries exactly those two numbers so each accessor can be
// checked against its table row. No bitfields, no casts of the buffer.
#include <cstddef>
#include <cstdint>

namespace ibemu::mad {

/// One field as the spec tables give it: offset and width in bits, MSB first.
struct Field {
  uint16_t offset;
  uint8_t width;  // 1..64
};

/// Reads a field of at most 64 bits. `p` must hold offset + width bits.
constexpr uint64_t get_field(const uint8_t* p, Field f) noexcept {
  uint64_t v = 0;
  if (f.offset % 8 == 0 && f.width % 8 == 0) {
    for (unsigned i = 0; i < f.width / 8u; ++i) v = (v << 8) | p[f.offset / 8 + i];
    return v;
  }
  for (unsigned i = f.offset; i < unsigned(f.offset) + f.width; ++i)
    v = (v << 1) | ((p[i / 8] >> (7 - i % 8)) & 1u);
  return v;
}

/// Writes the low `width` bits of v into the field, leaving other bits alone.
constexpr void set_field(uint8_t* p, Field f, uint64_t v) noexcept {
  if (f.offset % 8 == 0 && f.width % 8 == 0) {
    for (int i = f.width / 8 - 1; i >= 0; --i) {
      p[f.offset / 8 + i] = static_cast<uint8_t>(v);
      v >>= 8;
    }
    return;
  }
  for (int i = int(f.offset) + f.width - 1; i >= int(f.offset); --i) {
    const uint8_t mask = static_cast<uint8_t>(1u << (7 - i % 8));
    p[i / 8] = static_cast<uint8_t>((v & 1u) ? (p[i / 8] | mask) : (p[i / 8] & ~mask));
    v >>= 1;
  }
}

}  // namespace ibemu::mad

/// Declares a typed getter `name()` and setter `set_name(v)` for a field of
/// the enclosing struct's `bytes` array, at the spec table's bit position.
#define IBEMU_MAD_FIELD(type, name, offset, width)                             \
  static constexpr ::ibemu::mad::Field k_##name{offset, width};                \
  type name() const noexcept {                                                 \
    return static_cast<type>(::ibemu::mad::get_field(bytes.data(), k_##name)); \
  }                                                                            \
  void set_##name(type v) noexcept {                                           \
    ::ibemu::mad::set_field(bytes.data(), k_##name, static_cast<uint64_t>(v)); \
  }
