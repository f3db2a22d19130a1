#include "transport/link/shm_ring.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "transport/link/sealed_memfd.h"

namespace ibemu::link {

namespace {

size_t header_bytes() { return (sizeof(RingHeader) + 4095) & ~size_t{4095}; }

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

}  // namespace

ShmRing::~ShmRing() {
  if (hdr_) munmap(hdr_, map_len_);
  if (fd_ >= 0) close(fd_);
}

uint8_t* ShmRing::slot(uint64_t pos) const noexcept {
  return reinterpret_cast<uint8_t*>(hdr_) + header_bytes() +
         (pos % slot_count_) * size_t{slot_size_};
}

int ShmRing::create(uint32_t slot_size, uint32_t slot_count) noexcept {
  slot_size = (slot_size + 63) & ~63u;
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
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&hdr_->producer_lock, &attr);
  pthread_mutexattr_destroy(&attr);
  std::atomic_thread_fence(std::memory_order_release);
  hdr_->magic = RingHeader::kMagic;
  fd_ = fd;
  map_len_ = len;
  slot_size_ = slot_size;
  slot_count_ = slot_count;
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

bool ShmRing::lock_producers() noexcept {
  // Tries and yields rather than a timed lock: a lock is held for one copy,
  // the monotonic clock is immune to clock steps, and ThreadSanitizer knows
  // trylock (it does not know pthread_mutex_clocklock).
  const auto deadline = std::chrono::steady_clock::now() + kLockPatience;
  for (;;) {
    const int rc = pthread_mutex_trylock(&hdr_->producer_lock);
    if (rc == 0) return true;
    if (rc == EOWNERDEAD) {
      // A producer died holding the lock; its packet was never published.
      pthread_mutex_consistent(&hdr_->producer_lock);
      return true;
    }
    if (rc != EBUSY || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
}

bool ShmRing::push(const uint8_t* data, size_t len, SlotKind kind) noexcept {
  if (len > slot_size_ - kSlotHeader) return false;
  if (!lock_producers()) return false;
  uint64_t tail = hdr_->tail.load(std::memory_order_relaxed);
  uint64_t head = hdr_->head.load(std::memory_order_acquire);
  if (tail - head >= slot_count_) {
    pthread_mutex_unlock(&hdr_->producer_lock);
    return false;
  }
  uint8_t* s = slot(tail);
  uint32_t len32 = static_cast<uint32_t>(len);
  std::memcpy(s, &len32, sizeof(len32));
  std::memcpy(s + sizeof(len32), &kind, sizeof(kind));
  std::memcpy(s + kSlotHeader, data, len);
  hdr_->tail.store(tail + 1, std::memory_order_seq_cst);
  pthread_mutex_unlock(&hdr_->producer_lock);
  if (hdr_->consumer_sleeping.load(std::memory_order_seq_cst)) wake();
  return true;
}

const uint8_t* ShmRing::peek(size_t* len, SlotKind* kind) noexcept {
  uint64_t head = hdr_->head.load(std::memory_order_relaxed);
  if (head == hdr_->tail.load(std::memory_order_acquire)) return nullptr;
  const uint8_t* s = slot(head);
  uint32_t len32;
  std::memcpy(&len32, s, sizeof(len32));
  if (kind) std::memcpy(kind, s + sizeof(len32), sizeof(*kind));
  *len = std::min<size_t>(len32, slot_size_ - kSlotHeader);
  return s + kSlotHeader;
}

void ShmRing::pop() noexcept { hdr_->head.fetch_add(1, std::memory_order_release); }

void ShmRing::wait(int64_t timeout_ns, bool announce) noexcept {
  uint32_t seq = hdr_->wake_seq.load(std::memory_order_acquire);
  if (!announce) {
    timespec ts{timeout_ns / 1000000000, timeout_ns % 1000000000};
    futex(&hdr_->wake_seq, FUTEX_WAIT, seq, timeout_ns >= 0 ? &ts : nullptr);
    return;
  }
  hdr_->consumer_sleeping.store(1, std::memory_order_seq_cst);
  // Re-check after announcing sleep: a producer that published before it saw
  // the flag will not wake us (the Dekker pair with push()).
  if (hdr_->head.load(std::memory_order_relaxed) == hdr_->tail.load(std::memory_order_seq_cst)) {
    timespec ts{};
    const timespec* tsp = nullptr;
    if (timeout_ns >= 0) {
      ts.tv_sec = timeout_ns / 1000000000;
      ts.tv_nsec = timeout_ns % 1000000000;
      tsp = &ts;
    }
    futex(&hdr_->wake_seq, FUTEX_WAIT, seq, tsp);
  }
  hdr_->consumer_sleeping.store(0, std::memory_order_relaxed);
}

void ShmRing::wake() noexcept {
  hdr_->wake_seq.fetch_add(1, std::memory_order_seq_cst);
  futex(&hdr_->wake_seq, FUTEX_WAKE, 1, nullptr);
}

bool ShmRing::push_waiting(const uint8_t* data, size_t len, SlotKind kind,
                           std::chrono::nanoseconds stuck,
                           std::chrono::nanoseconds at_most) noexcept {
  if (push(data, len, kind)) return true;
  if (len > slot_size_ - kSlotHeader) return false;
  uint64_t consumed_to = hdr_->head.load(std::memory_order_acquire);
  const auto start = std::chrono::steady_clock::now();
  auto progress_at = start;
  for (;;) {
    std::this_thread::yield();
    if (push(data, len, kind)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (const uint64_t head = hdr_->head.load(std::memory_order_acquire); head != consumed_to) {
      consumed_to = head;
      progress_at = now;
    } else if (now - progress_at >= stuck) {
      hdr_->dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (at_most.count() && now - start >= at_most) {
      hdr_->dropped.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
}

}  // namespace ibemu::link
