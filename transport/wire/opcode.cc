#include "transport/wire/opcode.h"

namespace ibemu::wire {

const char* to_string(Opcode op) noexcept { return opcode_info(op).name; }

const char* to_string(Transport t) noexcept {
  switch (t) {
    case Transport::kRc:
      return "RC";
    case Transport::kUc:
      return "UC";
    case Transport::kRd:
      return "RD";
    case Transport::kUd:
      return "UD";
    case Transport::kCnp:
      return "CNP";
    case Transport::kXrc:
      return "XRC";
    case Transport::kDc:
      return "DC";
    case Transport::kManufacturer7:
      return "MANUFACTURER";
  }
  return "UNKNOWN";
}

}  // namespace ibemu::wire
