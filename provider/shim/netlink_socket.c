/*
 * The emulated NETLINK_RDMA socket (shim_netlink.h): an AF_UNIX datagram
 * socket bound to an abstract name of its own, "\0ibemu-nl-<pid>-<n>". The
 * program's requests never reach it; their replies (rdma_netlink.c) are
 * datagrams the socket sends to itself, so every way of waiting for and
 * reading them (recv, poll, epoll, O_NONBLOCK) behaves as on netlink.
 *
 * What netlink has and AF_UNIX has not — the sockaddr_nl addresses, the
 * port id, SOL_NETLINK options — is kept here per fd. The underlying socket
 * is reached with raw system calls, never through the shim's own wrappers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/netlink.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "shim_netlink.h"
#include "shim_umad.h"

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif
#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

#define FD_SLOTS SHIM_UMAD_FD_SLOTS
#define REQUEST_MAX 16384

static const char k_name_prefix[] = "ibemu-nl-"; /* after the abstract name's NUL */
#define NAME_PREFIX_LEN (sizeof k_name_prefix - 1)

/* Port id of each emulated socket: 0 until bound. */
static _Atomic uint32_t g_portid[FD_SLOTS];
/* SOCK_RAW or SOCK_DGRAM, as the program asked. */
static _Atomic uint8_t g_type[FD_SLOTS];
static atomic_uint g_sockets; /* names and automatic port ids handed out */

static int fail(int error) {
  errno = error;
  return -1;
}

static size_t append_number(char* s, uint32_t v) {
  char digits[10];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) s[i] = digits[n - 1 - i];
  return n;
}

static socklen_t own_name(uint32_t pid, uint32_t n, struct sockaddr_un* a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  char* p = a->sun_path + 1; /* abstract: sun_path[0] stays NUL */
  memcpy(p, k_name_prefix, NAME_PREFIX_LEN);
  p += NAME_PREFIX_LEN;
  p += append_number(p, pid);
  *p++ = '-';
  p += append_number(p, n);
  return (socklen_t)(p - (char*)a);
}

int shim_nl_socket(int type) {
  int base = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (base != SOCK_RAW && base != SOCK_DGRAM) return fail(ESOCKTNOSUPPORT);
  int fd =
      (int)syscall(SYS_socket, AF_UNIX, SOCK_DGRAM | (type & (SOCK_CLOEXEC | SOCK_NONBLOCK)), 0);
  if (fd < 0) return -1;
  if ((unsigned)fd >= FD_SLOTS) {
    syscall(SYS_close, fd);
    return fail(EMFILE);
  }
  /* A name left behind by an earlier process with this pid (inherited by
   * its children) is skipped. */
  for (int attempt = 0;; attempt++) {
    struct sockaddr_un a;
    socklen_t len = own_name((uint32_t)getpid(), atomic_fetch_add(&g_sockets, 1), &a);
    if (syscall(SYS_bind, fd, &a, len) == 0) break;
    if (errno != EADDRINUSE || attempt == 64) {
      int saved = errno;
      syscall(SYS_close, fd);
      return fail(saved);
    }
  }
  atomic_store(&g_portid[fd], 0);
  atomic_store(&g_type[fd], (uint8_t)base);
  return fd;
}

int shim_nl_is_ours(int fd) {
  struct sockaddr_un a;
  socklen_t len = sizeof a;
  int saved = errno;
  long rc = syscall(SYS_getsockname, fd, &a, &len);
  errno = saved;
  return rc == 0 && a.sun_family == AF_UNIX && len > 1 + NAME_PREFIX_LEN && a.sun_path[0] == '\0' &&
         memcmp(a.sun_path + 1, k_name_prefix, NAME_PREFIX_LEN) == 0;
}

void shim_nl_inherit(int oldfd, int newfd) {
  atomic_store(&g_portid[newfd], atomic_load(&g_portid[oldfd]));
  atomic_store(&g_type[newfd], atomic_load(&g_type[oldfd]));
}

/* The kernel gives a socket bound to port 0 the process id if that is
 * free, else a negative number of its own. */
static uint32_t automatic_portid(void) {
  static atomic_uint handed_out;
  unsigned n = atomic_fetch_add(&handed_out, 1);
  return n == 0 ? (uint32_t)getpid() : (uint32_t)-4096 - n;
}

static uint32_t ensure_bound(int fd) {
  uint32_t id = atomic_load(&g_portid[fd]);
  if (id != 0) return id;
  uint32_t expected = 0;
  uint32_t fresh = automatic_portid();
  return atomic_compare_exchange_strong(&g_portid[fd], &expected, fresh) ? fresh : expected;
}

static int netlink_address(const struct sockaddr* addr, socklen_t len, struct sockaddr_nl* out) {
  if (addr == NULL || len < (socklen_t)sizeof *out) return -EINVAL;
  memcpy(out, addr, sizeof *out);
  return out->nl_family == AF_NETLINK ? 0 : -EINVAL;
}

int shim_nl_bind(int fd, const struct sockaddr* addr, socklen_t len) {
  struct sockaddr_nl a;
  if (netlink_address(addr, len, &a) != 0) return fail(EINVAL);
  uint32_t bound = atomic_load(&g_portid[fd]);
  if (bound != 0) return a.nl_pid == 0 || a.nl_pid == bound ? 0 : fail(EINVAL);
  if (a.nl_pid == 0) {
    ensure_bound(fd);
    return 0;
  }
  uint32_t expected = 0;
  if (!atomic_compare_exchange_strong(&g_portid[fd], &expected, a.nl_pid) && expected != a.nl_pid)
    return fail(EINVAL);
  return 0;
}

