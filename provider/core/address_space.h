#pragma once
// What the kernel checks when it pins a region for ibv_reg_mr (ib_umem_get):
// every page of the range is mapped, and the mapping allows the access the
// HCA will make. A hardware provider gets EFAULT from the kernel otherwise;
// ibemu pins nothing, so it asks the process's own memory map.
#include <cstddef>
#include <cstdint>

namespace ibemu::provider {

/// 0 when every page of [addr, addr+length) is mapped readable, or writable
/// when `writable` (the kernel pins with FOLL_WRITE then, and a write-only
/// mapping does for it); EFAULT otherwise, also for mappings no pin can take
/// ([vvar]); EINVAL when the range wraps around. Reads /proc/self/maps
/// (no allocation); where it cannot be read, says 0: the engine's accesses
/// are guarded anyway (transport/engine/dma_access.h).
int check_mapped(uintptr_t addr, size_t length, bool writable) noexcept;

}  // namespace ibemu::provider
