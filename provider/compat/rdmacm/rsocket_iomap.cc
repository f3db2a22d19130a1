// riomap, riounmap, riowrite: regions a peer writes directly. A region's
// announcement is a control message, so it reaches the peer before any
// stream byte sent after riomap returns, which is all rsocket(7) promises.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

off_t Socket::iomap(void* buf, size_t len, int prot, int, off_t offset) {
  Lock lock(mu_);
  progress();
  if (!buf || !len || (prot != PROT_WRITE && prot != PROT_NONE)) return fail(EINVAL);
  if (!pd_) return fail(ENOTCONN);
  const bool remote = prot == PROT_WRITE;
  if (remote) {
    const size_t mapped = size_t(std::count_if(local_regions_.begin(), local_regions_.end(),
                                               [](const Region& r) { return r.remote_writable; }));
    if (mapped >= opt_.iomap_size) return fail(ENOMEM);
    if (offset == -1) offset = next_offset_;
    if (offset < 0) return fail(EINVAL);
    for (const Region& r : local_regions_)
      if (r.remote_writable && offset < r.offset + off_t(r.length) &&
          r.offset < offset + off_t(len))
        return fail(EINVAL);
  }
  const int access = IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_WRITE : 0);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, len, access);
  if (!mr) return -1;
  Region region{remote ? offset : 0, uint64_t(uintptr_t(buf)), len, mr->rkey, mr, remote};
  if (remote) {
    ControlMessage m{};
    m.region_offset = to_wire64(uint64_t(offset));
    m.region_addr = to_wire64(region.addr);
    m.region_length = to_wire64(len);
    m.region_rkey = to_wire32(mr->rkey);
    for (;;) {
      if (send_control(ControlKind::kIomap, &m) == 0) break;
      if (errno != EAGAIN || closing_) {
        const int err = errno;
        ibv_dereg_mr(mr);
        return fail(err);
      }
      wait(lock);
    }
    next_offset_ = std::max(next_offset_, offset + off_t(len));
  }
  local_regions_.push_back(region);
  return region.offset;
}

int Socket::iounmap(void* buf, size_t len) {
  Lock lock(mu_);
  auto it = std::find_if(local_regions_.begin(), local_regions_.end(), [&](const Region& r) {
    return r.addr == uint64_t(uintptr_t(buf)) && r.length == len;
  });
  if (it == local_regions_.end()) return fail(EINVAL);
  if (it->remote_writable) {
    ControlMessage m{};
    m.region_offset = to_wire64(uint64_t(it->offset));
    // Best effort: a peer that is gone needs no notice.
    while (send_control(ControlKind::kIounmap, &m) && errno == EAGAIN && !closing_) wait(lock);
  }
  // The peer may still be writing what it started before the notice:
  // deregistering now fails that write, and the connection, as it would
  // with the real rsockets.
  ibv_dereg_mr(it->mr);
  local_regions_.erase(it);
  return 0;
}

ssize_t Socket::iowrite(const void* buf, size_t count, off_t offset, int flags) {
  std::lock_guard<std::mutex> whole(send_mu_);
  Lock lock(mu_);
  const bool nonblocking = nonblocking_ || (flags & MSG_DONTWAIT);
  return send_loop(lock, nonblocking, count, [&](size_t& sent) {
    auto region = std::find_if(peer_regions_.begin(), peer_regions_.end(), [&](const Region& r) {
      return offset >= r.offset && offset + off_t(count) <= r.offset + off_t(r.length);
    });
    if (region == peer_regions_.end()) return EINVAL;
    const uint64_t remote = region->addr + uint64_t(offset - region->offset);
    while (sent < count && writes_in_flight_ < opt_.sqsize) {
      const Extent local = staging_ring_.reserve(std::min(count - sent, kMaxWrite));
      if (!local.length) break;
      uint8_t* data = staging_ + local.offset;
      std::memcpy(data, static_cast<const uint8_t*>(buf) + sent, local.length);
      if (post_write(make_wr_id(WrKind::kIowrite, local.length), data, local.length,
                     staging_mr_->lkey, remote + sent, region->rkey, false))
        return -1;
      staging_ring_.commit(local.length);
      sent += local.length;
    }
    return 0;
  });
}

}  // namespace ibemu::rsock
