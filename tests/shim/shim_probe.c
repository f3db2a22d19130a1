/*
 * Drives the preload shim the way libibverbs and the provider do. Run by
 * test_shim.sh under LD_PRELOAD=libibemu-preload.so.
 *
 *   shim_probe active    IBEMU_SYSFS names a tree with uverbs0 (and no uverbs1)
 *   shim_probe inactive  IBEMU_SYSFS unset: everything must behave as without
 *                        the shim
 *
 * Prints one "ok: ..." or "not ok: ..." line per check; exits 1 if any failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif

#define UVERBS0 "/dev/infiniband/uverbs0"

static int failures;

static void check(int ok, const char* what) {
  if (ok) {
    printf("ok: %s\n", what);
  } else {
    printf("not ok: %s (errno %d: %s)\n", what, errno, strerror(errno));
    failures++;
  }
}

/* The command libibverbs writes for ibv_create_comp_channel(). */
struct create_channel_cmd {
  struct ib_uverbs_cmd_hdr hdr;
  struct ib_uverbs_create_comp_channel core;
};

static int create_channel(int cmd_fd, ssize_t* written) {
  struct ib_uverbs_create_comp_channel_resp resp = {.fd = UINT32_MAX};
  struct create_channel_cmd cmd = {
      .hdr = {.command = IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL,
              .in_words = sizeof(cmd) / 4,
              .out_words = sizeof(resp) / 4},
      .core = {.response = (uintptr_t)&resp},
  };
  *written = write(cmd_fd, &cmd, sizeof cmd);
  return *written == (ssize_t)sizeof cmd ? (int)resp.fd : -1;
}

static int count_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

static void* thread_main(void* arg) {
  (void)arg;
  for (int i = 0; i < 200; i++) {
    int fd = open(UVERBS0, O_RDWR | O_CLOEXEC);
    ssize_t n;
    int ch = create_channel(fd, &n);
    if (fd < 0 || ch < 0) return (void*)1;
    close(ch);
    close(fd);
  }
  return NULL;
}

/* Sends an RDMA_NLDEV request with no attributes; returns send's result. */
static ssize_t send_nldev(int s, unsigned op, unsigned flags, unsigned seq) {
  struct nlmsghdr h = {.nlmsg_len = NLMSG_HDRLEN,
                       .nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op),
                       .nlmsg_flags = (__u16)(NLM_F_REQUEST | flags),
                       .nlmsg_seq = seq};
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  return sendto(s, &h, sizeof h, 0, (struct sockaddr*)&kernel, sizeof kernel);
}

