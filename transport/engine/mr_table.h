#pragma once
// Memory regions of one HCA context: the keys a responder checks (IBA 10.6.3.2:
// key, PD, bounds, access) before it touches memory. Registration happens on
// application threads while the progress thread looks keys up, hence the
// reader/writer lock; lookups never allocate.
#include <cstdint>
#include <cstring>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "transport/engine/device_memory.h"
#include "transport/engine/snapshot.h"
#include "transport/engine/types.h"

namespace ibemu::engine {

struct MemoryRegion {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t pd = 0;
  uint64_t iova = 0;        // the address the peer uses (== addr unless rereg'd / zero-based)
  uint8_t* addr = nullptr;  // where the bytes are in this process (or on `device`)
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t bound_windows = 0;            // deregistration waits until none is bound (C10-?)
  std::shared_ptr<DeviceMemory> device;  // set for GPU memory: accessed by copies
  // Spans onto the region that are in use (MemorySpan); removal waits for 0.
  std::shared_ptr<std::atomic<uint32_t>> in_flight = std::make_shared<std::atomic<uint32_t>>(0);
  bool counts_bytes = true;  // against the byte limit (add_with_key's do not)
  // A fast-registration region (alloc_fast_reg): free (no key opens it)
  // until a REG_MR WQE makes it valid, and free again once invalidated.
  bool fast_reg = false;
  bool valid = true;
};

/// A memory window (IBA 10.6.7): a remote key onto part of a region, bound
/// and invalidated by work requests on a send queue. Its rkey is an index
/// (upper 24 bits, fixed at allocation) and a key byte the consumer chooses at
/// each bind (ibv_inc_rkey).
struct MemoryWindow {
  uint32_t rkey = 0;
  uint32_t pd = 0;
  uint8_t type = 1;  // 1 or 2 (type 2B: tied to the QP that bound it)
  bool bound = false;
  uint32_t qpn = 0;     // type 2: the QP it was bound through
  uint32_t mr_key = 0;  // the region it lies in
  uint64_t va = 0;      // first address the peer uses (0 when zero-based)
  uint64_t length = 0;
  uint64_t mr_offset = 0;  // where va lands in the region
  uint32_t access = 0;
};

/// Whether [va, va+len) lies within [base, base+size), without overflow for
/// any value (IBA 10.6.3.2 bounds; a zero-length access may sit at the end).
inline bool within(uint64_t base, uint64_t size, uint64_t va, uint64_t len) {
  return va >= base && va - base <= size && len <= size - (va - base);
}

/// Why a memory access was refused; the caller maps it to its WC status/NAK.
enum class MrCheck : uint8_t { kOk, kBadKey, kBadPd, kOutOfBounds, kNoAccess };

class MrTable {
 public:
  /// At most `objects` regions and windows together (the device's max_mr),
  /// and at most `bytes` registered (0: no limit; the daemon's config
  /// limits.registered_bytes_per_context).
  void set_limits(size_t objects, uint64_t bytes);
  /// Registers a region; returns its key (lkey == rkey, as on ConnectX), or
  /// 0 when a limit would be passed (ENOMEM for the caller).
  /// With `device`, `addr` is an address on that device.
  uint32_t add(uint32_t pd, uint8_t* addr, uint64_t iova, uint64_t length, uint32_t access,
               std::shared_ptr<DeviceMemory> device = nullptr);
  /// Registers a region under a key its owner chose (ibemu.ko numbers
  /// kernel consumers' MRs itself): 0, EEXIST (the key's index is taken),
  /// EINVAL (key 0) or ENOMEM (a limit). Its length does not count against
  /// the byte limit: a kernel DMA MR spans the whole address space.
  int add_with_key(uint32_t key, uint32_t pd, uint8_t* addr, uint64_t iova, uint64_t length,
                   uint32_t access, std::shared_ptr<DeviceMemory> device);
  /// 0, EINVAL (no such region) or EBUSY (windows are bound to it); the
  /// region removed is copied to `removed` when given. Returns once no
  /// access through the region is in flight: the memory may go after it.
  int remove(uint32_t key, MemoryRegion* removed = nullptr);

  // Fast registration (kernel consumers' FRWR: ib_alloc_mr, IB_WR_REG_MR,
  // IB_WR_LOCAL_INV), in the spirit of IBA's base memory management
  // extensions: a region allocated free whose translation, bounds, access
  // and key byte each registration sets, and whose key an invalidation
  // takes back.
  /// A free fast-registration region under the key its owner chose (the
  /// module's index; any key byte), reached through `device`: 0, EEXIST,
  /// EINVAL (key 0) or ENOMEM, as add_with_key.
  int alloc_fast_reg(uint32_t key, uint32_t pd, std::shared_ptr<DeviceMemory> device);
  /// Takes the region `key` names by its index, whatever its key byte now
  /// (the owner's handle), valid or free: 0 or EINVAL. Returns once no access
  /// through it is in flight, as remove.
  int free_fast_reg(uint32_t key);
  /// A REG_MR WQE of a QP of `pd`: the free region fr.key's index names
  /// becomes valid under fr.key; its device is bound to fr.mapping. kBadKey
  /// (no such fast-registration region, or it is valid), kBadPd, kNoAccess
  /// (access it cannot grant).
  MrCheck fast_register(const FastReg& fr, uint32_t pd);
  /// LOCAL_INV (qpn 0) or SEND with Invalidate arriving on QP `qpn`: the key
  /// of a valid fast-registration region of `pd`, or of a type 2 window (a
  /// remote one bound through `qpn`), opens nothing from now on. A region's
  /// accesses in flight finish first: once its invalidation has completed
  /// the consumer may unmap the memory.
  MrCheck invalidate(uint32_t key, uint32_t pd, uint32_t qpn);
  /// ibv_rereg_mr: changes translation, PD and/or access of a region in
  /// place; its key stays. Fields not flagged are kept. False if no such
  /// key, or a new length would pass the byte limit.
  bool modify(uint32_t key, const uint32_t* pd, uint8_t* const* addr, const uint64_t* iova,
              const uint64_t* length, const uint32_t* access);
  size_t size() const;
  /// The region a key names, if any (a copy: ibv_rereg_mr's checks).
  bool find_region(uint32_t key, MemoryRegion* out) const;

