// The kernel module's control device (/dev/ibemu): every write() is checked
// by ibemu_ctl_validate() before the module acts on it. The same C source is
// built here, in user space, with the sanitizers; tests/kernel fuzzes the
// module itself in qemu (ibemu-ctl-fuzz).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kernel/ibemu_ctl_validate.h"
#include "tests/unit/kernel_ctl_samples.h"

namespace {

template <typename Msg>
void write_seed(const std::string& path, const Msg& m) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(&m), sizeof(m));
}

/// IBEMU_FUZZ_WRITE_SEEDS=DIR: one well-formed message of each kind the
/// daemon sends (the committed corpus comes from here).
void write_seeds(const std::string& dir) {
  write_seed(dir + "/add_device", ibemu::testing::valid_device());
  write_seed(dir + "/set_port", ibemu::testing::valid_port());
  write_seed(dir + "/mad_in", ibemu::testing::valid_mad_in());
  write_seed(dir + "/process_mad_reply", ibemu::testing::valid_mad_reply());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("IBEMU_FUZZ_WRITE_SEEDS")) write_seeds(dir);
    return true;
  }();
  (void)seeded;
  // An exact-size heap copy: a read past the message is caught.
  std::vector<uint8_t> msg(data, data + size);
  const int rc = ibemu_ctl_validate(size ? msg.data() : nullptr, size);
  if (rc != 0 && rc != -EINVAL) std::abort();
  return 0;
}
