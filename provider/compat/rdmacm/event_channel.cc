// Event channels: each is a semaphore eventfd, the channel's fd (so a
// program can poll or epoll it, and set O_NONBLOCK on it), counting the
// events queued beside it. Not a pipe: closing the channel must not wake a
// thread blocked reading it (with the kernel's rdma_cm it stays blocked).
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "provider/compat/rdmacm/cm_state.h"
#include "provider/compat/rdmacm/exports.h"

namespace ibemu::rdmacm {

Channel* new_channel(bool internal) {
  int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto* ch = new Channel();
  ch->pub.fd = fd;
  ch->internal = internal;
  return ch;
}

void delete_channel(Channel* ch) {
  ::close(ch->pub.fd);
  for (Event* e : ch->queue) delete e;
  delete ch;
}

void signal_event(Channel* ch) {
  const uint64_t one = 1;
  (void)!::write(ch->pub.fd, &one, sizeof one);
}

bool take_signal(Channel* ch) {
  pollfd p{ch->pub.fd, POLLIN, 0};
  uint64_t one;
  return ::poll(&p, 1, 0) == 1 && ::read(ch->pub.fd, &one, sizeof one) == sizeof one;
}

Event* post_event(CmId* id, int type, int status) {
  auto* e = new Event();
  e->pub.id = &id->pub;
  std::memcpy(&e->pub.event, &type, sizeof type);  // see event_type()
  e->pub.status = status;
  CmId* owner = id->listener && type == RDMA_CM_EVENT_CONNECT_REQUEST ? id->listener : id;
  if (owner != id) e->pub.listen_id = &owner->pub;
  e->owner = owner;
  owner->events_reported++;
  owner->channel->queue.push_back(e);
  signal_event(owner->channel);
  return e;
}

/// Which id an event counts against until it is acknowledged.
static CmId* event_owner(const Event* e) { return e->owner; }

void drop_queued_events(CmId* id) {
  Channel* ch = id->channel;
  auto gone = [&](Event* e) {
    if (from_pub(e->pub.id) != id && event_owner(e) != id) return false;
    event_owner(e)->events_acked++;
    take_signal(ch);
    delete e;
    return true;
  };
  ch->queue.erase(std::remove_if(ch->queue.begin(), ch->queue.end(), gone), ch->queue.end());
}

void release_sync_event(Library& lib, CmId* id) {
  if (!id->sync || !id->pub.event) return;
  auto* e = reinterpret_cast<Event*>(id->pub.event);
  id->pub.event = nullptr;
  event_owner(e)->events_acked++;
  delete e;
  lib.cv.notify_all();
}

int wait_sync_event(CmId* id, int expected) {
  if (id->pub.event) {
    rdma_ack_cm_event(id->pub.event);
    id->pub.event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(&id->channel->pub, &e) != 0) return -1;
  id->pub.event = e;
  if (e->status) {
    if (event_type(e->event) == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(e->status < 0 ? -e->status : e->status);
  }
  if (event_type(e->event) != expected) return fail(EINVAL);
  return 0;
}

}  // namespace ibemu::rdmacm

using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  Library* lib;
  if (int err = Library::get(&lib)) {
    errno = err;
    return nullptr;
  }
  Channel* ch = new_channel(false);
  return ch ? &ch->pub : nullptr;
}

IBEMU_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (!channel) return;
  Library* lib;
  if (Library::get(&lib) != 0) return;
  std::lock_guard<std::mutex> lock(lib->mu);
  Channel* ch = from_pub(channel);
  // A thread blocked reading the kernel's channel stays blocked when it is
  // closed: keep this one (and its fd) for such a thread instead of waking
  // it with an error.
  if (ch->readers) {
    ch->destroyed = true;
    return;
  }
  delete_channel(ch);
}

IBEMU_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (!channel || !event) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  Channel* ch = from_pub(channel);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(lib->mu);
      ch->readers++;
    }
    uint64_t one;
    ssize_t n = ::read(channel->fd, &one, sizeof one);
    std::unique_lock<std::mutex> lock(lib->mu);
    ch->readers--;
    if (ch->destroyed) {
      lock.unlock();
      for (;;) pause();  // as on a closed kernel channel: blocked for good
    }
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof one) return -1;  // EAGAIN on a non-blocking channel
    if (ch->queue.empty()) {
      // Its event went with its id, destroyed while this thread woke up:
      // wait for the next one, as a real channel would never have shown it.
      lock.unlock();
      if (fcntl(channel->fd, F_GETFL) & O_NONBLOCK) return fail(EAGAIN);
      continue;
    }
    Event* e = ch->queue.front();
    ch->queue.pop_front();
    // A failed rdma_resolve_addrinfo is over once its error is taken: the
    // id may resolve again (rdma-core clears its flag here too).
    if (event_type(e->pub.event) == RDMA_CM_EVENT_ADDRINFO_ERROR)
      from_pub(e->pub.id)->resolving_addrinfo = false;
    if (e->pub.param.conn.private_data_len) e->pub.param.conn.private_data = e->private_data;
    *event = &e->pub;
    return 0;
  }
}

IBEMU_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (!event) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  auto* e = reinterpret_cast<Event*>(event);
  event_owner(e)->events_acked++;
  delete e;
  lib->cv.notify_all();
  return 0;
}

IBEMU_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event_type(event)) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
    case RDMA_CM_EVENT_ADDRINFO_RESOLVED:
      return "RDMA_CM_EVENT_ADDRINFO_RESOLVED";
    case RDMA_CM_EVENT_ADDRINFO_ERROR:
      return "RDMA_CM_EVENT_ADDRINFO_ERROR";
    default:  // rdma-core names no user or internal event either
      return "UNKNOWN EVENT";
  }
}

IBEMU_EXPORT int rdma_write_cm_event(rdma_cm_id* id, rdma_cm_event_type event, int status,
                                     uint64_t arg) {
  // Only user events: the program's own signal through the id's channel
  // (to wake a thread waiting in rdma_get_cm_event, say), reported with its
  // status and argument and acknowledged like any other.
  if (!id || event_type(event) != RDMA_CM_EVENT_USER) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  Event* e = post_event(from_pub(id), RDMA_CM_EVENT_USER, status);
  // rdma_cm_event.param.arg of newer headers: the union's first 8 bytes.
  static_assert(sizeof(e->pub.param) >= sizeof arg);
  std::memcpy(&e->pub.param, &arg, sizeof arg);
  return 0;
}

}  // extern "C"
