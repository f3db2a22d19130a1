#pragma once
// How the emulated HCA stores what arrives into a program's memory: as a DMA
// engine does, every byte written exactly once and in ascending address
// order, so that the last byte of a packet lands last and stays as the
// program leaves it. memcpy promises neither: glibc copies 64 bytes as two
// overlapping 64-byte stores, and longer runs store their head and tail
// after the middle. A program that polls the last byte of an RDMA WRITE and
// writes that byte as soon as it changes (riostream does, and many programs
// copy its pattern) had its own store overwritten by the copy's second one,
// and both sides waited for each other for ever.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ibemu::engine {

/// Calls store(offset, width) for each store that places n bytes, in order:
/// 16-byte stores, then at most one each of 8, 4, 2 and 1 bytes. Every byte
/// is covered once and the offsets ascend.
template <typename Store>
inline void for_each_placement_store(size_t n, Store&& store) {
  size_t at = 0;
  for (; n - at >= 16; at += 16) store(at, size_t{16});
  for (size_t width = 8; width; width /= 2) {
    if (n - at >= width) {
      store(at, width);
      at += width;
    }
  }
}

/// Copies n bytes from `from` to `to` with the stores for_each_placement_store
/// names.
inline void place_in_order(uint8_t* to, const uint8_t* from, size_t n) noexcept {
  for_each_placement_store(n, [&](size_t at, size_t width) {
    // Fixed sizes compile to single moves; the barrier keeps the compiler
    // from turning the loop back into a call to memcpy.
    switch (width) {
      case 16:
        __builtin_memcpy(to + at, from + at, 16);
        break;
      case 8:
        __builtin_memcpy(to + at, from + at, 8);
        break;
      case 4:
        __builtin_memcpy(to + at, from + at, 4);
        break;
      case 2:
        __builtin_memcpy(to + at, from + at, 2);
        break;
      default:
        to[at] = from[at];
        break;
    }
    asm volatile("" ::: "memory");
  });
}

}  // namespace ibemu::engine
