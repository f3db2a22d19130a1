#include "emulator-daemon/kernel_data_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "kernel/ibemu_ctl_validate.h"

namespace ibemu {

namespace {
// The module never returns more in one read(): its batches are bounded by
// the ABI's limit (IBEMU_DATA_MAX_BATCH).
constexpr size_t kReadBuffer = IBEMU_DATA_MAX_BATCH;
}  // namespace

KernelDataChannel::~KernelDataChannel() { stop(); }

int KernelDataChannel::open(int control_fd, Handler handler) {
  const int fd = ::ioctl(control_fd, IBEMU_IOC_OPEN_DATA);
  if (fd < 0) return errno;
  start(fd, std::move(handler));
  return 0;
}

void KernelDataChannel::start(int data_fd, Handler handler) {
  data_fd_ = data_fd;
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  handler_ = std::move(handler);
  reader_ = std::thread([this] { read_loop(); });
}

void KernelDataChannel::halt_reader() {
  if (reader_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    reader_.join();
  }
}

void KernelDataChannel::stop() {
  halt_reader();
  if (data_fd_ >= 0) ::close(data_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  data_fd_ = wake_fd_ = -1;
}

int KernelDataChannel::complete(const void* records, size_t len) {
  ibemu_data_complete arg{};
  arg.records = reinterpret_cast<uintptr_t>(records);
  arg.length = static_cast<uint32_t>(len);
  if (len > IBEMU_DATA_MAX_BATCH || ibemu_data_batch_valid(records, len, IBEMU_DATA_TO_MODULE)) {
    log_error("kernel data channel: the daemon built a malformed batch of completions");
    return EINVAL;
  }
  if (::ioctl(data_fd_, IBEMU_IOC_COMPLETE, &arg) != 0) return errno;
  for (size_t at = 0; at < len;) {
    ibemu_data_hdr hdr;
    std::memcpy(&hdr, static_cast<const uint8_t*>(records) + at, sizeof hdr);
    counters_.completions++;
    at += hdr.length;
  }
  return 0;
}

int KernelDataChannel::copy(const ibemu_data_copy_segment* segments, uint32_t count) {
  ibemu_data_copy arg{};
  arg.segments = reinterpret_cast<uintptr_t>(segments);
  arg.count = count;
  counters_.copies++;
  const long moved = ::ioctl(data_fd_, IBEMU_IOC_COPY, &arg);
  if (moved < 0) {
    counters_.copy_errors++;
    return errno;
  }
  counters_.copy_bytes += uint64_t(moved);
  return 0;
}

void KernelDataChannel::read_loop() {
  pthread_setname_np(pthread_self(), "ibemu-kdata");
  // 8-byte aligned, as the records' checks require.
  std::vector<uint64_t> buf(kReadBuffer / sizeof(uint64_t));
  auto* bytes = reinterpret_cast<uint8_t*>(buf.data());
  for (;;) {
    pollfd fds[2] = {{data_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_error("kernel data channel: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = ::read(data_fd_, bytes, kReadBuffer);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      log_error("kernel data channel: read: {}", std::strerror(errno));
      return;
    }
    if (n == 0) {
      log_info("kernel data channel: the module closed it");
      return;
    }
    on_batch(bytes, static_cast<size_t>(n));
  }
}

void KernelDataChannel::on_batch(const uint8_t* buf, size_t len) {
  // The module is trusted but checked: a record it got wrong is its bug,
  // logged, and never turned into an engine object.
  if (ibemu_data_batch_valid(buf, len, IBEMU_DATA_TO_DAEMON) != 0) {
    counters_.malformed++;
    log_error("kernel data channel: a malformed batch of {} bytes from the module", len);
    return;
  }
  for (size_t at = 0; at < len;) {
    ibemu_data_hdr hdr;
    std::memcpy(&hdr, buf + at, sizeof hdr);
    counters_.records++;
    handler_(hdr, buf + at);
    at += hdr.length;
  }
  // Counted once handed on whole: a batch the counters show is one whose
  // records every reader of them may take as applied.
  counters_.batches++;
}

}  // namespace ibemu
