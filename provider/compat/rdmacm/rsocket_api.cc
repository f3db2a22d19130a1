// The rsockets API (rdma/rsocket.h): socket calls on rsocket numbers, and
// rpoll/rselect over rsockets and ordinary descriptors together.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <vector>

#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/rsocket_stream.h"

using ibemu::rsock::Stream;

namespace {

/// Runs `op` on the socket numbered `fd` with its lock held.
template <typename Op>
auto with_stream(int fd, Op op) -> decltype(op(std::declval<Stream&>())) {
  Stream* s = Stream::find(fd);
  if (!s) return -1;
  std::lock_guard<std::mutex> lock(s->mu);
  return op(*s);
}

}  // namespace

extern "C" {

IBEMU_EXPORT int rsocket(int domain, int type, int protocol) {
  // Streams only: datagram rsockets are not emulated.
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM ||
      (protocol && protocol != IPPROTO_TCP)) {
    errno = ENOTSUP;
    return -1;
  }
  int fd = Stream::create(domain);
  if (fd >= 0 && (type & SOCK_NONBLOCK))
    with_stream(fd, [](Stream& s) { return s.fcntl(F_SETFL, O_NONBLOCK); });
  return fd;
}

IBEMU_EXPORT int rbind(int socket, const sockaddr* addr, socklen_t) {
  return with_stream(socket, [&](Stream& s) { return s.bind(addr); });
}

IBEMU_EXPORT int rlisten(int socket, int) {
  return with_stream(socket, [](Stream& s) { return s.listen(); });
}

IBEMU_EXPORT int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  return with_stream(socket, [&](Stream& s) { return s.accept(addr, addrlen); });
}

IBEMU_EXPORT int rconnect(int socket, const sockaddr* addr, socklen_t) {
  return with_stream(socket, [&](Stream& s) { return s.connect(addr); });
}

IBEMU_EXPORT int rshutdown(int socket, int how) {
  return with_stream(socket, [&](Stream& s) { return s.shutdown(how); });
}

IBEMU_EXPORT int rclose(int socket) { return Stream::close(socket); }

IBEMU_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  return with_stream(socket, [&](Stream& s) { return s.recv(buf, len, flags); });
}

IBEMU_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src_addr,
                               socklen_t* addrlen) {
  return with_stream(socket, [&](Stream& s) {
    ssize_t n = s.recv(buf, len, flags);
    if (n >= 0 && src_addr && addrlen) s.sockname(src_addr, addrlen, true);
    return n;
  });
}

IBEMU_EXPORT ssize_t rread(int socket, void* buf, size_t count) {
  return rrecv(socket, buf, count, 0);
}

IBEMU_EXPORT ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = size_t(iovcnt);
  return rrecvmsg(socket, &msg, 0);
}

IBEMU_EXPORT ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  ssize_t total = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) {
    ssize_t n = rrecv(socket, msg->msg_iov[i].iov_base, msg->msg_iov[i].iov_len,
                      flags | (total ? MSG_DONTWAIT : 0));
    if (n < 0) return total ? total : n;
    total += n;
    if (size_t(n) < msg->msg_iov[i].iov_len) break;
  }
  return total;
}

IBEMU_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  return with_stream(socket, [&](Stream& s) { return s.send(buf, len, flags); });
}

IBEMU_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr*,
                             socklen_t) {
  // A connected stream ignores the address, as TCP does.
  return rsend(socket, buf, len, flags);
}

IBEMU_EXPORT ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  ssize_t total = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) {
    ssize_t n = rsend(socket, msg->msg_iov[i].iov_base, msg->msg_iov[i].iov_len, flags);
    if (n < 0) return total ? total : n;
    total += n;
    if (size_t(n) < msg->msg_iov[i].iov_len) break;
  }
  return total;
}

IBEMU_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) {
  return rsend(socket, buf, count, 0);
}

