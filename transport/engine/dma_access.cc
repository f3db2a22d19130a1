#include "transport/engine/dma_access.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "transport/engine/dma_placement.h"

namespace ibemu::engine {
namespace {

// The access under way on this thread: where to go back to, and the
// registered bytes whose faults it takes.
struct Guard {
  sigjmp_buf resume;
  uintptr_t first = 0;
  uintptr_t end = 0;
};

// initial-exec: the provider is dlopen'd, and the handler must read this
// without the allocation a dynamic TLS access may make on first use.
thread_local Guard* t_guard __attribute__((tls_model("initial-exec"))) = nullptr;

// The handlers found at installation; a fault that is not ours goes there.
struct sigaction g_previous_segv;
struct sigaction g_previous_bus;

struct sigaction& previous(int sig) {
  return sig == SIGBUS ? g_previous_bus : g_previous_segv;
}

// Hands a signal to the handler that was installed before ours, as the
// kernel would have delivered it: with that handler's mask, once only when
// it asked for SA_RESETHAND, and the default action (death, with a core
// dump) when it was SIG_DFL.
void forward(int sig, siginfo_t* info, void* context) {
  struct sigaction& prev = previous(sig);
  const bool from_kernel = info && info->si_code > 0;
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler == SIG_IGN && !from_kernel) return;
  if ((prev.sa_flags & SA_SIGINFO) ? prev.sa_sigaction == nullptr
                                   : prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
    // A fault cannot be ignored: the kernel kills the program for it. With
    // the default action back, the faulting instruction runs again on return
    // and does exactly that; a signal sent with kill() is raised again.
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    if (!from_kernel) raise(sig);
    return;
  }
  sigset_t block = prev.sa_mask, old;
  if (!(prev.sa_flags & SA_NODEFER)) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  const struct sigaction called = prev;
  if (prev.sa_flags & SA_RESETHAND) {
    prev = {};
    prev.sa_handler = SIG_DFL;
  }
  if (called.sa_flags & SA_SIGINFO)
    called.sa_sigaction(sig, info, context);
  else
    called.sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  Guard* const guard = t_guard;
  if (guard && info && info->si_code > 0) {
    const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
    if (at >= guard->first && at < guard->end) {
      t_guard = nullptr;
      siglongjmp(guard->resume, 1);
    }
  }
  forward(sig, info, context);
}

struct Copy {
  void* to;
  const void* from;
  size_t n;
};

void copy(void* arg) {
  const Copy* c = static_cast<const Copy*>(arg);
  std::memcpy(c->to, c->from, c->n);
}

// Into registered memory: as a DMA engine writes (dma_placement.h).
void place(void* arg) {
  const Copy* c = static_cast<const Copy*>(arg);
  place_in_order(static_cast<uint8_t*>(c->to), static_cast<const uint8_t*>(c->from), c->n);
}

}  // namespace

void install_dma_fault_handler() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    // SA_NODEFER: the guarded access leaves the handler by siglongjmp, and a
    // sigsetjmp that saves no mask would leave the signal blocked otherwise.
    // SA_ONSTACK: a program's stack-overflow handler keeps its alternate stack.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    // The handlers found are saved before ours goes in, so that a fault on
    // another thread meanwhile never sees an empty record.
    sigaction(SIGSEGV, nullptr, &g_previous_segv);
    sigaction(SIGBUS, nullptr, &g_previous_bus);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

bool dma_guarded(const void* registered, size_t n, void (*op)(void*), void* arg) noexcept {
  if (n == 0) return true;
  DmaScope dma;  // outside the jump: its destructor runs either way
  Guard guard;
  guard.first = reinterpret_cast<uintptr_t>(registered);
  guard.end = guard.first + n;
  Guard* const outer = t_guard;
  if (sigsetjmp(guard.resume, 0) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  op(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

bool dma_write(void* registered, const void* from, size_t n) noexcept {
  Copy c{registered, from, n};
  return dma_guarded(registered, n, place, &c);
}

bool dma_read(void* to, const void* registered, size_t n) noexcept {
  Copy c{to, registered, n};
  return dma_guarded(registered, n, copy, &c);
}

}  // namespace ibemu::engine