/* Netlink's only peer here is the kernel (port 0); no other program
 * listens on an emulated socket. */
int shim_nl_connect(int fd, const struct sockaddr* addr, socklen_t len) {
  struct sockaddr_nl a;
  if (netlink_address(addr, len, &a) != 0) return fail(EINVAL);
  if (a.nl_pid != 0) return fail(ECONNREFUSED);
  ensure_bound(fd);
  return 0;
}

static void give_address(uint32_t pid, struct sockaddr* addr, socklen_t* len) {
  struct sockaddr_nl a = {.nl_family = AF_NETLINK, .nl_pid = pid};
  if (addr != NULL && len != NULL) memcpy(addr, &a, *len < sizeof a ? *len : sizeof a);
  if (len != NULL) *len = sizeof a;
}

int shim_nl_getsockname(int fd, struct sockaddr* addr, socklen_t* len) {
  if (addr == NULL || len == NULL) return fail(EFAULT);
  give_address(atomic_load(&g_portid[fd]), addr, len);
  return 0;
}

int shim_nl_getpeername(int fd, struct sockaddr* addr, socklen_t* len) {
  (void)fd;
  if (addr == NULL || len == NULL) return fail(EFAULT);
  give_address(0, addr, len);
  return 0;
}

/* SOL_NETLINK options (extended acks, strict checking, multicast groups)
 * change nothing in what this kernel sends; the socket's own options (buffer
 * sizes, timeouts) are the AF_UNIX socket's. */
int shim_nl_setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (level != SOL_NETLINK) return (int)syscall(SYS_setsockopt, fd, level, name, value, len);
  if (value == NULL || len < (socklen_t)sizeof(int)) return fail(EINVAL);
  return 0;
}

static int give_int(int v, void* value, socklen_t* len) {
  if (value == NULL || len == NULL || *len < (socklen_t)sizeof(int)) return fail(EINVAL);
  memcpy(value, &v, sizeof v);
  *len = sizeof v;
  return 0;
}

int shim_nl_getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  if (level == SOL_NETLINK) return give_int(0, value, len);
  if (level == SOL_SOCKET && name == SO_DOMAIN) return give_int(AF_NETLINK, value, len);
  if (level == SOL_SOCKET && name == SO_PROTOCOL) return give_int(NETLINK_RDMA, value, len);
  if (level == SOL_SOCKET && name == SO_TYPE) return give_int(atomic_load(&g_type[fd]), value, len);
  return (int)syscall(SYS_getsockopt, fd, level, name, value, len);
}

/* Queues a reply datagram on the socket itself. */
static int send_to_self(void* ctx, const void* datagram, size_t len) {
  int fd = *(const int*)ctx;
  struct sockaddr_un self;
  socklen_t self_len = sizeof self;
  if (syscall(SYS_getsockname, fd, &self, &self_len) != 0) return -errno;
  if (syscall(SYS_sendto, fd, datagram, len, MSG_DONTWAIT | MSG_NOSIGNAL, &self, self_len) < 0)
    /* The program has let replies pile up unread: netlink's overrun. */
    return errno == EAGAIN ? -ENOBUFS : -errno;
  return 0;
}

ssize_t shim_nl_sendmsg(const char* root, int fd, const struct msghdr* msg) {
  if (msg == NULL || (msg->msg_iov == NULL && msg->msg_iovlen != 0)) return fail(EFAULT);
  if (msg->msg_name != NULL && msg->msg_namelen != 0) {
    struct sockaddr_nl to;
    if (netlink_address(msg->msg_name, msg->msg_namelen, &to) != 0) return fail(EINVAL);
    if (to.nl_pid != 0) return fail(ECONNREFUSED);
  }
  unsigned char request[REQUEST_MAX] __attribute__((aligned(8)));
  size_t len = 0;
  for (size_t i = 0; i < msg->msg_iovlen; i++) {
    const struct iovec* v = &msg->msg_iov[i];
    if (v->iov_len != 0 && v->iov_base == NULL) return fail(EFAULT);
    if (v->iov_len > sizeof request - len) return fail(EMSGSIZE);
    if (v->iov_len != 0) memcpy(request + len, v->iov_base, v->iov_len);
    len += v->iov_len;
  }
  uint32_t portid = ensure_bound(fd);
  int err = shim_rdma_nl_answer(root, portid, request, len, send_to_self, &fd);
  if (err != 0) return fail(-err);
  return (ssize_t)len;
}

ssize_t shim_nl_recvmsg(int fd, struct msghdr* msg, int flags) {
  if (msg == NULL) return fail(EFAULT);
  struct msghdr m = *msg;
  m.msg_name = NULL;
  m.msg_namelen = 0;
  ssize_t n = syscall(SYS_recvmsg, fd, &m, flags);
  if (n < 0) return -1;
  msg->msg_flags = m.msg_flags;
  msg->msg_controllen = m.msg_controllen;
  if (msg->msg_name != NULL) {
    socklen_t len = msg->msg_namelen;
    give_address(0, msg->msg_name, &len);
    msg->msg_namelen = len;
  }
  return n;
}
