/*
 * librdmacm's calls newer than Debian 12's, as a program built against
 * rdma-core 65 uses them:
 *   cm_newer_api ADDR PORT
 * It is linked against ibemu's librdmacm.so.1 with its declarations of
 * them (rdma_cma_newer.h stands in for a newer <rdma/rdma_cma.h>), so the
 * binary needs version nodes RDMACM_1.4 and RDMACM_1.5 as one linked on a
 * newer system does.
 * 1. each call is found at its version node (dlvsym);
 * 2. rdma_resolve_addrinfo resolves ADDR:PORT and announces it with
 *    RDMA_CM_EVENT_ADDRINFO_RESOLVED; rdma_query_addrinfo hands it over once;
 *    EBUSY, ENOENT, EINVAL and ENOTSUP where rdma-core gives them; an IB
 *    service (RAI_SA) the SA does not know is RDMA_CM_EVENT_ADDRINFO_ERROR
 *    (and ENOENT from rdma_getaddrinfo with RAI_SA); a synchronous id waits
 *    for its event;
 * 3. rdma_write_cm_event delivers a user event with its status and
 *    argument, also to a thread waiting in rdma_get_cm_event;
 * 4. repoll_create/ctl/wait over a connected rsocket pair (on PORT + 1) and
 *    a pipe: readiness, EPOLL_CTL_ADD/MOD/DEL, timeouts 0 and > 0, a wait
 *    that learns of a descriptor added meanwhile, maxevents, the errors.
 * Prints what it checked; exits 0 when all was as rdma-core's librdmacm does.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipv4_address.h"
#include "provider/compat/rdmacm/rdma_cma_newer.h"

static int failures;

static void check(int ok, const char* what) {
  printf("%s %s\n", ok ? "ok" : "FAILED", what);
  failures += !ok;
}

/* errno is as expected after a call that failed with -1. */
static int failed_with(int ret, int err) { return ret == -1 && errno == err; }

static void die(const char* what) {
  perror(what);
  exit(1);
}

static long elapsed_ms(const struct timespec* since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - since->tv_sec) * 1000 + (now.tv_nsec - since->tv_nsec) / 1000000;
}

static void calls_at_their_version_nodes(void) {
  static const char* const nodes[][2] = {
      {"rdma_resolve_addrinfo", "RDMACM_1.4"},
      {"rdma_query_addrinfo", "RDMACM_1.4"},
      {"rdma_write_cm_event", "RDMACM_1.4"},
      {"repoll_create", "RDMACM_1.5"},
      {"repoll_ctl", "RDMACM_1.5"},
      {"repoll_wait", "RDMACM_1.5"},
  };
  int all = 1;
  for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; ++i) {
    const int found = dlvsym(RTLD_DEFAULT, nodes[i][0], nodes[i][1]) != NULL;
    if (!found) printf("  %s@%s not found\n", nodes[i][0], nodes[i][1]);
    all &= found;
  }
  check(all, "each new call is exported at its version node");
  check(dlvsym(RTLD_DEFAULT, "repoll_create", "RDMACM_1.4") == NULL &&
            dlvsym(RTLD_DEFAULT, "rdma_resolve_addrinfo", "RDMACM_1.3") == NULL,
        "and at no older node");
  check(
      dlvsym(RTLD_DEFAULT, "rdma_resolve_addrinfo", "RDMACM_1.4") == (void*)rdma_resolve_addrinfo &&
          dlvsym(RTLD_DEFAULT, "repoll_wait", "RDMACM_1.5") == (void*)repoll_wait,
      "the program's own references bind to those nodes");
}

/* The next event of the channel, or NULL when none comes within 5 s. */
static struct rdma_cm_event* next_event(struct rdma_event_channel* channel) {
  struct pollfd p = {.fd = channel->fd, .events = POLLIN};
  struct rdma_cm_event* e = NULL;
  if (poll(&p, 1, 5000) != 1 || rdma_get_cm_event(channel, &e)) return NULL;
  return e;
}

static int no_event_pending(struct rdma_event_channel* channel) {
  struct pollfd p = {.fd = channel->fd, .events = POLLIN};
  return poll(&p, 1, 100) == 0;
}

