#include "emulator-daemon/heap_usage.h"

#include <malloc.h>

// Defined by the sanitizers' runtime when one is linked in.
extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

namespace ibemu {

size_t heap_in_use() noexcept {
  if (__sanitizer_get_current_allocated_bytes) return __sanitizer_get_current_allocated_bytes();
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

}  // namespace ibemu
