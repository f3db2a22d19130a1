#include "provider/core/capture_mirror.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "common/capture_record.h"
#include "transport/wire/lrh.h"

namespace ibemu::provider {

CaptureMirror::~CaptureMirror() {
  if (fd_ >= 0) close(fd_);
}

uint8_t CaptureMirror::sending_port(uint16_t slid) const noexcept {
  const DeviceStateView& dev = page_->devices[device_];
  for (uint32_t i = 0; i < dev.num_ports && i < uint32_t(kMaxPorts); ++i) {
    const PortStateView p = page_->read_port(device_, int(i));
    if (p.lid && slid >= p.lid && slid < p.lid + (1u << p.lmc)) return uint8_t(i + 1);
  }
  return 0;
}

void CaptureMirror::mirror(const uint8_t* packet, size_t len) noexcept {
  if (len < wire::Lrh::kSize) return;
  CaptureRecordHeader h;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  h.time_ns = uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec);
  h.length = uint32_t(len);
  h.device = uint16_t(device_);
  h.port = sending_port(wire::Lrh::from(packet).slid());
  std::lock_guard lock(mutex_);
  if (fd_ < 0) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd_ < 0 || socket_path_.size() >= sizeof addr.sun_path) return;
    std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
    // The daemon's queue of datagrams is short (net.unix.max_dgram_qlen):
    // a sender waits for room, but never long when the daemon is stuck.
    const timeval limit{0, 100 * 1000};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd_);
      fd_ = -1;
      return;
    }
  }
  iovec iov[2] = {{&h, sizeof h}, {const_cast<uint8_t*>(packet), len}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  // A capture slows the fabric down rather than lose packets, up to the
  // send timeout.
  sendmsg(fd_, &msg, MSG_NOSIGNAL);
}

}  // namespace ibemu::provider