static int is_address(const struct rdma_addrinfo* info, const char* ip, int port) {
  const struct sockaddr_in want = ipv4_address(ip, port);
  const struct sockaddr_in* got = (const struct sockaddr_in*)info->ai_dst_addr;
  return got && info->ai_dst_len == sizeof want && got->sin_family == AF_INET &&
         got->sin_port == want.sin_port && got->sin_addr.s_addr == want.sin_addr.s_addr;
}

static void addrinfo_resolution(struct rdma_event_channel* channel, const char* ip, int port) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct rdma_cm_id* id = NULL;
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  struct rdma_addrinfo* info = NULL;
  check(failed_with(rdma_query_addrinfo(id, &info), ENOENT),
        "rdma_query_addrinfo before any resolution: ENOENT");
  check(failed_with(rdma_query_addrinfo(id, NULL), EINVAL),
        "rdma_query_addrinfo with no place for the result: EINVAL");

  struct rdma_addrinfo hints = {.ai_flags = RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP};
  check(rdma_resolve_addrinfo(id, ip, service, &hints) == 0, "rdma_resolve_addrinfo starts");
  check(failed_with(rdma_resolve_addrinfo(id, ip, service, &hints), EBUSY),
        "a second one before the result is taken: EBUSY");
  struct rdma_cm_event* e = next_event(channel);
  check(e && (int)e->event == RDMA_CM_EVENT_ADDRINFO_RESOLVED && e->status == 0 && e->id == id,
        "RDMA_CM_EVENT_ADDRINFO_RESOLVED comes for the id, status 0");
  check(!strcmp(rdma_event_str((enum rdma_cm_event_type)RDMA_CM_EVENT_ADDRINFO_RESOLVED),
                "RDMA_CM_EVENT_ADDRINFO_RESOLVED") &&
            !strcmp(rdma_event_str((enum rdma_cm_event_type)RDMA_CM_EVENT_ADDRINFO_ERROR),
                    "RDMA_CM_EVENT_ADDRINFO_ERROR"),
        "rdma_event_str names the addrinfo events");
  if (e) rdma_ack_cm_event(e);
  check(rdma_query_addrinfo(id, &info) == 0 && info && is_address(info, ip, port),
        "rdma_query_addrinfo returns the address resolved");
  rdma_freeaddrinfo(info);
  check(failed_with(rdma_query_addrinfo(id, &info), ENOENT), "and hands it over once");

  errno = 0;
  check(rdma_resolve_addrinfo(id, "not-an-address", service, &hints) == -1 && errno != 0,
        "a look-up that fails fails the call, errno set");
  check(no_event_pending(channel), "and posts no event");
  check(rdma_resolve_addrinfo(id, ip, service, &hints) == 0,
        "the id resolves again after a failed look-up");
  e = next_event(channel);
  check(e && (int)e->event == RDMA_CM_EVENT_ADDRINFO_RESOLVED, "with its event");
  if (e) rdma_ack_cm_event(e);
  check(rdma_destroy_id(id) == 0, "an id whose result was never taken is destroyed");

  // RAI_SA: an IB service, asked of the SA from a bound id.
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  struct rdma_addrinfo sa = {.ai_flags = RAI_SA | RAI_DNS};
  check(failed_with(rdma_resolve_addrinfo(id, NULL, "0x1000000000000001", &sa), ENOTSUP),
        "RAI_SA with RAI_DNS: ENOTSUP");
  sa.ai_flags = RAI_SA;
  check(failed_with(rdma_resolve_addrinfo(id, ip, "0x1000000000000001", &sa), ENOTSUP),
        "RAI_SA with a node: ENOTSUP");
  check(failed_with(rdma_resolve_addrinfo(id, NULL, NULL, &sa), EINVAL),
        "RAI_SA with no service: EINVAL");
  check(failed_with(rdma_resolve_addrinfo(id, NULL, "0x1000000000000001", &sa), EINVAL),
        "RAI_SA on an id bound to no port: EINVAL");
  struct sockaddr_in local = ipv4_address(ip, 0);
  if (rdma_bind_addr(id, (struct sockaddr*)&local)) die("rdma_bind_addr");
  check(rdma_resolve_addrinfo(id, NULL, "0x1000000000000001", &sa) == 0,
        "RAI_SA on a bound id asks the SA");
  e = next_event(channel);
  check(e && (int)e->event == RDMA_CM_EVENT_ADDRINFO_ERROR && e->status < 0 && e->id == id,
        "a service the SA does not know: RDMA_CM_EVENT_ADDRINFO_ERROR, status < 0");
  if (e) rdma_ack_cm_event(e);
  check(failed_with(rdma_query_addrinfo(id, &info), ENOENT), "with nothing to query");
  check(rdma_resolve_addrinfo(id, ip, service, &hints) == 0,
        "once the error is taken the id may resolve again");
  e = next_event(channel);
  if (e) rdma_ack_cm_event(e);
  check(rdma_query_addrinfo(id, &info) == 0 && is_address(info, ip, port), "and query it");
  rdma_freeaddrinfo(info);
  rdma_destroy_id(id);

  // rdma_getaddrinfo takes RAI_SA as well: each port asks its SA.
  struct rdma_addrinfo* res = NULL;
  check(failed_with(rdma_getaddrinfo(ip, "0x1000000000000001", &sa, &res), EOPNOTSUPP),
        "rdma_getaddrinfo with RAI_SA and a node: EOPNOTSUPP");
  check(failed_with(rdma_getaddrinfo(NULL, NULL, &sa, &res), EINVAL),
        "rdma_getaddrinfo with RAI_SA and no service: EINVAL");
  check(failed_with(rdma_getaddrinfo(NULL, "0x1000000000000001", &sa, &res), ENOENT),
        "rdma_getaddrinfo of a service no SA knows: ENOENT");

  // A synchronous id: the call returns with its event.
  if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  check(rdma_resolve_addrinfo(id, ip, service, &hints) == 0 && id->event &&
            (int)id->event->event == RDMA_CM_EVENT_ADDRINFO_RESOLVED,
        "a synchronous id's rdma_resolve_addrinfo returns with its event in id->event");
  check(rdma_query_addrinfo(id, &info) == 0 && is_address(info, ip, port),
        "and its result can be queried");
  rdma_freeaddrinfo(info);
  rdma_destroy_id(id);
}

