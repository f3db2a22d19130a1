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
  std::atomic<uint64_t> batches{0};      // read()s whose records were all handed on
  std::atomic<uint64_t> records{0};      // well-formed records handed on
  std::atomic<uint64_t> malformed{0};    // batches the checks refused (the module's bug)
  std::atomic<uint64_t> completions{0};  // CQE and EVENT records handed back
  std::atomic<uint64_t> copies{0};       // IBEMU_IOC_COPY calls
  std::atomic<uint64_t> copy_bytes{0};   // payload they moved
  std::atomic<uint64_t> copy_errors{0};  // calls the module refused
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
  /// Stops the reader only: no record is handed on after it returns, while
  /// complete() and copy() still work (the plane drains its engines).
  void halt_reader();
  bool active() const { return data_fd_ >= 0; }

  /// IBEMU_IOC_COMPLETE: hands the module a batch of CQE and EVENT records
  /// (at most IBEMU_DATA_MAX_BATCH bytes). 0 or an errno. Any thread.
  int complete(const void* records, size_t len);
  /// IBEMU_IOC_COPY: moves payload between kernel memory and this process.
  /// 0, or the errno of the first segment that failed. Any thread.
  int copy(const ibemu_data_copy_segment* segments, uint32_t count);

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
