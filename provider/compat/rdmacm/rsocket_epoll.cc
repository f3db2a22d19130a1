// repoll_create, repoll_ctl and repoll_wait (RDMACM_1.5): epoll for
// rsockets. An instance is a list of interests (a descriptor, the events
// wanted, the program's data) that repoll_wait hands to rpoll, so rsockets
// and ordinary descriptors mix as they do in rpoll. Readiness is
// level-triggered, as in rdma-core (which ignores EPOLLET and EPOLLONESHOT);
// events come in the order the descriptors were added.
//
// An instance's number is a real descriptor (an eventfd nothing writes), so
// it never collides with the program's own or an rsocket's; rclose frees
// it. A thread that sleeps in repoll_wait also sleeps on an eventfd of its
// own, which repoll_ctl and rclose write: a change of the set reaches waits
// already under way, as with epoll.
//
// Errors are the sockets API's, -1 with errno, with rdma-core's codes.
// (rdma-core returns repoll_ctl's and repoll_wait's codes themselves,
// positive, and leaves errno alone: docs/rdma-cm.md.)
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/rdma_cma_newer.h"
#include "provider/compat/rdmacm/rsocket_socket.h"

namespace ibemu::rsock {

namespace {

using Clock = std::chrono::steady_clock;

/// The events epoll and poll share, and the bit each gives them.
constexpr std::pair<uint32_t, short> kEventBits[] = {
    {EPOLLIN, POLLIN},       {EPOLLPRI, POLLPRI}, {EPOLLOUT, POLLOUT},
    {EPOLLRDHUP, POLLRDHUP}, {EPOLLERR, POLLERR}, {EPOLLHUP, POLLHUP},
};

short poll_events(uint32_t epoll) {
  short out = 0;
  for (auto [e, p] : kEventBits)
    if (epoll & e) out |= p;
  return out;
}

uint32_t epoll_events(short poll) {
  uint32_t out = 0;
  for (auto [e, p] : kEventBits)
    if (poll & p) out |= e;
  return out;
}

struct Interest {
  int fd;
  uint32_t events;
  epoll_data_t data;
};

class Repoll {
 public:
  int ctl(int op, int fd, const epoll_event* event);
  int wait(epoll_event* events, int maxevents, int timeout_ms);
  /// rclose: waits under way end, returning nothing.
  void close();

 private:
  /// Under mu_: what a wait looks at now, and whether it may go on.
  bool snapshot(int wake_fd, std::vector<Interest>* out);
  void wake_waiters();  // under mu_

