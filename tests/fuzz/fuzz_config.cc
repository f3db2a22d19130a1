// ibemud's configuration file: any text is either a configuration the daemon
// can use as it is, or a std::runtime_error whose message ibemud prints.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    ibemu::Config config = ibemu::Config::parse(text);
    if (config.devices.size() > 16) std::abort();
    for (const auto& d : config.devices)
      if (d.name.rfind("ibemu", 0) != 0 || d.ports < 1 || d.ports > 4) std::abort();
    if (config.pkey_table().empty() || config.pkey_table().size() > 16) std::abort();
    for (uint16_t k : config.pkey_table())
      if ((k & 0x7fff) == 0) std::abort();
    for (const auto& f : config.faults)
      if (f.port < 0 || f.port > 4) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
