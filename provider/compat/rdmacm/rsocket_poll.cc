// rpoll and rselect over rsockets and ordinary descriptors together. An
// rsocket's readiness is its stream state; to sleep, rpoll polls the fds
// behind it (CM channel, completion channel, wake eventfd) next to the
// program's own, then looks again.
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/rsocket_socket.h"

using ibemu::rsock::Socket;

namespace {

using Clock = std::chrono::steady_clock;

/// Fills every revents, sleeping nowhere; counts the ready entries. With
/// `sleep_on`, also gathers what to sleep on when none is ready, and
/// `sleepers` the sockets that count the caller as sleeping.
int look(pollfd* fds, nfds_t nfds, std::vector<pollfd>* sleep_on,
         std::vector<std::shared_ptr<Socket>>* sleepers) {
  int ready = 0;
  std::vector<pollfd> plain;
  std::vector<nfds_t> plain_index;
  for (nfds_t i = 0; i < nfds; ++i) {
    fds[i].revents = 0;
    if (fds[i].fd < 0) continue;
    const int saved = errno;
    std::shared_ptr<Socket> s = Socket::find(fds[i].fd);
    errno = saved;
    if (!s) {
      plain.push_back({fds[i].fd, fds[i].events, 0});
      plain_index.push_back(i);
      continue;
    }
    fds[i].revents = s->poll_events(fds[i].events, ready ? nullptr : sleep_on);
    if (fds[i].revents) {
      ++ready;
    } else if (sleep_on) {
      sleepers->push_back(std::move(s));
    }
  }
  if (!plain.empty() && ::poll(plain.data(), plain.size(), 0) > 0) {
    for (size_t k = 0; k < plain.size(); ++k) {
      fds[plain_index[k]].revents = plain[k].revents;
      if (plain[k].revents) ++ready;
    }
  }
  if (sleep_on) sleep_on->insert(sleep_on->end(), plain.begin(), plain.end());
  return ready;
}

}  // namespace

extern "C" {

IBEMU_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
  for (;;) {
    std::vector<pollfd> sleep_on;
    std::vector<std::shared_ptr<Socket>> sleepers;
    int ready = look(fds, nfds, &sleep_on, &sleepers);
    int wait_ms = -1;
    if (!ready && timeout >= 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = left > 0 ? int(left) : 0;
    }
    int poll_errno = 0;
    if (!ready && wait_ms != 0 && ::poll(sleep_on.data(), sleep_on.size(), wait_ms) < 0)
      poll_errno = errno;
    for (auto& s : sleepers) s->done_sleeping();
    if (poll_errno) {
      errno = poll_errno;
      return -1;
    }
    if (ready) return ready;
    if (wait_ms == 0) return look(fds, nfds, nullptr, nullptr);
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
  int ms = -1;
  if (timeout) ms = int(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000);
  const int n = rpoll(fds.data(), fds.size(), ms);
  if (n < 0) return n;
  for (const pollfd& p : fds) {
    if (p.revents & POLLNVAL) {
      errno = EBADF;
      return -1;
    }
  }
  if (readfds) FD_ZERO(readfds);
  if (writefds) FD_ZERO(writefds);
  if (exceptfds) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd& p : fds) {
    if ((p.events & POLLIN) && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      FD_SET(p.fd, readfds);
      ++count;
    }
    if ((p.events & POLLOUT) && (p.revents & (POLLOUT | POLLERR))) {
      FD_SET(p.fd, writefds);
      ++count;
    }
    if ((p.events & POLLPRI) && (p.revents & POLLPRI)) {
      FD_SET(p.fd, exceptfds);
      ++count;
    }
  }
  return count;
}

}  // extern "C"
