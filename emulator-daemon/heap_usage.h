#pragma once
// What the daemon's heap holds: the figure a leak grows. The process's
// resident size says little about that: the allocator keeps freed pages,
// and under AddressSanitizer freed blocks wait in its quarantine (up to
// 256 MiB) and every new allocation stack is remembered.
#include <cstddef>

namespace ibemu {

/// Bytes allocated and not freed: glibc's count (every arena, mmapped
/// blocks included), or AddressSanitizer's where its allocator serves the
/// heap (glibc's count is empty there).
size_t heap_in_use() noexcept;

}  // namespace ibemu
