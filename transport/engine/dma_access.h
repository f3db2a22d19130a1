#pragma once
// The HCA's accesses to registered memory are DMA.
//
// A hardware HCA keeps a region's pages pinned while it is registered, so its
// DMA never finds them gone. ibemu's engine reaches them with loads and
// stores of the progress thread instead, and a program may munmap() or
// mprotect() a region it did not deregister, or truncate the file under a
// MAP_SHARED region: the access would raise SIGSEGV or SIGBUS there and kill
// the program. So every access goes through a guard: a fault inside it, on the
// registered bytes it names, makes the access return false (the caller ends
// the request with an access error, as for a key that does not fit), and any
// other fault reaches whatever handler was there before, as if ibemu had none.
// The guard costs no system call: a sigsetjmp that saves no signal mask and a
// thread-local pointer.
//
// A program orders the DMA with its own loads and stores through completions
// and through its peer (a flag the peer writes, a message over TCP), which
// ThreadSanitizer cannot see, so it would take every RDMA transfer for a data
// race. Under TSan the engine's copies and atomics on registered memory are
// therefore not counted as accesses of the thread that runs them, as a real
// HCA's DMA is not; races on the engine's own state are still found.
#include <cstddef>
#include <cstdint>
#include <type_traits>

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

/// Installs the handler that turns faults inside guarded accesses into a
/// false return (SIGSEGV and SIGBUS; the handlers found are kept and get
/// every other fault). Once per process; later calls do nothing. Without it
/// a fault in registered memory kills the program, as it would anyway.
void install_dma_fault_handler() noexcept;

/// Copies n bytes from `from` into registered memory at `registered`, each
/// byte stored once and in ascending order (dma_placement.h); false when that
/// memory faulted (some bytes may have been written).
bool dma_write(void* registered, const void* from, size_t n) noexcept;
/// Copies n bytes of registered memory at `registered` to `to`; false when
/// that memory faulted.
bool dma_read(void* to, const void* registered, size_t n) noexcept;

/// Runs op(arg) as an access to the n registered bytes at `registered`;
/// false when they faulted. For accesses other than copies (atomics.h).
bool dma_guarded(const void* registered, size_t n, void (*op)(void*), void* arg) noexcept;

/// The same for a callable; it must leave nothing to destroy behind when a
/// fault cuts it short (no objects with destructors of its own).
template <typename Fn>
bool dma_guarded(const void* registered, size_t n, Fn&& fn) noexcept {
  using F = std::remove_reference_t<Fn>;
  return dma_guarded(
      registered, n, [](void* f) { (*static_cast<F*>(f))(); }, &fn);
}

}  // namespace ibemu::engine
