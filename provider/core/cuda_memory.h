#pragma once
// GPU memory as the engine's DeviceMemory: a region registered on a CUDA
// device pointer (ibv_reg_mr, or ibv_reg_dmabuf_mr on a GPU dma-buf) copies
// through the CUDA driver in the allocation's context. The allocation is
// named by CUDA's buffer id: memory freed and handed out again is refused,
// never written (a real HCA's peer-memory client invalidates the region).
#include <memory>
#include <string>

#include "provider/core/cuda_driver.h"
#include "transport/engine/device_memory.h"

namespace ibemu::provider {

class CudaMemory : public engine::DeviceMemory {
 public:
  /// The GPU memory at [address, address + length), or nullptr when it is
  /// not (all) device memory of one allocation.
  static std::shared_ptr<CudaMemory> find(uint64_t address, uint64_t length) noexcept;

  bool read(uint64_t at, void* to, size_t n) noexcept override;
  bool write(uint64_t at, const void* from, size_t n) noexcept override;
  const char* kind() const noexcept override { return kind_.c_str(); }

 private:
  CudaMemory(CudaDriver* driver, const CudaDriver::Pointer& p);
  bool still_allocated(uint64_t at) noexcept;

  CudaDriver* driver_;
  CudaDriver::Pointer allocation_;
  std::string kind_;
};

}  // namespace ibemu::provider
