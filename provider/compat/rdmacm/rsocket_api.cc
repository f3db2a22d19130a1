// The rsockets API of <rdma/rsocket.h>: each call finds its socket by
// number and hands over. rpoll and rselect are in rsocket_poll.cc.
#include <fcntl.h>
#include <rdma/rsocket.h>

#include <cerrno>
#include <cstdarg>

#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/rsocket_socket.h"

using ibemu::rsock::Socket;

namespace {

/// Runs `op` on the socket numbered `fd`, or fails with ENOTSOCK.
template <typename Op>
auto on_socket(int fd, Op op) -> decltype(op(std::declval<Socket&>())) {
  std::shared_ptr<Socket> s = Socket::find(fd);
  if (!s) return -1;
  return op(*s);
}

ssize_t recv_one(int socket, void* buf, size_t len, int flags) {
  iovec iov{buf, len};
  return on_socket(socket, [&](Socket& s) { return s.recvv(&iov, 1, flags); });
}

ssize_t send_one(int socket, const void* buf, size_t len, int flags) {
  iovec iov{const_cast<void*>(buf), len};
  return on_socket(socket, [&](Socket& s) { return s.sendv(&iov, 1, flags); });
}

}  // namespace

extern "C" {

IBEMU_EXPORT int rsocket(int domain, int type, int protocol) {
  const int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (kind == SOCK_DGRAM) {
    errno = ENOTSUP;  // datagram rsockets are not emulated
    return -1;
  }
  if (kind != SOCK_STREAM) {
    errno = ESOCKTNOSUPPORT;
    return -1;
  }
  if (protocol && protocol != IPPROTO_TCP) {
    errno = EPROTONOSUPPORT;
    return -1;
  }
  return Socket::create(domain, type & SOCK_NONBLOCK);
}

IBEMU_EXPORT int rbind(int socket, const sockaddr* addr, socklen_t addrlen) {
  return on_socket(socket, [&](Socket& s) { return s.bind(addr, addrlen); });
}

IBEMU_EXPORT int rlisten(int socket, int backlog) {
  return on_socket(socket, [&](Socket& s) { return s.listen(backlog); });
}

IBEMU_EXPORT int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  return on_socket(socket, [&](Socket& s) { return s.accept(addr, addrlen); });
}

IBEMU_EXPORT int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) {
  return on_socket(socket, [&](Socket& s) { return s.connect(addr, addrlen); });
}

IBEMU_EXPORT int rshutdown(int socket, int how) {
  return on_socket(socket, [&](Socket& s) { return s.shutdown(how); });
}

IBEMU_EXPORT int rclose(int socket) {
  // A repoll instance is closed with rclose too, as in rdma-core.
  if (ibemu::rsock::close_repoll(socket)) return 0;
  return Socket::close(socket);
}

IBEMU_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  return recv_one(socket, buf, len, flags);
}

IBEMU_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr,
                               socklen_t* addrlen) {
  return on_socket(socket, [&](Socket& s) -> ssize_t {
    iovec iov{buf, len};
    const ssize_t n = s.recvv(&iov, 1, flags);
    if (n >= 0 && src_addr && addrlen) s.name(src_addr, addrlen, true);
    return n;
  });
}

IBEMU_EXPORT ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  return on_socket(socket, [&](Socket& s) -> ssize_t {
    const ssize_t n = s.recvv(msg->msg_iov, int(msg->msg_iovlen), flags);
    if (n >= 0) {
      msg->msg_controllen = 0;
      msg->msg_flags = 0;
      if (msg->msg_name && s.name(static_cast<sockaddr*>(msg->msg_name), &msg->msg_namelen, true))
        msg->msg_namelen = 0;
    }
    return n;
  });
}

IBEMU_EXPORT ssize_t rread(int socket, void* buf, size_t count) {
  return recv_one(socket, buf, count, 0);
}

IBEMU_EXPORT ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  return on_socket(socket, [&](Socket& s) { return s.recvv(iov, iovcnt, 0); });
}

IBEMU_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  return send_one(socket, buf, len, flags);
}

IBEMU_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr*,
                             socklen_t) {
  // A connected stream ignores the address, as TCP does.
  return send_one(socket, buf, len, flags);
}

IBEMU_EXPORT ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  return on_socket(socket,
                   [&](Socket& s) { return s.sendv(msg->msg_iov, int(msg->msg_iovlen), flags); });
}

IBEMU_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) {
  return send_one(socket, buf, count, 0);
}

IBEMU_EXPORT ssize_t rwritev(int socket, const iovec* iov, int iovcnt) {
  return on_socket(socket, [&](Socket& s) { return s.sendv(iov, iovcnt, 0); });
}

IBEMU_EXPORT int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  return on_socket(socket, [&](Socket& s) { return s.name(addr, addrlen, true); });
}

IBEMU_EXPORT int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  return on_socket(socket, [&](Socket& s) { return s.name(addr, addrlen, false); });
}

IBEMU_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval,
                             socklen_t optlen) {
  return on_socket(socket, [&](Socket& s) { return s.setsockopt(level, optname, optval, optlen); });
}

IBEMU_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  return on_socket(socket, [&](Socket& s) { return s.getsockopt(level, optname, optval, optlen); });
}

IBEMU_EXPORT int rfcntl(int socket, int cmd, ... /* arg */) {
  va_list args;
  va_start(args, cmd);
  // F_GETFL takes no argument; reading one anyway is harmless on the ABIs
  // this runs on, and F_SETFL's is an int.
  const long arg = cmd == F_SETFL ? va_arg(args, int) : 0;
  va_end(args);
  return on_socket(socket, [&](Socket& s) { return s.fcntl(cmd, arg); });
}

IBEMU_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  return on_socket(socket, [&](Socket& s) { return s.iomap(buf, len, prot, flags, offset); });
}

IBEMU_EXPORT int riounmap(int socket, void* buf, size_t len) {
  return on_socket(socket, [&](Socket& s) { return s.iounmap(buf, len); });
}

IBEMU_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  return size_t(on_socket(
      socket, [&](Socket& s) -> ssize_t { return s.iowrite(buf, count, offset, flags); }));
}

}  // extern "C"
