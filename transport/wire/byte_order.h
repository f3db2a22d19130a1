// Big-endian loads and stores on unaligned wire buffers.
//
// IBA headers are big-endian (IBA 5.2.1: "most significant byte first"). Every
// accessor in transport/wire/ goes through these helpers so that no code ever
// casts a buffer pointer to a wider type: packets arrive at arbitrary offsets
// in shared-memory rings and UDP datagrams.
#pragma once

#include <cstdint>
#include <cstring>

namespace ibemu::wire {

inline uint16_t load_be16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>((uint16_t{p[0]} << 8) | p[1]);
}

inline uint32_t load_be24(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

inline uint32_t load_be32(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

inline uint64_t load_be64(const uint8_t* p) noexcept {
  return (uint64_t{load_be32(p)} << 32) | load_be32(p + 4);
}

inline void store_be16(uint8_t* p, uint16_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

/// Stores the low 24 bits of `v`; the top byte is ignored.
inline void store_be24(uint8_t* p, uint32_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}

inline void store_be32(uint8_t* p, uint32_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

inline void store_be64(uint8_t* p, uint64_t v) noexcept {
  store_be32(p, static_cast<uint32_t>(v >> 32));
  store_be32(p + 4, static_cast<uint32_t>(v));
}

// The CRCs are the exception to big-endian: both are reflected CRCs whose
// register is sent least significant byte first (IBA 7.8; see crc.h).
inline uint16_t load_le16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(p[0] | (uint16_t{p[1]} << 8));
}

inline uint32_t load_le32(const uint8_t* p) noexcept {
  return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

inline void store_le16(uint8_t* p, uint16_t v) noexcept {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

inline void store_le32(uint8_t* p, uint32_t v) noexcept {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

}  // namespace ibemu::wire
