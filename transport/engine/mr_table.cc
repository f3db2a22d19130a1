#include "transport/engine/mr_table.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>

namespace ibemu::engine {

uint32_t MrTable::add(uint32_t pd, uint8_t* addr, uint64_t iova, uint64_t length, uint32_t access,
                      std::shared_ptr<DeviceMemory> device) {
  std::unique_lock lock(mutex_);
  if (full(length)) return 0;
  const uint32_t index = unused_index();
  const uint32_t key = index << 8 | (random_bits() & 0xff);
  MemoryRegion& mr = regions_[index];
  mr = MemoryRegion{key, key, pd, iova, addr, length, access, 0, std::move(device)};
  registered_bytes_ += length;
  return key;
}

int MrTable::add_with_key(uint32_t key, uint32_t pd, uint8_t* addr, uint64_t iova, uint64_t length,
                          uint32_t access, std::shared_ptr<DeviceMemory> device) {
  return insert_with_key(
      key, MemoryRegion{key, key, pd, iova, addr, length, access, 0, std::move(device)});
}

int MrTable::insert_with_key(uint32_t key, MemoryRegion mr) {
  if (key >> 8 == 0) return EINVAL;
  std::unique_lock lock(mutex_);
  if (full(0)) return ENOMEM;
  if (!indices_.insert(key >> 8).second) return EEXIST;
  mr.counts_bytes = false;
  regions_[key >> 8] = std::move(mr);
  return 0;
}

MemoryRegion* MrTable::region(uint32_t key) {
  auto it = regions_.find(key >> 8);
  return it == regions_.end() || it->second.lkey != key ? nullptr : &it->second;
}

const MemoryRegion* MrTable::region(uint32_t key) const {
  return const_cast<MrTable*>(this)->region(key);
}

void MrTable::set_limits(size_t objects, uint64_t bytes) {
  std::unique_lock lock(mutex_);
  max_objects_ = objects;
  max_bytes_ = bytes;
}

uint32_t MrTable::random_bits() noexcept {
  uint32_t v = 0;
  while (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
  }
  return v;
}

// Random indices: a peer cannot derive one key from another. Regions and
// windows share the index space, so an rkey names one object only; index 0
// is never used (0 is never a key).
uint32_t MrTable::unused_index() {
  uint32_t index;
  do {
    index = random_bits() >> 8;
  } while (index == 0 || indices_.count(index));
  indices_.insert(index);
  return index;
}

int MrTable::remove(uint32_t key, MemoryRegion* removed) {
  std::shared_ptr<std::atomic<uint32_t>> in_flight;
  {
    std::unique_lock lock(mutex_);
    auto it = regions_.find(key >> 8);
    if (it == regions_.end() || it->second.lkey != key) return EINVAL;
    if (it->second.bound_windows) return EBUSY;
    if (removed) *removed = it->second;
    in_flight = erase(it);
  }
  wait_idle(*in_flight);
  return 0;
}

std::shared_ptr<std::atomic<uint32_t>> MrTable::erase(
    std::unordered_map<uint32_t, MemoryRegion>::iterator it) {
  std::shared_ptr<std::atomic<uint32_t>> in_flight = it->second.in_flight;
  if (it->second.counts_bytes) registered_bytes_ -= it->second.length;
  indices_.erase(it->first);
  regions_.erase(it);
  return in_flight;
}

// No new access can find the region now; those already under way finish (a
// packet's copy) before the owner may free or reuse the memory.
void MrTable::wait_idle(const std::atomic<uint32_t>& in_flight) {
  while (in_flight.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

bool MrTable::modify(uint32_t key, const uint32_t* pd, uint8_t* const* addr, const uint64_t* iova,
                     const uint64_t* length, const uint32_t* access) {
  std::unique_lock lock(mutex_);
  MemoryRegion* found = region(key);
  if (!found) return false;
  MemoryRegion& mr = *found;
  if (mr.bound_windows) return false;  // windows translate through it
  if (length && !mr.counts_bytes) return false;
  if (length && max_bytes_ && registered_bytes_ - mr.length + *length > max_bytes_) return false;
  if (pd) mr.pd = *pd;
  if (addr) mr.addr = *addr;
  if (iova) mr.iova = *iova;
  if (length) {
    registered_bytes_ = registered_bytes_ - mr.length + *length;
    mr.length = *length;
  }
  if (access) mr.access = *access;
  return true;
}

size_t MrTable::size() const {
  std::shared_lock lock(mutex_);
  return regions_.size();
}

bool MrTable::find_region(uint32_t key, MemoryRegion* out) const {
  std::shared_lock lock(mutex_);
  const MemoryRegion* mr = region(key);
  if (!mr) return false;
  *out = *mr;
  return true;
}

MrCheck MrTable::check(uint32_t key, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                       MemorySpan* out) const {
  std::shared_lock lock(mutex_);
  const MemoryRegion* found = region(key);
  // A free fast-registration region opens to no key.
  if (!found || !found->valid) return MrCheck::kBadKey;
  const MemoryRegion& mr = *found;
  if (mr.pd != pd) return MrCheck::kBadPd;
  if (!within(mr.iova, mr.length, va, len)) return MrCheck::kOutOfBounds;
  if ((mr.access & need) != need) return MrCheck::kNoAccess;
  // In integers: a device region's address may be a number with no object
  // behind it here (a kernel DMA MR's base is 0).
  auto* at = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(mr.addr) + (va - mr.iova));
  *out = MemorySpan{at, mr.device.get(), mr.in_flight.get()};
  return MrCheck::kOk;
}

MrCheck MrTable::local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len, uint32_t need,
                       MemorySpan* out) const {
  return check(lkey, pd, addr, len, need, out);
}

MrCheck MrTable::remote(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                        uint32_t need, MemorySpan* out) const {
  MrCheck c = check(rkey, pd, va, len, need, out);
  return c == MrCheck::kBadKey ? check_window(rkey, pd, qpn, va, len, need, out) : c;
}

namespace {
MrCheck host_only(MrCheck c, const MemorySpan& span, uint8_t** out) {
  if (c != MrCheck::kOk) return c;
  if (span.on_device()) return MrCheck::kNoAccess;
  *out = span.addr;
  return c;
}
}  // namespace

MrCheck MrTable::local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len, uint32_t need,
                       uint8_t** out) const {
  MemorySpan span;
  return host_only(local(lkey, pd, addr, len, need, &span), span, out);
}

