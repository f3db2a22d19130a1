#pragma once
// Kernel mode: the data channel of ibemu.ko (kernel/ibemu_abi.h, "the data
// channel"), through which kernel consumers' QPs reach the daemon's engine.
// A thread of its own reads the module's batches of records (commands and
// WQEs) and hands each well-formed record to the plane; it never runs on
// the daemon's Asio thread, which must never wait for the kernel (and the
// kernel's verbs never wait for the daemon). docs/design/kernel-consumers.md
// has the plan this is step 0 of.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>

#include "kernel/ibemu_abi.h"

namespace ibemu {

struct KernelDataCounters {
  std::atomic<uint64_t> batches{0};    // read()s that returned records
  std::atomic<uint64_t> records{0};    // well-formed records handed on
  std::atomic<uint64_t> malformed{0};  // batches the checks refused (the module's bug)
};

class KernelDataChannel {
 public:
  /// One record of a batch, already checked (ibemu_data_record_valid).
  using Handler = std::function<void(const ibemu_data_hdr& hdr, const uint8_t* record)>;

  KernelDataChannel() = default;
  ~KernelDataChannel();
  KernelDataChannel(const KernelDataChannel&) = delete;
  KernelDataChannel& operator=(const KernelDataChannel&) = delete;

  /// Asks the module for the data fd of control file `control_fd` and
  /// starts reading it. Returns 0 or an errno (ENOTTY: a module without the
  /// data channel).
  int open(int control_fd, Handler handler);
  /// Reads records from `data_fd` (taken over, non-blocking or not): what
  /// open() does after the ioctl, and what tests do with a pipe.
  void start(int data_fd, Handler handler);
  /// Stops the reader and closes the data fd, which ends the channel.
  void stop();
  bool active() const { return data_fd_ >= 0; }

  const KernelDataCounters& counters() const { return counters_; }

 private:
  void read_loop();
  void on_batch(const uint8_t* buf, size_t len);

  int data_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop() ends the reader's poll()
  Handler handler_;
  std::thread reader_;
  KernelDataCounters counters_;
};

}  // namespace ibemu
