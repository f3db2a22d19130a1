#include "provider/core/cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>
#include <utility>

namespace ibemu::provider {

namespace {
// CUDA driver API values (cuda.h), stable since CUDA 4.
constexpr int kAttrContext = 1, kAttrMemoryType = 2, kAttrBufferId = 7, kAttrIsManaged = 8,
              kAttrDeviceOrdinal = 9, kAttrRangeStart = 11, kAttrRangeSize = 12;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kStreamNonBlocking = 1;
}  // namespace

CudaDriver* CudaDriver::loaded() noexcept {
  static std::mutex mutex;
  static CudaDriver* driver = nullptr;
  std::lock_guard lock(mutex);
  if (driver) return driver;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!library) return nullptr;
  auto* d = new (std::nothrow) CudaDriver;
  if (!d || !d->bind(library)) {
    delete d;
    // Said once: GPU pointers would be taken for host memory.
    static bool said = false;
    if (!std::exchange(said, true))
      std::fprintf(stderr,
                   "ibemu: the CUDA driver loaded here (libcuda.so.1) lacks the calls ibemu "
                   "needs (cuPointerGetAttribute, cuMemcpyHtoDAsync_v2, ...): GPU memory "
                   "cannot be registered; a CUDA 11 or later driver is needed\n");
    return nullptr;
  }
  driver = d;
  return driver;
}

bool CudaDriver::bind(void* library) noexcept {
  auto sym = [library](const char* name) { return dlsym(library, name); };
  pointer_get_attribute_ =
      reinterpret_cast<decltype(pointer_get_attribute_)>(sym("cuPointerGetAttribute"));
  ctx_push_ = reinterpret_cast<decltype(ctx_push_)>(sym("cuCtxPushCurrent_v2"));
  ctx_pop_ = reinterpret_cast<decltype(ctx_pop_)>(sym("cuCtxPopCurrent_v2"));
  stream_create_ = reinterpret_cast<decltype(stream_create_)>(sym("cuStreamCreate"));
  stream_synchronize_ = reinterpret_cast<decltype(stream_synchronize_)>(sym("cuStreamSynchronize"));
  memcpy_htod_async_ = reinterpret_cast<decltype(memcpy_htod_async_)>(sym("cuMemcpyHtoDAsync_v2"));
  memcpy_dtoh_async_ = reinterpret_cast<decltype(memcpy_dtoh_async_)>(sym("cuMemcpyDtoHAsync_v2"));
  return pointer_get_attribute_ && ctx_push_ && ctx_pop_ && stream_create_ && stream_synchronize_ &&
         memcpy_htod_async_ && memcpy_dtoh_async_;
}

bool CudaDriver::describe(uint64_t address, Pointer* out) noexcept {
  unsigned type = 0;
  if (pointer_get_attribute_(&type, kAttrMemoryType, address) != 0) return false;
  *out = Pointer{};
  unsigned managed = 0;
  pointer_get_attribute_(&managed, kAttrIsManaged, address);
  out->managed = managed != 0;
  out->device = type == kMemoryTypeDevice && !out->managed;
  pointer_get_attribute_(&out->context, kAttrContext, address);
  pointer_get_attribute_(&out->ordinal, kAttrDeviceOrdinal, address);
  pointer_get_attribute_(&out->buffer_id, kAttrBufferId, address);
  pointer_get_attribute_(&out->range_start, kAttrRangeStart, address);
  pointer_get_attribute_(&out->range_size, kAttrRangeSize, address);
  return true;
}

bool CudaDriver::buffer_id(uint64_t address, uint64_t* id) noexcept {
  return pointer_get_attribute_(id, kAttrBufferId, address) == 0;
}

// Copies run in the region's context, pushed on the calling thread (the
// progress thread has none of its own), on a stream of ibemu's own that does
// not wait for the program's work; the stream is synchronised before the
// copy counts as done (an HtoD copy from pageable memory may otherwise
// return before its DMA has landed).
void* CudaDriver::stream_of(void* context) noexcept {
  std::lock_guard lock(streams_mutex_);
  auto it = streams_.find(context);
  if (it != streams_.end()) return it->second;
  void* stream = nullptr;
  if (stream_create_(&stream, kStreamNonBlocking) != 0) return nullptr;
  streams_.emplace(context, stream);
  return stream;
}

template <typename Copy>
bool CudaDriver::in_context(void* context, Copy&& copy) noexcept {
  if (ctx_push_(context) != 0) return false;
  void* stream = stream_of(context);
  const bool ok = stream && copy(stream) == 0 && stream_synchronize_(stream) == 0;
  void* popped;
  ctx_pop_(&popped);
  return ok;
}

bool CudaDriver::to_device(void* context, uint64_t device, const void* host, size_t n) noexcept {
  return in_context(context,
                    [&](void* stream) { return memcpy_htod_async_(device, host, n, stream); });
}

bool CudaDriver::from_device(void* context, void* host, uint64_t device, size_t n) noexcept {
  return in_context(context,
                    [&](void* stream) { return memcpy_dtoh_async_(host, device, n, stream); });
}

}  // namespace ibemu::provider