  std::mutex mu_;  // guards everything below; never held while sleeping
  std::vector<Interest> interests_;
  std::vector<int> waiter_wake_fds_;
  bool closed_ = false;
};

int Repoll::ctl(int op, int fd, const epoll_event* event) {
  if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) return fail(EINVAL);
  if (op != EPOLL_CTL_DEL && !event) return fail(EFAULT);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(interests_.begin(), interests_.end(),
                         [fd](const Interest& i) { return i.fd == fd; });
  const bool known = it != interests_.end();
  if (op == EPOLL_CTL_ADD && known) return fail(EEXIST);
  if (op != EPOLL_CTL_ADD && !known) return fail(ENOENT);
  if (op == EPOLL_CTL_ADD) {
    interests_.push_back({fd, event->events, event->data});
  } else if (op == EPOLL_CTL_MOD) {
    it->events = event->events;
    it->data = event->data;
  } else {
    interests_.erase(it);
  }
  wake_waiters();
  return 0;
}

bool Repoll::snapshot(int wake_fd, std::vector<Interest>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (wake_fd >= 0) {
    // Whatever woke it is in what it takes now.
    uint64_t count;
    (void)!::read(wake_fd, &count, sizeof count);
  }
  *out = interests_;
  return !closed_;
}

int Repoll::wait(epoll_event* events, int maxevents, int timeout_ms) {
  if (maxevents <= 0) return fail(EINVAL);
  if (!events) return fail(EFAULT);
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  // The first look never sleeps; a wait that must sleep gets a wake fd.
  int wake_fd = -1;
  int result = 0;
  for (;;) {
    std::vector<Interest> interests;
    if (!snapshot(wake_fd, &interests)) break;  // closed under it: nothing
    std::vector<pollfd> fds;
    for (const Interest& i : interests) fds.push_back({i.fd, poll_events(i.events), 0});
    int sleep_ms = 0;
    if (wake_fd >= 0) {
      fds.push_back({wake_fd, POLLIN, 0});
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      sleep_ms = timeout_ms < 0 ? -1 : int(std::max<int64_t>(left, 0));
    }
    if (rpoll(fds.data(), fds.size(), sleep_ms) < 0) {
      result = -1;
      break;
    }
    for (size_t k = 0; k < interests.size() && result < maxevents; ++k) {
      // A descriptor closed while in the set is no longer reported.
      const short revents = short(fds[k].revents & ~POLLNVAL);
      if (!revents) continue;
      events[result].events = epoll_events(revents);
      events[result].data = interests[k].data;
      ++result;
    }
    if (result || timeout_ms == 0 || (wake_fd >= 0 && timeout_ms > 0 && Clock::now() >= deadline))
      break;
    if (wake_fd < 0) {
      wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (wake_fd < 0) return -1;
      std::lock_guard<std::mutex> lock(mu_);
      waiter_wake_fds_.push_back(wake_fd);
    }
  }
  if (wake_fd >= 0) {
    const int err = errno;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::erase(waiter_wake_fds_, wake_fd);
    }
    ::close(wake_fd);
    errno = err;
  }
  return result;
}

void Repoll::wake_waiters() {
  const uint64_t one = 1;
  for (int fd : waiter_wake_fds_) (void)!::write(fd, &one, sizeof one);
}

void Repoll::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  wake_waiters();
}

std::mutex g_instances_mu;
std::unordered_map<int, std::shared_ptr<Repoll>> g_instances;

/// The instance numbered `epfd`, or null with errno EINVAL (rdma-core's
/// code for a number that is not one).
std::shared_ptr<Repoll> find_instance(int epfd) {
  std::lock_guard<std::mutex> lock(g_instances_mu);
  auto it = g_instances.find(epfd);
  if (it == g_instances.end()) {
    errno = EINVAL;
    return nullptr;
  }
  return it->second;
}

}  // namespace

bool close_repoll(int fd) {
  std::shared_ptr<Repoll> instance;
  {
    std::lock_guard<std::mutex> lock(g_instances_mu);
    auto it = g_instances.find(fd);
    if (it == g_instances.end()) return false;
    instance = std::move(it->second);
    g_instances.erase(it);
  }
  // Unlike rdma-core, which refuses (EBUSY) while the set is not empty,
  // this closes it as close() closes an epoll instance.
  instance->close();
  ::close(fd);
  return true;
}

}  // namespace ibemu::rsock

using namespace ibemu::rsock;

extern "C" {

IBEMU_EXPORT int repoll_create(int flags) {
  // rdma-core takes EPOLL_CLOEXEC from the flags and ignores the rest.
  const int fd = eventfd(0, (flags & EPOLL_CLOEXEC) ? EFD_CLOEXEC : 0);
  if (fd < 0) return -1;
  std::lock_guard<std::mutex> lock(g_instances_mu);
  g_instances[fd] = std::make_shared<Repoll>();
  return fd;
}

IBEMU_EXPORT int repoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  if (fd < 0) return fail(EBADF);
  if (fd == epfd) return fail(EINVAL);
  std::shared_ptr<Repoll> instance = find_instance(epfd);
  return instance ? instance->ctl(op, fd, event) : -1;
}

IBEMU_EXPORT int repoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) {
  std::shared_ptr<Repoll> instance = find_instance(epfd);
  return instance ? instance->wait(events, maxevents, timeout) : -1;
}

}  // extern "C"
