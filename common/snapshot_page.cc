#include "common/snapshot_page.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "transport/link/sealed_memfd.h"

namespace ibemu {

static_assert(sizeof(SnapshotPageHeader) == 32);

SnapshotPage::SnapshotPage(SnapshotPage&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      header_(std::exchange(other.header_, nullptr)),
      writable_(other.writable_) {}

SnapshotPage& SnapshotPage::operator=(SnapshotPage&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::exchange(other.header_, nullptr);
    writable_ = other.writable_;
  }
  return *this;
}

SnapshotPage::~SnapshotPage() { release(); }

void SnapshotPage::release() noexcept {
  if (header_) munmap(header_, kBytes);
  if (fd_ >= 0) close(fd_);
  header_ = nullptr;
  fd_ = -1;
}

int SnapshotPage::create() noexcept {
  release();
  fd_ = link::create_sealed_memfd("ibemu-snapshot", kBytes);
  if (fd_ < 0) return -std::exchange(fd_, -1);
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  header_ = new (p) SnapshotPageHeader{SnapshotPageHeader::kMagic, {0}, {0}, {0}, 0};
  writable_ = true;
  return 0;
}

int SnapshotPage::attach_read_only(int fd) noexcept {
  release();
  fd_ = fd;
  if (link::sealed_memfd_size(fd_) != static_cast<long>(kBytes)) return EINVAL;
  void* p = mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  header_ = static_cast<SnapshotPageHeader*>(p);
  writable_ = false;
  close(std::exchange(fd_, -1));  // the mapping keeps the page
  return 0;
}

bool SnapshotPage::publish(uint64_t request, const std::string& json) noexcept {
  if (!header_ || !writable_ || json.size() > kMaxContent) return false;
  const uint64_t seq = header_->seq.load(std::memory_order_relaxed);
  header_->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(reinterpret_cast<char*>(header_ + 1), json.data(), json.size());
  header_->length.store(static_cast<uint32_t>(json.size()), std::memory_order_relaxed);
  header_->answered.store(request, std::memory_order_relaxed);
  header_->seq.store(seq + 2, std::memory_order_release);
  return true;
}

std::optional<std::string> SnapshotPage::read(uint64_t request) const {
  if (!header_) return std::nullopt;
  const uint64_t before = header_->seq.load(std::memory_order_acquire);
  if ((before & 1) || header_->magic != SnapshotPageHeader::kMagic ||
      header_->answered.load(std::memory_order_relaxed) < request)
    return std::nullopt;
  const uint32_t length = header_->length.load(std::memory_order_relaxed);
  if (length > kMaxContent) return std::nullopt;
  std::string out(reinterpret_cast<const char*>(header_ + 1), length);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (header_->seq.load(std::memory_order_relaxed) != before) return std::nullopt;
  return out;
}

}  // namespace ibemu