/* The socket calls libmnl and libnl make, on the emulated NETLINK_RDMA. */
static void probe_netlink(void) {
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  check(s >= 0, "socket(NETLINK_RDMA) opens");
  if (s < 0) return;
  int v = 1;
  check(setsockopt(s, SOL_NETLINK, NETLINK_EXT_ACK, &v, sizeof v) == 0,
        "setsockopt(NETLINK_EXT_ACK) is accepted");
  socklen_t len = sizeof v;
  check(getsockopt(s, SOL_SOCKET, SO_PROTOCOL, &v, &len) == 0 && v == NETLINK_RDMA,
        "getsockopt(SO_PROTOCOL) says NETLINK_RDMA");
  struct sockaddr_nl local = {.nl_family = AF_NETLINK};
  check(bind(s, (struct sockaddr*)&local, sizeof local) == 0, "bind(port 0) picks a port");
  len = sizeof local;
  check(getsockname(s, (struct sockaddr*)&local, &len) == 0 && len == sizeof local &&
            local.nl_family == AF_NETLINK && local.nl_pid != 0,
        "getsockname() gives a sockaddr_nl with the port");

  check(send_nldev(s, RDMA_NLDEV_CMD_GET, NLM_F_DUMP, 7) == NLMSG_HDRLEN,
        "sendto(kernel) takes a device dump request");
  struct pollfd pfd = {.fd = s, .events = POLLIN};
  check(poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN), "poll() sees the replies at once");
  char buf[4096] __attribute__((aligned(4)));
  struct sockaddr_nl from;
  struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
  struct msghdr msg = {
      .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1};
  int devices = 0, done = 0, from_kernel = 1, ours = 1;
  for (int i = 0; i < 8 && !done; i++) {
    ssize_t n = recvmsg(s, &msg, 0);
    if (n <= 0) break;
    from_kernel &=
        msg.msg_namelen == sizeof from && from.nl_family == AF_NETLINK && from.nl_pid == 0;
    for (struct nlmsghdr* h = (struct nlmsghdr*)buf; NLMSG_OK(h, n); h = NLMSG_NEXT(h, n)) {
      ours &= h->nlmsg_seq == 7 && h->nlmsg_pid == local.nl_pid;
      if (h->nlmsg_type == NLMSG_DONE) done = 1;
      if (h->nlmsg_type == RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET)) devices++;
    }
  }
  check(devices == 1 && done, "recvmsg() gets one device and NLMSG_DONE");
  check(from_kernel, "replies come from the kernel's address (port 0)");
  check(ours, "replies carry the request's sequence number and the socket's port");
  errno = 0;
  check(recv(s, buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN, "nothing more is queued");

  int d = dup(s);
  check(d >= 0 && send_nldev(d, RDMA_NLDEV_CMD_RES_GET, NLM_F_DUMP, 8) == NLMSG_HDRLEN,
        "a dup()ed socket takes requests too");
  struct sockaddr_nl from2;
  socklen_t from_len = sizeof from2;
  ssize_t n = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr*)&from2, &from_len);
  struct nlmsgerr err;
  if (n >= (ssize_t)(NLMSG_HDRLEN + sizeof err)) memcpy(&err, buf + NLMSG_HDRLEN, sizeof err);
  check(n > 0 && ((struct nlmsghdr*)buf)->nlmsg_type == NLMSG_ERROR && err.error == -EOPNOTSUPP &&
            from_len == sizeof from2 && from2.nl_family == AF_NETLINK,
        "an unsupported command gets NLMSG_ERROR -EOPNOTSUPP (recvfrom)");
  if (d >= 0) close(d);

  struct sockaddr_nl peer = {.nl_family = AF_NETLINK, .nl_pid = 12345};
  errno = 0;
  check(sendto(s, buf, NLMSG_HDRLEN, 0, (struct sockaddr*)&peer, sizeof peer) == -1 &&
            errno == ECONNREFUSED,
        "sendto() another program's port: ECONNREFUSED");
  struct sockaddr_nl other = {.nl_family = AF_NETLINK, .nl_pid = local.nl_pid + 1};
  errno = 0;
  check(bind(s, (struct sockaddr*)&other, sizeof other) == -1 && errno == EINVAL,
        "bind() to another port once bound: EINVAL");

  /* Closed behind the shim's back, the number taken by a plain socket: the
   * shim must keep its hands off it. */
  syscall(SYS_close, s);
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) == 0) {
    if (pair[0] != s) dup2(pair[0], s);
    if (pair[0] != s) close(pair[0]);
    check(write(s, "x", 1) == 1 && read(pair[1], buf, sizeof buf) == 1 && buf[0] == 'x',
          "a reused fd number is a plain socket again");
    close(pair[1]);
  }
  close(s);
}

