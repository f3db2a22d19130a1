#pragma once
// Building the messages of ibemu.ko's control device (kernel/ibemu_abi.h).
#include <cstdint>

#include "kernel/ibemu_abi.h"

namespace ibemu {

/// A zeroed message of type `type` whose header gives its own length.
template <typename Msg>
Msg kernel_message(uint16_t type) {
  Msg m{};
  m.hdr.type = type;
  m.hdr.length = sizeof(Msg);
  return m;
}

}  // namespace ibemu
