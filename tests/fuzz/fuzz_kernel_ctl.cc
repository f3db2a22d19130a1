// The kernel module's control device (/dev/ibemu): every write() is checked
// by ibemu_ctl_validate() before the module acts on it; the data channel's
// records, ioctl arguments and copy segments by the ibemu_data_*() checks,
// on whichever side receives them. The same C source is built here, in user
// space, with the sanitizers; tests/kernel fuzzes the module itself in qemu
// (ibemu-ctl-fuzz). Each input goes through every check.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "kernel/ibemu_ctl_validate.h"
#include "tests/unit/kernel_ctl_samples.h"

namespace {

void write_bytes(const std::string& path, const void* bytes, size_t size) {
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(bytes), size);
}

template <typename Msg>
void write_seed(const std::string& path, const Msg& m) {
  write_bytes(path, &m, sizeof(m));
}

/// IBEMU_FUZZ_WRITE_SEEDS=DIR: one well-formed message of each kind the
/// daemon sends, one data record of each kind, a batch each way and the
/// ioctls' arguments (the committed corpus comes from here).
void write_seeds(const std::string& dir) {
  using namespace ibemu::testing;
  write_seed(dir + "/add_device", valid_device());
  write_seed(dir + "/set_port", valid_port());
  write_seed(dir + "/mad_in", valid_mad_in());
  write_seed(dir + "/process_mad_reply", valid_mad_reply());
  std::vector<uint8_t> to_daemon, to_module;
  for (const DataSample& s : data_samples()) {
    write_bytes(dir + "/data_" + s.name, s.bytes.data(), s.bytes.size());
    auto& batch = s.direction == IBEMU_DATA_TO_DAEMON ? to_daemon : to_module;
    batch.insert(batch.end(), s.bytes.begin(), s.bytes.end());
  }
  write_bytes(dir + "/data_batch_to_daemon", to_daemon.data(), to_daemon.size());
  write_bytes(dir + "/data_batch_to_module", to_module.data(), to_module.size());
  write_seed(dir + "/data_complete", valid_complete());
  write_seed(dir + "/data_copy", valid_copy());
  write_seed(dir + "/data_copy_segment", valid_copy_segment());
}

void expect_verdict(int rc) {
  if (rc != 0 && rc != -EINVAL) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("IBEMU_FUZZ_WRITE_SEEDS")) write_seeds(dir);
    return true;
  }();
  (void)seeded;
  // An exact-size heap copy: a read past the message is caught. Its
  // alignment is new's, as the kernel's kmalloc'd copies and the daemon's
  // read buffers are at least 8-byte aligned.
  std::vector<uint8_t> msg(data, data + size);
  const void* bytes = size ? msg.data() : nullptr;
  expect_verdict(ibemu_ctl_validate(bytes, size));
  const int to_daemon = ibemu_data_batch_valid(bytes, size, IBEMU_DATA_TO_DAEMON);
  const int to_module = ibemu_data_batch_valid(bytes, size, IBEMU_DATA_TO_MODULE);
  expect_verdict(to_daemon);
  expect_verdict(to_module);
  // Each record type goes one way only.
  if (to_daemon == 0 && to_module == 0) std::abort();
  if (size == sizeof(ibemu_data_complete))
    expect_verdict(ibemu_data_complete_valid(static_cast<const ibemu_data_complete*>(bytes)));
  if (size == sizeof(ibemu_data_copy))
    expect_verdict(ibemu_data_copy_valid(static_cast<const ibemu_data_copy*>(bytes)));
  const auto* segments = static_cast<const ibemu_data_copy_segment*>(bytes);
  for (size_t i = 0; i < size / sizeof(*segments); ++i)
    expect_verdict(ibemu_data_copy_segment_valid(&segments[i]));
  return 0;
}
