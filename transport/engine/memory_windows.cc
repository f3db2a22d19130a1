// Memory windows (IBA 10.6.7): allocation, bind, invalidation, and the
// remote-access check through a window's rkey. A window lends a peer part of a
// region under a key of its own that the owner can take back without
// deregistering the region.
#include <cerrno>
#include <mutex>

#include "transport/engine/mr_table.h"

namespace ibemu::engine {

uint32_t MrTable::alloc_window(uint32_t pd, uint8_t type) {
  std::unique_lock lock(mutex_);
  if (full(0)) return 0;
  const uint32_t index = unused_index();
  MemoryWindow mw;
  mw.rkey = index << 8 | (random_bits() & 0xff);
  mw.pd = pd;
  mw.type = type;
  windows_[index] = mw;
  return mw.rkey;
}

void MrTable::unbind(MemoryWindow& mw) {
  if (!mw.bound) return;
  MemoryRegion* mr = region(mw.mr_key);
  if (mr && mr->bound_windows) --mr->bound_windows;
  mw.bound = false;
}

bool MrTable::free_window(uint32_t rkey) {
  std::unique_lock lock(mutex_);
  auto it = windows_.find(rkey >> 8);
  if (it == windows_.end()) return false;
  unbind(it->second);
  windows_.erase(it);
  indices_.erase(rkey >> 8);
  return true;
}

// The checks of IBA 10.6.7.2 (C10-65 .. C10-76 in spirit): the window, the
// region and the QP share one PD; the region allows binding; the window lies
// inside the region; a window that lets the peer write needs a region the HCA
// may write; a type 2 window is bound only from the free state, and its new
// key keeps its index.
MrCheck MrTable::bind_window(const WindowBind& b, uint32_t pd, uint32_t qpn) {
  std::unique_lock lock(mutex_);
  auto it = windows_.find(b.mw_rkey >> 8);
  if (it == windows_.end() || it->second.rkey != b.mw_rkey) return MrCheck::kBadKey;
  MemoryWindow& mw = it->second;
  if (mw.pd != pd) return MrCheck::kBadPd;
  if (b.new_rkey >> 8 != b.mw_rkey >> 8) return MrCheck::kBadKey;
  if (mw.type == 2 && mw.bound) return MrCheck::kBadKey;
  if (mw.type == 1 && b.length == 0) {
    unbind(mw);  // a zero-length bind takes a type 1 window back
    mw.rkey = b.new_rkey;
    return MrCheck::kOk;
  }
  MemoryRegion* found = region(b.mr_lkey);
  if (!found) return MrCheck::kBadKey;
  MemoryRegion& mr = *found;
  if (mr.pd != pd) return MrCheck::kBadPd;
  if (!(mr.access & kAccessMwBind)) return MrCheck::kNoAccess;
  if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(mr.access & kAccessLocalWrite))
    return MrCheck::kNoAccess;
  if (!within(mr.iova, mr.length, b.addr, b.length)) return MrCheck::kOutOfBounds;
  unbind(mw);
  mw.rkey = b.new_rkey;
  mw.bound = true;
  mw.qpn = mw.type == 2 ? qpn : 0;
  mw.mr_key = b.mr_lkey;
  mw.va = (b.access & kAccessZeroBased) ? 0 : b.addr;
  mw.length = b.length;
  mw.mr_offset = b.addr - mr.iova;
  mw.access = b.access & (kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  ++mr.bound_windows;
  return MrCheck::kOk;
}

MrCheck MrTable::invalidate_window(uint32_t rkey, uint32_t pd, uint32_t qpn) {
  auto it = windows_.find(rkey >> 8);
  if (it == windows_.end() || it->second.rkey != rkey) return MrCheck::kBadKey;
  MemoryWindow& mw = it->second;
  // Type 1 windows are taken back by a zero-length bind only (IBA 10.6.7.2.4).
  if (mw.type != 2 || !mw.bound) return MrCheck::kBadKey;
  if (mw.pd != pd) return MrCheck::kBadPd;
  if (qpn && mw.qpn != qpn) return MrCheck::kNoAccess;
  unbind(mw);
  return MrCheck::kOk;
}

bool MrTable::find_window(uint32_t rkey, MemoryWindow* out) const {
  std::shared_lock lock(mutex_);
  auto it = windows_.find(rkey >> 8);
  if (it == windows_.end() || it->second.rkey != rkey) return false;
  *out = it->second;
  return true;
}

MrCheck MrTable::check_window(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                              uint32_t need, MemorySpan* out) const {
  std::shared_lock lock(mutex_);
  auto it = windows_.find(rkey >> 8);
  if (it == windows_.end()) return MrCheck::kBadKey;
  const MemoryWindow& mw = it->second;
  if (mw.rkey != rkey || !mw.bound) return MrCheck::kBadKey;
  if (mw.pd != pd) return MrCheck::kBadPd;
  if (mw.type == 2 && mw.qpn != qpn) return MrCheck::kBadKey;  // type 2B: its own QP only
  if (!within(mw.va, mw.length, va, len)) return MrCheck::kOutOfBounds;
  if ((mw.access & need) != need) return MrCheck::kNoAccess;
  const MemoryRegion* mr = region(mw.mr_key);
  if (!mr) return MrCheck::kBadKey;
  *out = MemorySpan{mr->addr + mw.mr_offset + (va - mw.va), mr->device.get(), mr->in_flight.get()};
  return MrCheck::kOk;
}

}  // namespace ibemu::engine
