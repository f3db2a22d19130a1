#pragma once
// The HCA's accesses to registered memory are DMA. A program orders them
// with its own loads and stores through completions and through its peer (a
// flag the peer writes, a message over TCP), which ThreadSanitizer cannot
// see, so it would take every RDMA transfer for a data race. Under TSan the
// engine's copies and atomics on registered memory are therefore not
// counted as accesses of the thread that runs them, as a real HCA's DMA is
// not; races on the engine's own state are still found.
#include <cstddef>
#include <cstring>

#if defined(__SANITIZE_THREAD__)
#define IBEMU_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IBEMU_THREAD_SANITIZER 1
#endif
#endif

#ifdef IBEMU_THREAD_SANITIZER
extern "C" {
void __tsan_ignore_thread_begin();
void __tsan_ignore_thread_end();
void AnnotateIgnoreSyncBegin(const char* file, int line);
void AnnotateIgnoreSyncEnd(const char* file, int line);
}
#endif

namespace ibemu::engine {

/// While one exists, this thread's accesses are DMA (see above).
class DmaScope {
 public:
#ifdef IBEMU_THREAD_SANITIZER
  DmaScope() noexcept {
    __tsan_ignore_thread_begin();
    AnnotateIgnoreSyncBegin(__FILE__, __LINE__);  // the atomics, too
  }
  ~DmaScope() {
    AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
    __tsan_ignore_thread_end();
  }
#else
  DmaScope() noexcept {}  // user-provided: a scope is not an unused variable
#endif
  DmaScope(const DmaScope&) = delete;
  DmaScope& operator=(const DmaScope&) = delete;
};

/// memcpy where `to` or `from` is registered memory.
inline void dma_copy(void* to, const void* from, size_t n) noexcept {
  DmaScope dma;
  std::memcpy(to, from, n);
}

}  // namespace ibemu::engine
