// ibemu-sm's partitions file: any text is either partitions whose P_Key
// tables are well formed, or a std::runtime_error whose message the SM
// prints with the line at fault.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "sm-lite/partitions.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto partitions = ibemu::sm::parse_partitions(text);
    for (const auto& p : partitions)
      if (p.pkey == 0 || p.pkey > 0x7fff) std::abort();
    for (const ibemu::sm::EndPort& port :
         {ibemu::sm::EndPort{0x0002c90300000101ull, false, true},
          ibemu::sm::EndPort{0x0002c90300000102ull, false, false},
          ibemu::sm::EndPort{0x0002c903000001ffull, true, false}}) {
      // A port may be in no partition at all; the keys it has come first,
      // each naming a partition.
      const auto table = ibemu::sm::pkey_table(partitions, port, 16);
      if (table.size() != 16) std::abort();
      for (size_t i = 0; i < table.size(); ++i)
        if (table[i] ? (table[i] & 0x7fff) == 0 || (i && !table[i - 1]) : false) std::abort();
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
