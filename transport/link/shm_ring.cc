#include "transport/link/shm_ring.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "transport/link/sealed_memfd.h"

namespace ibemu::link {

// A slot's state word: the position it serves (bits 2-63) and its phase.
// A slot serves positions i, i + slot_count, i + 2 * slot_count, ...; the
// consumer hands it on to the next of them when it pops.
struct ShmRing::Slot {
  std::atomic<uint64_t> state;
  uint32_t len;
  uint32_t kind;
  uint8_t data[];
};
static_assert(sizeof(std::atomic<uint64_t>) + 8 == kSlotHeader);

namespace {

enum Phase : uint64_t { kFree = 0, kWriting = 1, kReady = 2 };
constexpr uint64_t state_of(uint64_t pos, Phase phase) { return pos << 2 | phase; }
constexpr uint64_t position_of(uint64_t state) { return state >> 2; }

// How many slots a producer looks at before it calls the ring full: other
// producers claim slots meanwhile, and a tampered ring must not hold it.
constexpr int kPushAttempts = 64;

size_t header_bytes() { return (sizeof(RingHeader) + 4095) & ~size_t{4095}; }

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

}  // namespace

ShmRing::~ShmRing() {
  if (hdr_) munmap(hdr_, map_len_);
  if (fd_ >= 0) close(fd_);
}

ShmRing::Slot* ShmRing::slot(uint64_t pos) const noexcept {
  return reinterpret_cast<Slot*>(reinterpret_cast<uint8_t*>(hdr_) + header_bytes() +
                                 (pos % slot_count_) * size_t{slot_size_});
}

int ShmRing::create(uint32_t slot_size, uint32_t slot_count) noexcept {
  slot_size = (std::max(slot_size, kSlotHeader) + 63) & ~63u;
  size_t len = header_bytes() + size_t{slot_size} * slot_count;
  int fd = create_sealed_memfd("ibemu-inbox", len);
  if (fd < 0) return -fd;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    return err;
  }
  hdr_ = new (p) RingHeader{};
  hdr_->slot_size = slot_size;
  hdr_->slot_count = slot_count;
  fd_ = fd;
  map_len_ = len;
  slot_size_ = slot_size;
  slot_count_ = slot_count;
  for (uint64_t i = 0; i < slot_count; ++i)
    new (&slot(i)->state) std::atomic<uint64_t>(state_of(i, kFree));
  std::atomic_thread_fence(std::memory_order_release);
  hdr_->magic = RingHeader::kMagic;
  return 0;
}

int ShmRing::attach(int fd) noexcept {
  const long size = sealed_memfd_size(fd);
  if (size < 0) return static_cast<int>(-size);
  if (static_cast<size_t>(size) < header_bytes()) return EINVAL;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno;
  auto* h = static_cast<RingHeader*>(p);
  // The ring comes from another process: its geometry is read once, here.
  const uint32_t slot_size = h->slot_size;
  const uint32_t slot_count = h->slot_count;
  if (h->magic != RingHeader::kMagic || slot_count == 0 || slot_size < kSlotHeader ||
      slot_size % 64 != 0 ||
      header_bytes() + size_t{slot_size} * slot_count > static_cast<size_t>(size)) {
    munmap(p, size);
    return EINVAL;
  }
  hdr_ = h;
  fd_ = fd;
  map_len_ = size;
  slot_size_ = slot_size;
  slot_count_ = slot_count;
  return 0;
}