/* rdma-core's rdma_cm_event.param.arg: the union's first 8 bytes (Debian
 * 12's header has no such member). */
static uint64_t event_arg(const struct rdma_cm_event* e) {
  uint64_t arg;
  memcpy(&arg, &e->param, sizeof arg);
  return arg;
}

struct waiter {
  struct rdma_event_channel* channel;
  struct rdma_cm_event* event;
};

static void* wait_for_event(void* arg) {
  struct waiter* w = arg;
  if (rdma_get_cm_event(w->channel, &w->event)) w->event = NULL;
  return NULL;
}

static void user_events(struct rdma_event_channel* channel) {
  struct rdma_cm_id* id = NULL;
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  const uint64_t arg = 0x0123456789abcdefull;
  check(rdma_write_cm_event(id, (enum rdma_cm_event_type)RDMA_CM_EVENT_USER, -42, arg) == 0,
        "rdma_write_cm_event(RDMA_CM_EVENT_USER)");
  struct rdma_cm_event* e = next_event(channel);
  check(e && (int)e->event == RDMA_CM_EVENT_USER && e->id == id && e->status == -42 &&
            event_arg(e) == arg,
        "the user event comes on the id's channel with its status and argument");
  if (e) rdma_ack_cm_event(e);
  check(failed_with(rdma_write_cm_event(id, (enum rdma_cm_event_type)RDMA_CM_EVENT_INTERNAL, 0, 0),
                    EINVAL) &&
            failed_with(rdma_write_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, 0), EINVAL),
        "any other event type: EINVAL");
  check(no_event_pending(channel), "and nothing is posted");

  // What the call is for: waking a thread that waits on the channel.
  struct waiter w = {.channel = channel};
  pthread_t thread;
  if (pthread_create(&thread, NULL, wait_for_event, &w)) die("pthread_create");
  usleep(100 * 1000);
  check(rdma_write_cm_event(id, (enum rdma_cm_event_type)RDMA_CM_EVENT_USER, 0, 7) == 0,
        "rdma_write_cm_event while a thread waits for an event");
  alarm(10);  // a thread never woken hangs the join
  pthread_join(thread, NULL);
  alarm(0);
  check(w.event && (int)w.event->event == RDMA_CM_EVENT_USER && event_arg(w.event) == 7,
        "wakes that thread with the event");
  if (w.event) rdma_ack_cm_event(w.event);
  check(rdma_destroy_id(id) == 0, "rdma_destroy_id after its user events are acknowledged");
}

