#pragma once
// A multi-producer, single-consumer packet ring in shared memory: the inbox of
// one HCA context. Any process that the daemon introduces may append whole
// packets; only the owning context's progress thread consumes them.
//
// Producers serialize on a robust process-shared mutex, so a producer killed
// mid-copy leaves no half-written packet (the tail moves only after the copy).
//
// A producer trusts nothing in the ring but what it checked when it mapped
// it: the memfd's size is sealed, the geometry is copied out of the header
// once, and the lock is waited for a bounded time. A consumer that rewrites
// its header or holds the lock can lose its own packets, never make a
// producer (the daemon among them) write out of bounds or hang.
// The consumer needs no lock. It sleeps on a futex in the ring; producers wake
// it only when it said it sleeps.
#include <pthread.h>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ibemu::link {

struct RingHeader {
  static constexpr uint64_t kMagic = 0x676e6952'554d4542ull;  // "BEMURing"
  uint64_t magic;
  uint32_t slot_size;
  uint32_t slot_count;
  pthread_mutex_t producer_lock;
  alignas(64) std::atomic<uint64_t> tail;  // next slot producers fill
  alignas(64) std::atomic<uint64_t> head;  // next slot the consumer reads
  alignas(64) std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> wake_seq;  // futex word
  std::atomic<uint64_t> dropped;   // packets producers gave up on: the ring stayed full
};

/// Slot: 4-byte length, 4-byte kind, then the packet or message.
inline constexpr uint32_t kSlotHeader = 8;

/// What a slot holds: an IBA packet, or a message between contexts of one
/// HCA (transport/engine/context_link.h).
enum class SlotKind : uint32_t { kPacket = 0, kMessage = 1 };

class ShmRing {
 public:
  ShmRing() = default;
  ~ShmRing();
  ShmRing(const ShmRing&) = delete;
  ShmRing& operator=(const ShmRing&) = delete;

  /// Creates a new ring in a fresh memfd (the consumer side). Returns 0 or errno.
  int create(uint32_t slot_size, uint32_t slot_count) noexcept;
  /// Maps a ring someone else created (a producer). Validates the header.
  int attach(int fd) noexcept;
  int fd() const { return fd_; }

  /// Producer: appends one packet; false when the ring is full or len too big.
  bool push(const uint8_t* data, size_t len, SlotKind kind = SlotKind::kPacket) noexcept;
  /// Producer: appends one packet, waiting while the ring is full and its
  /// consumer drains it. Gives up (and counts a drop) once the consumer took
  /// nothing for `stuck` (a consumer that is itself waiting to push into a
  /// full ring of this producer's would otherwise never take it), or after
  /// `at_most` in all (0: no such bound).
  bool push_waiting(const uint8_t* data, size_t len, SlotKind kind, std::chrono::nanoseconds stuck,
                    std::chrono::nanoseconds at_most = {}) noexcept;

  /// Consumer: the next packet, or nullptr when empty. Call pop() after use.
  const uint8_t* peek(size_t* len, SlotKind* kind = nullptr) noexcept;
  void pop() noexcept;
  /// Consumer: sleeps until a producer pushes, wake() is called, or
  /// timeout_ns passes (<0: no timeout). With announce false, producers are
  /// not asked to wake the consumer (someone else is draining the ring).
  void wait(int64_t timeout_ns, bool announce = true) noexcept;
  /// Wakes the consumer (shutdown, or new timers).
  void wake() noexcept;

  uint64_t dropped() const { return hdr_ ? hdr_->dropped.load() : 0; }
  /// How long a producer waits for the lock before it gives up on a push.
  static constexpr std::chrono::milliseconds kLockPatience{50};
  /// Anyone: the position of the oldest unconsumed packet, or kEmpty. The
  /// same value seen twice some time apart means nobody consumed meanwhile.
  static constexpr uint64_t kEmpty = ~0ull;
  uint64_t oldest_pending() const noexcept {
    const uint64_t head = hdr_->head.load(std::memory_order_relaxed);
    return head == hdr_->tail.load(std::memory_order_acquire) ? kEmpty : head;
  }

 private:
  uint8_t* slot(uint64_t pos) const noexcept;

  bool lock_producers() noexcept;

  int fd_ = -1;
  RingHeader* hdr_ = nullptr;
  size_t map_len_ = 0;
  // The geometry as validated when mapped; the header's copy is the owner's.
  uint32_t slot_size_ = 0;
  uint32_t slot_count_ = 0;
};

}  // namespace ibemu::link