static void probe_active(void) {
  int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ibemu_shim_active");
  check(active != NULL && active() == 1, "ibemu_shim_active() is exported and returns 1");

  struct stat st;
  check(stat(UVERBS0, &st) == 0 && S_ISCHR(st.st_mode), "stat(uverbs0) is a character device");
  check(lstat(UVERBS0, &st) == 0 && S_ISCHR(st.st_mode), "lstat(uverbs0) is a character device");
  check(access(UVERBS0, R_OK | W_OK) == 0, "access(uverbs0, R_OK|W_OK)");
  errno = 0;
  check(stat("/dev/infiniband/uverbs1", &st) == -1 && errno == ENOENT,
        "stat(uverbs1) absent from the tree fails with ENOENT");
  /* libc's realpath() answers with the fake tree's own name, which stays
   * valid whatever the caller does with it. */
  char* rp = realpath("/sys/class/infiniband/fake0", NULL);
  const char* tail = "/class/infiniband/fake0";
  check(rp != NULL && strlen(rp) > strlen(tail) &&
            strcmp(rp + strlen(rp) - strlen(tail), tail) == 0 &&
            syscall(SYS_faccessat, AT_FDCWD, rp, F_OK) == 0,
        "realpath(/sys/class/infiniband/fake0) names the fake tree");
  free(rp);
  rp = realpath(UVERBS0, NULL);
  check(rp != NULL && strcmp(rp, UVERBS0) == 0, "realpath(uverbs0) is itself");
  free(rp);

  DIR* d = opendir("/dev/infiniband");
  int seen = 0;
  for (struct dirent* e; d != NULL && (e = readdir(d)) != NULL;)
    seen |= strcmp(e->d_name, "uverbs0") == 0;
  if (d) closedir(d);
  check(seen, "opendir(/dev/infiniband) lists uverbs0");

  int fds_before = count_fds();
  int fd = open(UVERBS0, O_RDWR | O_CLOEXEC);
  check(fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode),
        "open(uverbs0) gives a character-device fd");
  errno = 0;
  check(ioctl(fd, 0xc0181b01, NULL) == -1 && errno == ENOTTY,
        "ioctl on it fails with ENOTTY (libibverbs then uses write)");

  ssize_t n;
  int ch = create_channel(fd, &n);
  check(n == (ssize_t)sizeof(struct create_channel_cmd) && ch >= 0,
        "CREATE_COMP_CHANNEL returns the full length and a fd");
  check(fcntl(ch, F_GETFD) == FD_CLOEXEC, "channel fd is close-on-exec");
  struct pollfd pfd = {.fd = ch, .events = POLLIN};
  check(poll(&pfd, 1, 0) == 0, "idle channel polls as nothing (no POLLHUP)");
  int fl = fcntl(ch, F_GETFL);
  fcntl(ch, F_SETFL, fl | O_NONBLOCK);
  uint64_t ev = 0;
  errno = 0;
  check(read(ch, &ev, sizeof ev) == -1 && errno == EAGAIN,
        "O_NONBLOCK read of an idle channel gives EAGAIN, not end-of-file");
  fcntl(ch, F_SETFL, fl);

  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", ch);
  int w = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
  check(w >= 0, "provider-style writer opens on /proc/self/fd/<channel>");
  uint64_t out = 0x1122334455667788ull;
  check(write(w, &out, sizeof out) == (ssize_t)sizeof out, "8-byte event written");
  check(read(ch, &ev, sizeof ev) == (ssize_t)sizeof ev && ev == out,
        "blocking read on the channel returns the same 8 bytes");
  close(w);
  pfd.revents = 0;
  check(poll(&pfd, 1, 0) == 0, "channel still idle (no POLLHUP) after the writer closed");
  close(ch);

  struct create_channel_cmd bad = {
      .hdr = {.command = IB_USER_VERBS_CMD_QUERY_DEVICE, .in_words = sizeof(bad) / 4}};
  errno = 0;
  check(write(fd, &bad, sizeof bad) == -1 && errno == ENOSYS, "other commands fail with ENOSYS");
  bad.hdr.command = IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL;
  bad.hdr.in_words = 3;
  errno = 0;
  check(write(fd, &bad, sizeof bad) == -1 && errno == EINVAL,
        "in_words not matching the length fails with EINVAL");
  errno = 0;
  check(write(fd, &bad, 4) == -1 && errno == EINVAL, "short command fails with EINVAL");

  int d1 = dup(fd);
  ch = create_channel(d1, &n);
  check(ch >= 0, "dup() of the uverbs fd still takes commands");
  close(ch);
  int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
  ch = create_channel(d2, &n);
  check(d2 >= 100 && ch >= 0, "fcntl(F_DUPFD_CLOEXEC) of the uverbs fd still takes commands");
  close(ch);

  /* A regular file dup2()ed over a uverbs fd is an ordinary file again. */
  char tmpl[] = "/tmp/shim_probe.XXXXXX";
  int tf = mkstemp(tmpl);
  unlink(tmpl);
  check(dup2(tf, d2) == d2 && write(d2, "abc", 3) == 3, "write after dup2 over it passes through");
  close(d2);
  close(tf);
  close(d1);
  int fdnum = fd;
  close(fd);
  check(count_fds() == fds_before, "closing the channels released the shim's write ends");

  /* The number of a closed uverbs fd is reused by an ordinary file. */
  tf = open("/tmp", O_TMPFILE | O_RDWR, 0600);
  check(tf == fdnum && write(tf, "hello", 5) == 5, "write on a reused fd number passes through");
  close(tf);
  /* Same when the uverbs fd was closed where the shim cannot see it. */
  fd = open(UVERBS0, O_RDWR | O_CLOEXEC);
  syscall(SYS_close, fd);
  tf = open("/tmp", O_TMPFILE | O_RDWR, 0600);
  check(tf == fd && write(tf, "hello", 5) == 5,
        "write on an fd number reused after a raw close passes through");
  close(tf);

  fd = open(UVERBS0, O_RDWR | O_CLOEXEC);
  ch = create_channel(fd, &n);
  close_range((unsigned)ch, (unsigned)ch, 0);
  close(fd);
  check(count_fds() == fds_before, "close_range() of a channel releases the shim's write end");

  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_main, NULL);
  int thread_fail = 0;
  for (int i = 0; i < 4; i++) {
    void* r;
    pthread_join(t[i], &r);
    thread_fail |= r != NULL;
  }
  check(!thread_fail && count_fds() == fds_before,
        "4 threads x 200 open/create-channel/close leak nothing");

  probe_netlink();
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  check(s >= 0, "socket(NETLINK_ROUTE) still works");
  if (s >= 0) close(s);
}

