// rsetsockopt, rgetsockopt, rfcntl, rgetsockname and rgetpeername.
// Sizes take effect at the next connection (as with the real rsockets, set
// them before rconnect, or on the listener before raccept).
#include <fcntl.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

namespace {

constexpr size_t kMinBuffer = 4096;
constexpr size_t kMaxBuffer = size_t(1) << 30;
constexpr uint32_t kMaxQueue = 16384;

}  // namespace

int Socket::setsockopt(int level, int name, const void* val, socklen_t len) {
  if (!val) return fail(EFAULT);
  auto as_int = [&](int* out) {
    if (len < sizeof(int)) return false;
    std::memcpy(out, val, sizeof(int));
    return true;
  };
  int v = 0;
  Lock lock(mu_);
  switch (level) {
    case SOL_SOCKET:
      if (name == SO_LINGER) {
        if (len < sizeof(linger)) return fail(EINVAL);
        std::memcpy(&opt_.linger_opt, val, sizeof(linger));
        return 0;
      }
      if (!as_int(&v)) return fail(EINVAL);
      switch (name) {
        case SO_REUSEADDR:
          opt_.reuseaddr = v;
          // Best effort: rdma_cm ids bound to the same port share it.
          rdma_set_option(id_, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v);
          return 0;
        case SO_SNDBUF:
          opt_.sndbuf = std::clamp(size_t(std::max(v, 0)), kMinBuffer, kMaxBuffer);
          return 0;
        case SO_RCVBUF:
          opt_.rcvbuf = std::clamp(size_t(std::max(v, 0)), kMinBuffer, kMaxBuffer);
          return 0;
        case SO_KEEPALIVE:
          opt_.keepalive = v;  // the RC transport's own timeouts notice a dead peer
          return 0;
        case SO_OOBINLINE:
          opt_.oobinline = v;
          return 0;
      }
      break;
    case IPPROTO_TCP:
      if (!as_int(&v)) return fail(EINVAL);
      switch (name) {
        case TCP_NODELAY:
          opt_.nodelay = v;  // every rsend leaves at once anyway
          return 0;
        case TCP_MAXSEG:
          return 0;  // writes are as long as the rings allow
        case TCP_KEEPIDLE:
          opt_.keepidle = v;
          return 0;
      }
      break;
    case IPPROTO_IPV6:
      if (name == IPV6_V6ONLY) {
        if (!as_int(&v)) return fail(EINVAL);
        opt_.v6only = v;
        rdma_set_option(id_, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v);
        return 0;
      }
      break;
    case SOL_RDMA:
      if (name == RDMA_ROUTE) return 0;  // rdma_cm resolves the route itself
      if (!as_int(&v)) return fail(EINVAL);
      switch (name) {
        case RDMA_SQSIZE:
          opt_.sqsize = std::clamp<uint32_t>(uint32_t(std::max(v, 1)), 1, kMaxQueue);
          return 0;
        case RDMA_RQSIZE:
          opt_.rqsize = std::clamp<uint32_t>(uint32_t(std::max(v, 1)), 1, kMaxQueue);
          return 0;
        case RDMA_INLINE:
          opt_.inline_size = uint32_t(std::max(v, 0));
          return 0;
        case RDMA_IOMAPSIZE:
          opt_.iomap_size = uint32_t(std::max(v, 0));
          return 0;
      }
      break;
  }
  return fail(ENOPROTOOPT);
}

int Socket::getsockopt(int level, int name, void* val, socklen_t* len) {
  if (!val || !len) return fail(EFAULT);
  Lock lock(mu_);
  int v = 0;
  const void* out = &v;
  socklen_t size = sizeof v;
  switch (level) {
    case SOL_SOCKET:
      switch (name) {
        case SO_ERROR:
          progress();
          v = so_error_;
          so_error_ = 0;
          break;
        case SO_TYPE:
          v = SOCK_STREAM;
          break;
        case SO_REUSEADDR:
          v = opt_.reuseaddr;
          break;
        case SO_SNDBUF:
          v = int(opt_.sndbuf);
          break;
        case SO_RCVBUF:
          v = int(opt_.rcvbuf);
          break;
        case SO_KEEPALIVE:
          v = opt_.keepalive;
          break;
        case SO_OOBINLINE:
          v = opt_.oobinline;
          break;
        case SO_LINGER:
          out = &opt_.linger_opt;
          size = sizeof opt_.linger_opt;
          break;
        default:
          return fail(ENOPROTOOPT);
      }
      break;
    case IPPROTO_TCP:
      if (name == TCP_NODELAY) {
        v = opt_.nodelay;
      } else if (name == TCP_MAXSEG) {
        v = int(kMaxWrite);
      } else if (name == TCP_KEEPIDLE) {
        v = opt_.keepidle;
      } else {
        return fail(ENOPROTOOPT);
      }
      break;
    case IPPROTO_IPV6:
      if (name != IPV6_V6ONLY) return fail(ENOPROTOOPT);
      v = opt_.v6only;
      break;
    case SOL_RDMA:
      switch (name) {
        case RDMA_SQSIZE:
          v = int(opt_.sqsize);
          break;
        case RDMA_RQSIZE:
          v = int(opt_.rqsize);
          break;
        case RDMA_INLINE:
          v = int(opt_.inline_size);
          break;
        case RDMA_IOMAPSIZE:
          v = int(opt_.iomap_size);
          break;
        default:
          return fail(ENOPROTOOPT);
      }
      break;
    default:
      return fail(ENOPROTOOPT);
  }
  std::memcpy(val, out, std::min(*len, size));
  *len = std::min(*len, size);
  return 0;
}

int Socket::fcntl(int cmd, long arg) {
  Lock lock(mu_);
  switch (cmd) {
    case F_GETFL:
      return O_RDWR | (nonblocking_ ? O_NONBLOCK : 0);
    case F_SETFL:
      nonblocking_ = arg & O_NONBLOCK;
      return 0;
    default:
      return fail(ENOTSUP);
  }
}

int Socket::name(sockaddr* addr, socklen_t* len, bool peer) {
  Lock lock(mu_);
  return name_locked(addr, len, peer);
}

int Socket::name_locked(sockaddr* addr, socklen_t* len, bool peer) {
  if (!addr || !len) return fail(EFAULT);
  if (peer && state_ != State::kConnected && state_ != State::kAccepting &&
      state_ != State::kDisconnected)
    return fail(ENOTCONN);
  const sockaddr* a = peer ? rdma_get_peer_addr(id_) : rdma_get_local_addr(id_);
  const socklen_t size = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(*len, size));
  *len = size;
  return 0;
}

}  // namespace ibemu::rsock
