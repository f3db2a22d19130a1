#include "provider/core/cuda_memory.h"

namespace ibemu::provider {

std::shared_ptr<CudaMemory> CudaMemory::find(uint64_t address, uint64_t length) noexcept {
  CudaDriver* driver = CudaDriver::loaded();
  CudaDriver::Pointer p;
  if (!driver || !driver->describe(address, &p) || !p.device) return nullptr;
  // One registration, one allocation: the range must not run past it.
  if (address < p.range_start || address - p.range_start + length > p.range_size) return nullptr;
  return std::shared_ptr<CudaMemory>(new (std::nothrow) CudaMemory(driver, p));
}

CudaMemory::CudaMemory(CudaDriver* driver, const CudaDriver::Pointer& p)
    : driver_(driver), allocation_(p), kind_("cuda:" + std::to_string(p.ordinal)) {}

bool CudaMemory::still_allocated(uint64_t at) noexcept {
  uint64_t id;
  return driver_->buffer_id(at, &id) && id == allocation_.buffer_id;
}

bool CudaMemory::read(uint64_t at, void* to, size_t n) noexcept {
  return still_allocated(at) && driver_->from_device(allocation_.context, to, at, n);
}

bool CudaMemory::write(uint64_t at, const void* from, size_t n) noexcept {
  return still_allocated(at) && driver_->to_device(allocation_.context, at, from, n);
}

}  // namespace ibemu::provider