  /// Checks a local access through an lkey (an SGE) and returns where it lands.
  MrCheck local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len, uint32_t need_access,
                MemorySpan* out) const;
  /// Checks a remote access through an rkey (RETH / AtomicETH) arriving on
  /// QP `qpn`: the key names a region or a bound window.
  MrCheck remote(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                 uint32_t need_access, MemorySpan* out) const;
  /// The same for host memory only (tests): a device region is kNoAccess.
  MrCheck local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t len, uint32_t need_access,
                uint8_t** out) const;
  MrCheck remote(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                 uint32_t need_access, uint8_t** out) const;
  /// How many regions are on devices, by kind ("cuda:0": 2), for status.
  std::unordered_map<std::string, uint32_t> device_regions() const;
  /// Up to `limit` regions by ascending key, for `ibemu status`.
  std::vector<MrSnapshot> snapshot(size_t limit) const;

  // Memory windows (memory_windows.cc).
  /// Allocates an unbound window of type 1 or 2; returns its rkey, or 0 at
  /// the object limit.
  uint32_t alloc_window(uint32_t pd, uint8_t type);
  /// False if no such window.
  bool free_window(uint32_t rkey);
  /// Binds a window through QP `qpn` of protection domain `pd` (IBA 10.6.7.2).
  MrCheck bind_window(const WindowBind& bind, uint32_t pd, uint32_t qpn);
  /// The window an rkey names, if any (a copy: tests and diagnostics).
  bool find_window(uint32_t rkey, MemoryWindow* out) const;

 private:
  MrCheck check(uint32_t key, uint32_t pd, uint64_t va, uint64_t len, uint32_t need,
                MemorySpan* out) const;
  MrCheck check_window(uint32_t rkey, uint32_t pd, uint32_t qpn, uint64_t va, uint64_t len,
                       uint32_t need, MemorySpan* out) const;
  /// Invalidates a type 2 window: locally (qpn 0) any of the PD's, remotely
  /// (SEND with Invalidate) only one bound through the receiving QP. Under
  /// mutex_.
  MrCheck invalidate_window(uint32_t rkey, uint32_t pd, uint32_t qpn);
  /// The region `key` names: its index finds it and the whole key matches.
  MemoryRegion* region(uint32_t key);
  const MemoryRegion* region(uint32_t key) const;
  int insert_with_key(uint32_t key, MemoryRegion mr);
  /// Erases the region at `it`; returns its in-flight count to wait on.
  std::shared_ptr<std::atomic<uint32_t>> erase(
      std::unordered_map<uint32_t, MemoryRegion>::iterator it);
  static void wait_idle(const std::atomic<uint32_t>& in_flight);
  uint32_t unused_index();
  void unbind(MemoryWindow& mw);

  mutable std::shared_mutex mutex_;
  // By index (key >> 8): a key's index finds its region as an HCA's
  // translation table does, and the key byte must match.
  std::unordered_map<uint32_t, MemoryRegion> regions_;
  std::unordered_map<uint32_t, MemoryWindow> windows_;  // by index (rkey >> 8)
  std::unordered_set<uint32_t> indices_;                // key >> 8 of every key handed out
  size_t max_objects_ = DeviceLimits::kMaxMr;
  uint64_t max_bytes_ = 0;
  uint64_t registered_bytes_ = 0;
  bool full(uint64_t more_bytes) const {
    return regions_.size() + windows_.size() >= max_objects_ ||
           (max_bytes_ && registered_bytes_ + more_bytes > max_bytes_);
  }
  /// Key bits from the kernel's CSPRNG: a peer that saw some keys of a
  /// process learns nothing of its others (a seeded PRNG's state can be
  /// recovered from its outputs).
  static uint32_t random_bits() noexcept;
};

/// Copies between an SGE list and a flat buffer, checking each SGE's lkey.
/// `offset` is the byte position in the message. Returns kOk or the first failure.
MrCheck copy_to_sges(const MrTable& mrs, uint32_t pd, const Sge* sges, int num_sge, uint64_t offset,
                     const uint8_t* src, uint32_t len);
MrCheck copy_from_sges(const MrTable& mrs, uint32_t pd, const Sge* sges, int num_sge,
                       uint64_t offset, uint8_t* dst, uint32_t len);

}  // namespace ibemu::engine
