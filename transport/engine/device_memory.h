#pragma once
// Memory the HCA reaches by copying rather than by loads and stores: a GPU's
// (provider/core/cuda_memory.cc). A region registered on it keeps one of
// these; every access the engine makes through such a region goes through
// read() and write(), which return only once the bytes have moved, so a
// completion reported after them means the data is in place. Host memory
// is copied under a guard (dma_access.h): either kind may refuse an access.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "transport/engine/dma_access.h"

namespace ibemu::engine {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// Copies n bytes at device address `at` to `to`. False when the device
  /// refuses (the memory was freed, the device is gone).
  virtual bool read(uint64_t at, void* to, size_t n) noexcept = 0;
  /// Copies n bytes from `from` to device address `at`.
  virtual bool write(uint64_t at, const void* from, size_t n) noexcept = 0;
  /// What `ibemu status` calls the memory, e.g. "cuda:0".
  virtual const char* kind() const noexcept = 0;
  /// A fast registration of the region on this memory named the translation
  /// `mapping` (FastReg::mapping): the accesses from now on go through it.
  /// Memory with a single translation has nothing to do.
  virtual void bind(uint32_t mapping) noexcept { (void)mapping; }
};

/// Where an access through a key lands: host bytes, or an address on a
/// device that is copied to and from. While a span lives its region stays
/// registered: ibv_dereg_mr waits for the accesses in flight, as a hardware
/// HCA finishes its DMA before deregistration returns (the program may free
/// or unmap the memory right after). So spans are short-lived locals.
class MemorySpan {
 public:
  MemorySpan() = default;
  MemorySpan(uint8_t* a, DeviceMemory* d, std::atomic<uint32_t>* in_flight = nullptr)
      : addr(a), device(d), in_flight_(in_flight) {
    if (in_flight_) in_flight_->fetch_add(1, std::memory_order_acquire);
  }
  MemorySpan(const MemorySpan&) = delete;
  MemorySpan& operator=(const MemorySpan&) = delete;
  MemorySpan(MemorySpan&& o) noexcept : addr(o.addr), device(o.device), in_flight_(o.in_flight_) {
    o.in_flight_ = nullptr;
  }
  MemorySpan& operator=(MemorySpan&& o) noexcept {
    if (this != &o) {
      release();
      addr = o.addr;
      device = o.device;
      in_flight_ = o.in_flight_;
      o.in_flight_ = nullptr;
    }
    return *this;
  }
  ~MemorySpan() { release(); }

  uint8_t* addr = nullptr;  // host pointer, or the device address
  DeviceMemory* device = nullptr;

  bool on_device() const noexcept { return device != nullptr; }
  bool write(size_t offset, const void* from, size_t n) const noexcept {
    if (!device) return dma_write(addr + offset, from, n);
    return device->write(reinterpret_cast<uint64_t>(addr) + offset, from, n);
  }
  bool read(size_t offset, void* to, size_t n) const noexcept {
    if (!device) return dma_read(to, addr + offset, n);
    return device->read(reinterpret_cast<uint64_t>(addr) + offset, to, n);
  }

 private:
  void release() noexcept {
    if (in_flight_) in_flight_->fetch_sub(1, std::memory_order_release);
    in_flight_ = nullptr;
  }
  std::atomic<uint32_t>* in_flight_ = nullptr;  // the region's accesses in flight
};

}  // namespace ibemu::engine