/* Waits on the instance; returns the number of events and their data. */
static int wait_data(int ep, int maxevents, int timeout, uint64_t* data, uint32_t* events) {
  struct epoll_event got[8];
  const int n = repoll_wait(ep, got, maxevents, timeout);
  for (int i = 0; i < n; ++i) {
    data[i] = got[i].data.u64;
    events[i] = got[i].events;
  }
  return n;
}

static int ctl(int ep, int op, int fd, uint32_t events, uint64_t data) {
  struct epoll_event e = {.events = events, .data.u64 = data};
  return repoll_ctl(ep, op, fd, &e);
}

struct later {
  int ep;       // the instance to add `fd` to, or -1
  int fd;       // written a byte, then added; or an rsocket written to
  int rsocket;  // whether fd is an rsocket
};

static void* act_later(void* arg) {
  const struct later* l = arg;
  usleep(150 * 1000);
  if (l->rsocket) {
    if (rwrite(l->fd, "x", 1) != 1) perror("rwrite");
  } else {
    if (write(l->fd, "x", 1) != 1) perror("write");
  }
  return NULL;
}

static void* add_later(void* arg) {
  const struct later* l = arg;
  usleep(150 * 1000);
  if (ctl(l->ep, EPOLL_CTL_ADD, l->fd, EPOLLIN, 4)) perror("repoll_ctl");
  return NULL;
}

enum { kListener = 1, kClient = 2, kAccepted = 3, kPipe = 4 };

