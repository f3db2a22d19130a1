#pragma once
// The two atomic operations (IBA 9.4.5): 8 aligned bytes, executed
// atomically with respect to every other atomic of this HCA and to the CPUs
// (atomic_cap IBV_ATOMIC_HCA). Shared by the responder and the context that
// executes XRC requests forwarded to it.
#include <cstdint>
#include <mutex>

#include "transport/engine/device_memory.h"
#include "transport/wire/atomic_eth.h"
#include "transport/wire/opcode.h"

namespace ibemu::engine {

/// Performs the atomic that `opcode` (CmpSwap or FetchAdd, any transport)
/// names on `word`; returns the original value.
inline uint64_t execute_atomic(uint8_t opcode, const wire::AtomicEth& a, uint64_t* word) noexcept {
  if ((opcode & 0x1f) == (static_cast<uint8_t>(wire::Opcode::kRcCompareSwap) & 0x1f)) {
    uint64_t orig = a.compare();
    __atomic_compare_exchange_n(word, &orig, a.swap_add(), false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
    return orig;
  }
  return __atomic_fetch_add(word, a.swap_add(), __ATOMIC_SEQ_CST);
}

/// The same on the 8 bytes `span` names, which may be device memory: read,
/// changed and written back under one lock, so RDMA atomics of this process
/// never tear each other's values (a GPU kernel writing the word meanwhile is
/// not excluded: PCIe offers that only to real HCAs). False when the memory
/// refused the access.
inline bool execute_atomic(uint8_t opcode, const wire::AtomicEth& a, const MemorySpan& span,
                           uint64_t* orig) noexcept {
  if (!span.on_device()) {
    // Host memory: the CPU's atomic, guarded like a copy (dma_access.h).
    auto* word = reinterpret_cast<uint64_t*>(span.addr);
    uint64_t value = 0;
    if (!dma_guarded(word, sizeof(*word), [&] { value = execute_atomic(opcode, a, word); }))
      return false;
    *orig = value;
    return true;
  }
  static std::mutex device_atomics;
  std::lock_guard lock(device_atomics);
  uint64_t word;
  if (!span.read(0, &word, sizeof(word))) return false;
  *orig = execute_atomic(opcode, a, &word);
  return span.write(0, &word, sizeof(word));
}

}  // namespace ibemu::engine
