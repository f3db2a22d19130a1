// Fast registration (kernel consumers' FRWR: ib_alloc_mr, IB_WR_REG_MR,
// IB_WR_LOCAL_INV and SEND with Invalidate), as IBA's base memory management
// extensions define it: the owner allocates a region that is free (no key
// opens it); a REG_MR work request on a send queue gives it a translation,
// bounds, access rights and a key byte of the consumer's choosing; an
// invalidation, local or from the peer, makes it free again. The region's
// index stays; its key changes with each registration.
#include <cerrno>
#include <mutex>

#include "transport/engine/mr_table.h"

namespace ibemu::engine {

namespace {

// The rights a registration may grant. Windows are not bound to fast-
// registered regions (kernel consumers bind none), so an invalidation never
// has to take windows back.
constexpr uint32_t kFastRegAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

}  // namespace

int MrTable::alloc_fast_reg(uint32_t key, uint32_t pd, std::shared_ptr<DeviceMemory> device) {
  MemoryRegion mr{key, key, pd, 0, nullptr, 0, 0, 0, std::move(device)};
  mr.fast_reg = true;
  mr.valid = false;
  return insert_with_key(key, std::move(mr));
}

int MrTable::free_fast_reg(uint32_t key) {
  std::shared_ptr<std::atomic<uint32_t>> in_flight;
  {
    std::unique_lock lock(mutex_);
    auto it = regions_.find(key >> 8);
    if (it == regions_.end() || !it->second.fast_reg) return EINVAL;
    in_flight = erase(it);
  }
  wait_idle(*in_flight);
  return 0;
}

// The region must be free and of the QP's PD; the new key keeps the region's
// index (only its key byte is the consumer's). Remote write and atomics need
// local write, as for any region (IBA 10.6.3.1).
MrCheck MrTable::fast_register(const FastReg& fr, uint32_t pd) {
  std::unique_lock lock(mutex_);
  auto it = regions_.find(fr.key >> 8);
  if (it == regions_.end() || !it->second.fast_reg || it->second.valid) return MrCheck::kBadKey;
  MemoryRegion& mr = it->second;
  if (mr.pd != pd) return MrCheck::kBadPd;
  if ((fr.access & ~kFastRegAccess) || ((fr.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) &&
                                        !(fr.access & kAccessLocalWrite)))
    return MrCheck::kNoAccess;
  if (fr.iova + fr.length < fr.iova) return MrCheck::kOutOfBounds;
  mr.lkey = mr.rkey = fr.key;
  mr.iova = fr.iova;
  // The device is told addresses in the iova's own terms: its mapping
  // translates them.
  mr.addr = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(fr.iova));
  mr.length = fr.length;
  mr.access = fr.access;
  if (mr.device) mr.device->bind(fr.mapping);
  mr.valid = true;
  return MrCheck::kOk;
}

MrCheck MrTable::invalidate(uint32_t key, uint32_t pd, uint32_t qpn) {
  std::shared_ptr<std::atomic<uint32_t>> in_flight;
  {
    std::unique_lock lock(mutex_);
    auto it = regions_.find(key >> 8);
    if (it == regions_.end()) return invalidate_window(key, pd, qpn);
    MemoryRegion& mr = it->second;
    // Only a fast-registration region can be invalidated, and only while
    // valid under this very key.
    if (!mr.fast_reg || !mr.valid || mr.rkey != key) return MrCheck::kBadKey;
    if (mr.pd != pd) return MrCheck::kBadPd;
    mr.valid = false;
    in_flight = mr.in_flight;
  }
  // Accesses that passed the key check before finish before the
  // invalidation completes: the consumer unmaps the pages once it has.
  wait_idle(*in_flight);
  return MrCheck::kOk;
}

}  // namespace ibemu::engine
