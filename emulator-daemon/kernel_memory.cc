#include "emulator-daemon/kernel_memory.h"

#include <algorithm>

namespace ibemu {

bool KernelMemory::read(uint64_t at, void* to, size_t n) noexcept {
  return move(at, reinterpret_cast<uintptr_t>(to), n, IBEMU_DATA_COPY_FROM_KERNEL);
}

bool KernelMemory::write(uint64_t at, const void* from, size_t n) noexcept {
  return move(at, reinterpret_cast<uintptr_t>(from), n, IBEMU_DATA_COPY_TO_KERNEL);
}

// One ioctl moves up to IBEMU_DATA_MAX_COPY_SEGMENTS pieces of at most
// IBEMU_DATA_MAX_COPY_LENGTH bytes: a packet's payload (at most 4 KiB) is
// one piece, one call.
bool KernelMemory::move(uint64_t at, uint64_t buffer, size_t n, uint8_t direction) noexcept {
  ibemu_data_copy_segment segments[IBEMU_DATA_MAX_COPY_SEGMENTS];
  while (n) {
    uint32_t count = 0;
    for (; n && count < IBEMU_DATA_MAX_COPY_SEGMENTS; ++count) {
      const auto piece = static_cast<uint32_t>(std::min<size_t>(n, IBEMU_DATA_MAX_COPY_LENGTH));
      ibemu_data_copy_segment& s = segments[count];
      s = ibemu_data_copy_segment{};
      s.iova = at;
      s.buffer = buffer;
      s.mr = mr_;
      s.generation = generation_.load(std::memory_order_relaxed);
      s.length = piece;
      s.index = device_;
      s.direction = direction;
      at += piece;
      buffer += piece;
      n -= piece;
    }
    if (copy_(segments, count) != 0) return false;
  }
  return true;
}

}  // namespace ibemu
