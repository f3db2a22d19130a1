/*
 * The client side of common/umad_protocol.h, in C for the preload shim and
 * ibemu-sm alike.
 */
#define _GNU_SOURCE
#include "umad_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* A connection to the daemon's socket `path` (which may be longer than a
 * sockaddr_un holds: its directory is reached through /proc/self/fd). */
int ibemu_umad_connect(const char* path, int nonblock) {
  const char* slash = strrchr(path, '/');
  if (slash == NULL) {
    errno = ENOENT;
    return -1;
  }
  char dir[PATH_MAX];
  size_t dir_len = (size_t)(slash - path);
  if (dir_len >= sizeof dir) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(dir, path, dir_len);
  dir[dir_len] = '\0';
  int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) return -1;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd, slash + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
  int err = 0;
  if (fd < 0 || connect(fd, (struct sockaddr*)&addr, sizeof addr) != 0) err = errno;
  close(dirfd);
  if (err) {
    if (fd >= 0) close(fd);
    /* No daemon socket behind the name: as if the node did not exist. */
    errno = err == ECONNREFUSED ? ENODEV : err;
    return -1;
  }
  return fd;
}

/* One request and its reply; the socket blocks for the reply. */
int ibemu_umad_round_trip(int fd, const struct ibemu_umad_request* req,
                          struct ibemu_umad_reply* reply) {
  if (send(fd, req, sizeof *req, MSG_NOSIGNAL) != (ssize_t)sizeof *req) return -1;
  for (;;) {
    ssize_t n = recv(fd, reply, sizeof *reply, 0);
    if (n == (ssize_t)sizeof *reply) return 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      /* A non-blocking file: the daemon answers at once, so wait briefly. */
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
      continue;
    }
    errno = EIO;
    return -1;
  }
}
