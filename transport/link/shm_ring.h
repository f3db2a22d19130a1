#pragma once
// A multi-producer, single-consumer packet ring in shared memory: the inbox of
// one HCA context. Any process that the daemon introduces may append whole
// packets; only the owning context consumes them.
//
// No lock lives in the ring. Each slot starts with a state word that names
// the position the slot serves and its phase (free, being written, ready);
// a producer claims the slot at the tail with one compare-and-swap on that
// word, copies, and marks it ready. A producer killed mid-copy leaves one
// slot being written: the consumer waits for it a while (a live producer
// finishes in microseconds) and then gives it up.
//
// A producer trusts nothing in the ring but what it checked when it mapped
// it: the memfd's size is sealed, the geometry is copied out of the header
// once, every slot is found from the validated geometry, and every loop over
// shared words is bounded. A ring owner that rewrites its header or its
// state words loses its own packets; it cannot make a producer (the daemon
// among them) write out of bounds, hang, or touch any memory but the ring's.
// Likewise the consumer steers by its own position, never by a word that a
// producer wrote, apart from the one state word it checks exactly.
// The consumer sleeps on a futex in the ring; producers wake it only when it
// said it sleeps. A forged futex word costs the owner its own wake-ups.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ibemu::link {

struct RingHeader {
  static constexpr uint64_t kMagic = 0x32676e52'554d4542ull;  // "BEMURng2"
  uint64_t magic;
  uint32_t slot_size;
  uint32_t slot_count;
  // Where producers look first; a hint only (the slots' states decide).
  alignas(64) std::atomic<uint64_t> tail;
  // Packets the consumer has taken; producers read it only to see progress.
  alignas(64) std::atomic<uint64_t> consumed;
  alignas(64) std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> wake_seq;  // futex word
};

/// Slot: 8-byte state word, 4-byte length, 4-byte kind, then the packet or message.
inline constexpr uint32_t kSlotHeader = 16;

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

  /// Whether a packet of `len` bytes fits a slot.
  bool fits(size_t len) const noexcept { return len <= slot_size_ - kSlotHeader; }
  /// Producer: appends one packet; false when the ring is full (or looks
  /// full: a tampered ring), or len too big. Never waits.
  bool push(const uint8_t* data, size_t len, SlotKind kind = SlotKind::kPacket) noexcept;

  /// Consumer: the next packet, or nullptr when none is ready. Call pop() after use.
  const uint8_t* peek(size_t* len, SlotKind* kind = nullptr) noexcept;
  void pop() noexcept;
  /// Consumer: sleeps until a producer pushes, wake() is called, or
  /// timeout_ns passes (<0: no timeout). With announce false, producers are
  /// not asked to wake the consumer (someone else is draining the ring).
  void wait(int64_t timeout_ns, bool announce = true) noexcept;
  /// Wakes the consumer (shutdown, or new timers).
  void wake() noexcept;

  /// Consumer: how long a slot a producer claimed may stay unwritten before
  /// the consumer gives it up (its producer died mid-copy).
  void set_abandon_after(std::chrono::nanoseconds t) { abandon_after_ = t; }
  /// Consumer: slots given up so far.
  uint64_t abandoned() const { return abandoned_; }

  /// The consumer's process, any thread: the position of the oldest packet
  /// waiting, or kEmpty. The same value seen twice some time apart means
  /// nobody consumed meanwhile.
  static constexpr uint64_t kEmpty = ~0ull;
  uint64_t oldest_pending() const noexcept;
  /// Producer: how many packets the consumer has taken, as far as this
  /// producer can tell (it changes when the consumer makes progress).
  uint64_t consumed_hint() const noexcept;

 private:
  struct Slot;
  Slot* slot(uint64_t pos) const noexcept;

  int fd_ = -1;
  RingHeader* hdr_ = nullptr;
  size_t map_len_ = 0;
  // The geometry as validated when mapped; the header's copy is the owner's.
  uint32_t slot_size_ = 0;
  uint32_t slot_count_ = 0;
  // Consumer: the next position to read (its own, never read from the ring).
  std::atomic<uint64_t> head_{0};
  std::chrono::nanoseconds abandon_after_{std::chrono::seconds(1)};
  std::chrono::steady_clock::time_point claimed_seen_{};  // the head slot seen claimed since
  uint64_t abandoned_ = 0;
};

}  // namespace ibemu::link