IBEMU_EXPORT ssize_t rwritev(int socket, const iovec* iov, int iovcnt) {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = size_t(iovcnt);
  return rsendmsg(socket, &msg, 0);
}

IBEMU_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout);
  for (;;) {
    // What is ready now: rsockets by their state, other fds by poll(0).
    int ready = 0;
    std::vector<pollfd> sleep_on;
    std::vector<pollfd> plain;
    for (nfds_t i = 0; i < nfds; ++i) {
      fds[i].revents = 0;
      if (fds[i].fd < 0) continue;
      if (Stream* s = Stream::find(fds[i].fd)) {
        std::lock_guard<std::mutex> lock(s->mu);
        fds[i].revents = s->ready(fds[i].events);
        if (!fds[i].revents) s->wait_fds(&sleep_on);
      } else {
        pollfd p = fds[i];
        ::poll(&p, 1, 0);
        fds[i].revents = p.revents;
        if (!p.revents) sleep_on.push_back({fds[i].fd, fds[i].events, 0});
      }
      if (fds[i].revents) ++ready;
    }
    if (ready || timeout == 0) return ready;
    int wait_ms = -1;
    if (timeout > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return 0;
      wait_ms = int(left.count());
    }
    // A completion that came before a CQ was armed raises no event: look
    // once more before sleeping, briefly.
    if (::poll(sleep_on.data(), sleep_on.size(), std::min(wait_ms < 0 ? 50 : wait_ms, 50)) < 0 &&
        errno != EINTR)
      return -1;
  }
}

IBEMU_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds,
                         timeval* timeout) {
  std::vector<pollfd> fds;
  for (int fd = 0; fd < nfds; ++fd) {
    short events = 0;
    if (readfds && FD_ISSET(fd, readfds)) events |= POLLIN;
    if (writefds && FD_ISSET(fd, writefds)) events |= POLLOUT;
    if (exceptfds && FD_ISSET(fd, exceptfds)) events |= POLLPRI;
    if (events) fds.push_back({fd, events, 0});
  }
  int ms = timeout ? int(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
  int n = rpoll(fds.data(), fds.size(), ms);
  if (n < 0) return n;
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd& p : fds) {
    if (readfds && (p.revents & (POLLIN | POLLHUP | POLLERR))) FD_SET(p.fd, readfds), ++count;
    if (writefds && (p.revents & (POLLOUT | POLLERR))) FD_SET(p.fd, writefds), ++count;
    if (exceptfds && (p.revents & POLLPRI)) FD_SET(p.fd, exceptfds), ++count;
  }
  return count;
}

IBEMU_EXPORT int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  return with_stream(socket, [&](Stream& s) { return s.sockname(addr, addrlen, true); });
}

IBEMU_EXPORT int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  return with_stream(socket, [&](Stream& s) { return s.sockname(addr, addrlen, false); });
}

IBEMU_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval,
                             socklen_t optlen) {
  return with_stream(socket,
                     [&](Stream& s) { return s.setsockopt(level, optname, optval, optlen); });
}

IBEMU_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  return with_stream(socket,
                     [&](Stream& s) { return s.getsockopt(level, optname, optval, optlen); });
}

IBEMU_EXPORT int rfcntl(int socket, int cmd, ... /* arg */) {
  va_list args;
  va_start(args, cmd);
  int arg = va_arg(args, int);
  va_end(args);
  return with_stream(socket, [&](Stream& s) { return s.fcntl(cmd, arg); });
}

IBEMU_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int flags, off_t offset) {
  (void)flags;
  return with_stream(socket, [&](Stream& s) { return s.iomap(buf, len, prot, offset); });
}

IBEMU_EXPORT int riounmap(int socket, void* buf, size_t len) {
  return with_stream(socket, [&](Stream& s) { return s.iounmap(buf, len); });
}

IBEMU_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  return size_t(
      with_stream(socket, [&](Stream& s) { return s.iowrite(buf, count, offset, flags); }));
}

}  // extern "C"