MrCheck MrTable::remote(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                        uint32_t need, uint8_t** out) const {
  MemorySpan span;
  return host_only(remote(rkey, pd, qpn, va, len, need, &span), span, out);
}

std::unordered_map<std::string, uint32_t> MrTable::device_regions() const {
  std::shared_lock lock(mutex_);
  std::unordered_map<std::string, uint32_t> out;
  for (const auto& [key, mr] : regions_)
    if (mr.device) ++out[mr.device->kind()];
  return out;
}

std::vector<MrSnapshot> MrTable::snapshot(size_t limit) const {
  std::vector<MrSnapshot> out;
  {
    std::shared_lock lock(mutex_);
    out.reserve(regions_.size());
    for (const auto& [key, mr] : regions_)
      out.push_back({mr.lkey, mr.rkey, mr.pd, mr.iova, mr.length, mr.access, mr.device != nullptr});
  }
  std::sort(out.begin(), out.end(),
            [](const MrSnapshot& a, const MrSnapshot& b) { return a.lkey < b.lkey; });
  if (out.size() > limit) out.resize(limit);
  return out;
}

namespace {
// Walks the SGEs from message offset `offset` for `len` bytes, calling
// fn(span, flat_pos, n) for each contiguous piece; fn returns false when the
// memory refused the access (a device region whose memory went away).
template <typename Fn>
MrCheck for_each_piece(const MrTable& mrs, uint32_t pd, const Sge* sges, int num_sge,
                       uint64_t offset, uint32_t len, uint32_t need, Fn fn) {
  uint32_t done = 0;
  for (int i = 0; i < num_sge && done < len; ++i) {
    const Sge& s = sges[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(s.length - offset, len - done));
    MemorySpan span;
    MrCheck c = mrs.local(s.lkey, pd, s.addr + offset, n, need, &span);
    if (c != MrCheck::kOk) return c;
    if (!fn(span, done, n)) return MrCheck::kNoAccess;
    done += n;
    offset = 0;
  }
  return done == len ? MrCheck::kOk : MrCheck::kOutOfBounds;
}
}  // namespace

MrCheck copy_to_sges(const MrTable& mrs, uint32_t pd, const Sge* sges, int num_sge, uint64_t offset,
                     const uint8_t* src, uint32_t len) {
  return for_each_piece(mrs, pd, sges, num_sge, offset, len, kAccessLocalWrite,
                        [src](const MemorySpan& span, uint32_t pos, uint32_t n) {
                          return span.write(0, src + pos, n);
                        });
}

MrCheck copy_from_sges(const MrTable& mrs, uint32_t pd, const Sge* sges, int num_sge,
                       uint64_t offset, uint8_t* dst, uint32_t len) {
  return for_each_piece(mrs, pd, sges, num_sge, offset, len, 0,
                        [dst](const MemorySpan& span, uint32_t pos, uint32_t n) {
                          return span.read(0, dst + pos, n);
                        });
}

}  // namespace ibemu::engine