static void repoll_over_rsockets(const char* ip, int port) {
  const struct sockaddr_in addr = ipv4_address(ip, port);
  const int listener = rsocket(AF_INET, SOCK_STREAM, 0);
  const int client = rsocket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0 || client < 0) die("rsocket");
  if (rbind(listener, (const struct sockaddr*)&addr, sizeof addr) || rlisten(listener, 4))
    die("rbind/rlisten");
  if (rfcntl(client, F_SETFL, O_NONBLOCK)) die("rfcntl");
  if (rconnect(client, (const struct sockaddr*)&addr, sizeof addr) && errno != EINPROGRESS)
    die("rconnect");

  const int ep = repoll_create(EPOLL_CLOEXEC);
  check(ep >= 0 && (fcntl(ep, F_GETFD) & FD_CLOEXEC), "repoll_create(EPOLL_CLOEXEC)");
  uint64_t data[8];
  uint32_t events[8];
  check(ctl(ep, EPOLL_CTL_ADD, listener, EPOLLIN, kListener) == 0 &&
            ctl(ep, EPOLL_CTL_ADD, client, EPOLLOUT, kClient) == 0,
        "EPOLL_CTL_ADD the listener (EPOLLIN) and the connecting client (EPOLLOUT)");
  int n = wait_data(ep, 8, 5000, data, events);
  check(n == 1 && data[0] == kListener && (events[0] & EPOLLIN),
        "the connection request makes the listener readable, the client not yet writable");
  const int accepted = raccept(listener, NULL, NULL);
  check(accepted >= 0, "raccept");
  n = wait_data(ep, 8, 5000, data, events);
  check(n == 1 && data[0] == kClient && (events[0] & EPOLLOUT),
        "then the connected client is writable");

  check(ctl(ep, EPOLL_CTL_MOD, client, EPOLLIN, kClient) == 0 &&
            ctl(ep, EPOLL_CTL_ADD, accepted, EPOLLIN, kAccepted) == 0,
        "EPOLL_CTL_MOD the client to EPOLLIN, EPOLL_CTL_ADD the accepted socket");
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  check(wait_data(ep, 8, 0, data, events) == 0 && elapsed_ms(&t0) < 100,
        "nothing readable: timeout 0 returns 0 at once");
  clock_gettime(CLOCK_MONOTONIC, &t0);
  n = wait_data(ep, 8, 300, data, events);
  const long waited = elapsed_ms(&t0);
  check(n == 0 && waited >= 290 && waited < 3000, "timeout 300 returns 0 after 300 ms");

  check(rwrite(client, "ping", 4) == 4, "rwrite on the client");
  n = wait_data(ep, 8, 5000, data, events);
  check(n == 1 && data[0] == kAccepted && (events[0] & EPOLLIN),
        "the accepted socket is readable, reported with its data");
  char buf[8];
  check(rread(accepted, buf, sizeof buf) == 4 && !memcmp(buf, "ping", 4), "rread");

  // Waits that sleep: woken by data, and by a descriptor added meanwhile.
  int pipe_fds[2];
  if (pipe(pipe_fds)) die("pipe");
  struct later send_later = {.ep = -1, .fd = client, .rsocket = 1};
  pthread_t thread;
  pthread_create(&thread, NULL, act_later, &send_later);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  n = wait_data(ep, 8, 5000, data, events);
  pthread_join(thread, NULL);
  check(n == 1 && data[0] == kAccepted && elapsed_ms(&t0) >= 100,
        "a sleeping wait wakes for data sent meanwhile");
  check(rread(accepted, buf, sizeof buf) == 1, "rread it");
  if (write(pipe_fds[1], "y", 1) != 1) die("write");
  struct later add = {.ep = ep, .fd = pipe_fds[0]};
  pthread_create(&thread, NULL, add_later, &add);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  n = wait_data(ep, 8, 5000, data, events);
  pthread_join(thread, NULL);
  check(n == 1 && data[0] == kPipe && elapsed_ms(&t0) >= 100,
        "a sleeping wait sees a ready descriptor added meanwhile (a pipe, next to rsockets)");

  check(rwrite(client, "z", 1) == 1, "with both the pipe and the accepted socket readable");
  usleep(100 * 1000);
  check(wait_data(ep, 1, 1000, data, events) == 1, "maxevents 1 gives one event");
  n = wait_data(ep, 8, 1000, data, events);
  check(n == 2 && data[0] == kAccepted && data[1] == kPipe, "maxevents 8 both, as added");
  check(ctl(ep, EPOLL_CTL_DEL, pipe_fds[0], 0, 0) == 0, "EPOLL_CTL_DEL the pipe");
  n = wait_data(ep, 8, 1000, data, events);
  check(n == 1 && data[0] == kAccepted, "it is no longer reported");
  check(repoll_ctl(ep, EPOLL_CTL_DEL, accepted, NULL) == 0, "EPOLL_CTL_DEL with no event");

  struct epoll_event e = {.events = EPOLLIN};
  check(failed_with(repoll_ctl(ep, EPOLL_CTL_DEL, pipe_fds[0], &e), ENOENT) &&
            failed_with(repoll_ctl(ep, EPOLL_CTL_MOD, pipe_fds[0], &e), ENOENT),
        "EPOLL_CTL_DEL and MOD of a descriptor not in the set: -1, ENOENT");
  check(failed_with(repoll_ctl(ep, EPOLL_CTL_ADD, client, &e), EEXIST),
        "EPOLL_CTL_ADD of one already there: -1, EEXIST");
  check(failed_with(repoll_ctl(ep, 42, client, &e), EINVAL), "an unknown op: -1, EINVAL");
  check(failed_with(repoll_ctl(ep, EPOLL_CTL_ADD, -1, &e), EBADF),
        "a negative descriptor: -1, EBADF");
  check(failed_with(repoll_ctl(ep, EPOLL_CTL_ADD, ep, &e), EINVAL),
        "the instance itself: -1, EINVAL");
  check(failed_with(repoll_ctl(client, EPOLL_CTL_ADD, accepted, &e), EINVAL) &&
            failed_with(repoll_wait(client, &e, 1, 0), EINVAL),
        "a number that is no instance: -1, EINVAL");
  check(failed_with(repoll_wait(ep, &e, 0, 0), EINVAL), "maxevents 0: -1, EINVAL");
  check(rclose(ep) == 0, "rclose of the instance");
  check(failed_with(repoll_wait(ep, &e, 1, 0), EINVAL), "is the end of it");

  rclose(accepted);
  rclose(client);
  rclose(listener);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cm_newer_api ADDR PORT\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);  // what was checked shows even if the alarm ends it
  const char* ip = argv[1];
  const int port = atoi(argv[2]);
  calls_at_their_version_nodes();
  struct rdma_event_channel* channel = rdma_create_event_channel();
  if (!channel) die("rdma_create_event_channel");
  addrinfo_resolution(channel, ip, port);
  user_events(channel);
  rdma_destroy_event_channel(channel);
  repoll_over_rsockets(ip, port + 1);
  return failures ? 1 : 0;
}
