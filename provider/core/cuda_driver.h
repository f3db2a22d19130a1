#pragma once
// The part of the CUDA driver API that GPU memory regions need, loaded at
// run time: ibemu builds without CUDA and runs without it. A program that
// uses GPU memory has loaded libcuda.so.1 already (through the CUDA runtime
// or the driver API), so the provider only looks for the loaded library and
// never loads CUDA into a program that does not use it.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace ibemu::provider {

class CudaDriver {
 public:
  /// The driver of this process, or nullptr when the program has not loaded
  /// libcuda.so.1 (then no pointer of it can be GPU memory).
  static CudaDriver* loaded() noexcept;

  /// What the driver says of an address.
  struct Pointer {
    bool device = false;   // GPU memory the CPU cannot load from
    bool managed = false;  // cudaMallocManaged: the CPU may access it
    void* context = nullptr;
    int ordinal = -1;
    uint64_t buffer_id = 0;  // changes when the allocation is freed and reused
    uint64_t range_start = 0, range_size = 0;
  };
  /// False when the address is not known to CUDA (plain host memory).
  bool describe(uint64_t address, Pointer* out) noexcept;
  /// Only the allocation's buffer id (one driver call, for every copy);
  /// false when the address is no longer allocated.
  bool buffer_id(uint64_t address, uint64_t* id) noexcept;
  /// Synchronous copies in `context`: they return once the bytes have
  /// arrived. False on any driver error.
  bool to_device(void* context, uint64_t device, const void* host, size_t n) noexcept;
  bool from_device(void* context, void* host, uint64_t device, size_t n) noexcept;

 private:
  CudaDriver() = default;
  bool bind(void* library) noexcept;
  /// The stream of ibemu's own copies in `context` (created on first use).
  void* stream_of(void* context) noexcept;
  template <typename Copy>
  bool in_context(void* context, Copy&& copy) noexcept;

  using Result = int;  // CUresult: 0 is success
  Result (*pointer_get_attribute_)(void*, int, uint64_t) = nullptr;
  Result (*ctx_push_)(void*) = nullptr;
  Result (*ctx_pop_)(void**) = nullptr;
  Result (*stream_create_)(void**, unsigned) = nullptr;
  Result (*stream_synchronize_)(void*) = nullptr;
  Result (*memcpy_htod_async_)(uint64_t, const void*, size_t, void*) = nullptr;
  Result (*memcpy_dtoh_async_)(void*, uint64_t, size_t, void*) = nullptr;
  std::mutex streams_mutex_;
  std::unordered_map<void*, void*> streams_;  // context -> stream
};

}  // namespace ibemu::provider