static void probe_inactive(void) {
  int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ibemu_shim_active");
  check(active != NULL, "shim is loaded");

  /* Whatever the machine has, the shim must give the same answer as the
   * kernel does without it. */
  struct stat st;
  errno = 0;
  int r1 = stat(UVERBS0, &st);
  int e1 = errno;
  errno = 0;
  int r2 = (int)syscall(SYS_newfstatat, AT_FDCWD, UVERBS0, &st, 0);
  int e2 = errno;
  check(r1 == r2 && e1 == e2, "stat(uverbs0) is untouched");
  errno = 0;
  int fd = open(UVERBS0, O_RDWR | O_CLOEXEC);
  e1 = errno;
  if (fd >= 0) close(fd);
  errno = 0;
  int fd2 = (int)syscall(SYS_openat, AT_FDCWD, UVERBS0, O_RDWR | O_CLOEXEC);
  e2 = errno;
  if (fd2 >= 0) close(fd2);
  check((fd >= 0) == (fd2 >= 0) && e1 == e2, "open(uverbs0) is untouched");
  errno = 0;
  r1 = access("/sys/class/infiniband_verbs/abi_version", F_OK);
  e1 = errno;
  errno = 0;
  r2 = (int)syscall(SYS_faccessat, AT_FDCWD, "/sys/class/infiniband_verbs/abi_version", F_OK);
  e2 = errno;
  check(r1 == r2 && e1 == e2, "access(/sys/class/infiniband_verbs/abi_version) is untouched");

  errno = 0;
  int s1 = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  e1 = errno;
  if (s1 >= 0) close(s1);
  errno = 0;
  int s2 = (int)syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA);
  e2 = errno;
  if (s2 >= 0) close(s2);
  check((s1 >= 0) == (s2 >= 0) && e1 == e2, "socket(NETLINK_RDMA) is untouched");
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "active") == 0) {
    probe_active();
  } else if (argc == 2 && strcmp(argv[1], "inactive") == 0) {
    probe_inactive();
  } else {
    fprintf(stderr, "usage: %s active|inactive\n", argv[0]);
    return 2;
  }
  return failures ? 1 : 0;
}