bool ShmRing::push(const uint8_t* data, size_t len, SlotKind kind) noexcept {
  if (!fits(len)) return false;
  uint64_t pos = hdr_->tail.load(std::memory_order_acquire);
  for (int attempt = 0; attempt < kPushAttempts; ++attempt) {
    Slot* s = slot(pos);
    uint64_t state = s->state.load(std::memory_order_acquire);
    if (state == state_of(pos, kFree)) {
      if (!s->state.compare_exchange_strong(state, state_of(pos, kWriting),
                                            std::memory_order_acq_rel))
        continue;  // another producer took it: look again
      uint64_t expected = pos;
      hdr_->tail.compare_exchange_strong(expected, pos + 1, std::memory_order_release);
      s->len = static_cast<uint32_t>(len);
      s->kind = static_cast<uint32_t>(kind);
      std::memcpy(s->data, data, len);
      uint64_t writing = state_of(pos, kWriting);
      // Fails only when the consumer gave the slot up as abandoned
      // meanwhile (this producer stalled for that long): not delivered.
      if (!s->state.compare_exchange_strong(writing, state_of(pos, kReady),
                                            std::memory_order_seq_cst))
        return false;
      if (hdr_->consumer_sleeping.load(std::memory_order_seq_cst)) wake();
      return true;
    }
    const uint64_t served = position_of(state);
    if (served == pos) {
      // Claimed by another producer: help the tail on and try the next slot.
      uint64_t expected = pos;
      hdr_->tail.compare_exchange_strong(expected, pos + 1, std::memory_order_release);
      ++pos;
    } else if (served < pos) {
      return false;  // still holds an older packet the consumer has not taken: full
    } else {
      pos = hdr_->tail.load(std::memory_order_acquire);  // the tail moved on
    }
  }
  return false;
}

const uint8_t* ShmRing::peek(size_t* len, SlotKind* kind) noexcept {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  Slot* s = slot(head);
  const uint64_t state = s->state.load(std::memory_order_acquire);
  if (state == state_of(head, kReady)) {
    claimed_seen_ = {};
    if (kind) *kind = static_cast<SlotKind>(s->kind);
    *len = std::min<size_t>(s->len, slot_size_ - kSlotHeader);
    return s->data;
  }
  if (state != state_of(head, kWriting)) return nullptr;
  // A producer is copying, or died copying: give the slot up only after
  // far longer than any copy takes.
  const auto now = std::chrono::steady_clock::now();
  if (claimed_seen_ == std::chrono::steady_clock::time_point{}) claimed_seen_ = now;
  if (now - claimed_seen_ < abandon_after_) return nullptr;
  uint64_t expected = state;
  if (s->state.compare_exchange_strong(expected, state_of(head + slot_count_, kFree),
                                       std::memory_order_acq_rel)) {
    ++abandoned_;
    head_.store(head + 1, std::memory_order_release);
    hdr_->consumed.store(head + 1, std::memory_order_release);
  }
  claimed_seen_ = {};
  return peek(len, kind);
}

void ShmRing::pop() noexcept {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  slot(head)->state.store(state_of(head + slot_count_, kFree), std::memory_order_release);
  head_.store(head + 1, std::memory_order_release);
  hdr_->consumed.store(head + 1, std::memory_order_release);
}

uint64_t ShmRing::oldest_pending() const noexcept {
  const uint64_t head = head_.load(std::memory_order_acquire);
  return slot(head)->state.load(std::memory_order_acquire) == state_of(head, kReady) ? head
                                                                                     : kEmpty;
}

uint64_t ShmRing::consumed_hint() const noexcept {
  return hdr_->consumed.load(std::memory_order_acquire);
}

void ShmRing::wait(int64_t timeout_ns, bool announce) noexcept {
  uint32_t seq = hdr_->wake_seq.load(std::memory_order_acquire);
  timespec ts{};
  const timespec* tsp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1000000000;
    ts.tv_nsec = timeout_ns % 1000000000;
    tsp = &ts;
  }
  if (!announce) {
    futex(&hdr_->wake_seq, FUTEX_WAIT, seq, tsp);
    return;
  }
  hdr_->consumer_sleeping.store(1, std::memory_order_seq_cst);
  // Re-check after announcing sleep: a producer that published before it saw
  // the flag will not wake us (the Dekker pair with push()).
  const uint64_t head = head_.load(std::memory_order_relaxed);
  if (slot(head)->state.load(std::memory_order_seq_cst) != state_of(head, kReady))
    futex(&hdr_->wake_seq, FUTEX_WAIT, seq, tsp);
  hdr_->consumer_sleeping.store(0, std::memory_order_relaxed);
}

void ShmRing::wake() noexcept {
  hdr_->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&hdr_->wake_seq, FUTEX_WAKE, 1, nullptr);
}

}  // namespace ibemu::link
