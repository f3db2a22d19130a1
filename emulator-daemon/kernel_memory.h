#pragma once
// Kernel mode: memory of a kernel consumer's MR, which the daemon's engine
// reaches only through ibemu.ko (IBEMU_IOC_COPY), the way it reaches a GPU's
// through the CUDA driver: every access is a copy the module checks against
// the MR (its bounds, and that the pages are the kernel's RAM). A DMA MR's
// addresses are kernel virtual addresses; its region in the engine spans the
// whole address space and the module says what may be touched. An FRWR MR's
// are iovas of the page list the module froze for its current registration,
// named by a generation that each REG_MR brings (bind).
#include <atomic>
#include <cstdint>
#include <functional>

#include "kernel/ibemu_abi.h"
#include "transport/engine/device_memory.h"

namespace ibemu {

class KernelMemory : public engine::DeviceMemory {
 public:
  /// Issues IBEMU_IOC_COPY: 0 or an errno (KernelDataChannel::copy).
  using Copy = std::function<int(const ibemu_data_copy_segment*, uint32_t)>;

  /// The MR `mr_handle` of device `device_index`, in mapping `generation`
  /// (0: a DMA MR; an FRWR MR's until its first registration).
  KernelMemory(Copy copy, uint8_t device_index, uint32_t mr_handle, uint32_t generation)
      : copy_(std::move(copy)), device_(device_index), mr_(mr_handle), generation_(generation) {}

  bool read(uint64_t at, void* to, size_t n) noexcept override;
  bool write(uint64_t at, const void* from, size_t n) noexcept override;
  const char* kind() const noexcept override { return "kernel"; }
  /// A fast registration of the MR: copies name its mapping from now on.
  void bind(uint32_t generation) noexcept override {
    generation_.store(generation, std::memory_order_relaxed);
  }

 private:
  bool move(uint64_t at, uint64_t buffer, size_t n, uint8_t direction) noexcept;

  Copy copy_;
  uint8_t device_;
  uint32_t mr_;
  // Set by the engine's registration under its MR table's lock; copies
  // read it after checking the key under that lock.
  std::atomic<uint32_t> generation_;
};

}  // namespace ibemu
