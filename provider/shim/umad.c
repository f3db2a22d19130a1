/*
 * umad files in no-kernel mode: /dev/infiniband/umadN opens a connection to
 * the daemon's socket of that port (common/umad_protocol.h). MADs are then
 * read and written on it as on the kernel's file, one struct ib_user_mad per
 * message; this file does what the kernel's file does besides: its ioctls,
 * and read()'s ENOSPC for a buffer too small for the next MAD.
 *
 * Only send/recv are used on the socket: read/write/ioctl are the shim's own
 * wrappers and would come back here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <rdma/ib_user_mad.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../common/umad_client.h"
#include "shim_umad.h"

/* Per file: the OPEN reply's token, by which registrations name the file,
 * and the umad number, whose socket takes them. */
static uint64_t g_token[SHIM_UMAD_FD_SLOTS];
static uint16_t g_index[SHIM_UMAD_FD_SLOTS];

/* A new connection to umad<index>'s socket whose first request is `op`:
 * the fd once the daemon accepted it (*reply says more), or -1 with errno
 * (the daemon's error, if it answered one). */
static int open_connection(unsigned index, uint32_t op, int flags, struct ibemu_umad_reply* reply) {
  char path[PATH_MAX];
  if (shim_umad_socket_path(index, path) != 0) return -1;
  int fd = ibemu_umad_connect(path, 0);
  if (fd < 0) return -1;
  if ((unsigned)fd >= SHIM_UMAD_FD_SLOTS) {
    close(fd);
    errno = EMFILE;
    return -1;
  }
  struct ibemu_umad_request req = {.op = op};
  *reply = (struct ibemu_umad_reply){0};
  if (ibemu_umad_round_trip(fd, &req, reply) != 0 || reply->err != 0) {
    int err = reply->err ? reply->err : errno;
    close(fd);
    errno = err;
    return -1;
  }
  if (flags & O_NONBLOCK) fcntl(fd, F_SETFL, O_NONBLOCK);
  if (!(flags & O_CLOEXEC)) fcntl(fd, F_SETFD, 0);
  return fd;
}

int shim_umad_open(unsigned index, int flags) {
  struct ibemu_umad_reply reply;
  int fd = open_connection(index, IBEMU_UMAD_OPEN, flags, &reply);
  if (fd < 0) return -1;
  g_token[fd] = reply.token;
  g_index[fd] = (uint16_t)index;
  return fd;
}

int shim_issm_open(unsigned index, int flags) {
  struct ibemu_umad_reply reply;
  int fd;
  /* The kernel's open sleeps until the holder closes the file. */
  while ((fd = open_connection(index, IBEMU_UMAD_ISSM, flags, &reply)) < 0 && errno == EBUSY) {
    if (flags & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
  }
  return fd;
}

void shim_umad_inherit(int oldfd, int newfd) {
  g_token[newfd] = g_token[oldfd];
  g_index[newfd] = g_index[oldfd];
}

/* A registration request over a connection of its own (see the protocol). */
static int agent_request(int fd, struct ibemu_umad_request* req, uint32_t* id) {
  char path[PATH_MAX];
  if (shim_umad_socket_path(g_index[fd], path) != 0) return -1;
  int conn = ibemu_umad_connect(path, 0);
  if (conn < 0) return -1;
  req->token = g_token[fd];
  struct ibemu_umad_reply reply;
  int rc = ibemu_umad_round_trip(conn, req, &reply);
  close(conn);
  if (rc != 0) return -1;
  if (reply.err) {
    errno = reply.err;
    return -1;
  }
  if (id) *id = reply.agent_id;
  return 0;
}

/* Both register ioctls carry these fields, each in its own layout; the
 * method mask is 128 bits in both. */
static int register_agent(int fd, uint32_t qpn, uint8_t mgmt_class, uint8_t version,
                          uint8_t rmpp_version, const void* method_mask, uint32_t* id) {
  struct ibemu_umad_request req = {.op = IBEMU_UMAD_REGISTER};
  req.qpn = qpn;
  req.mgmt_class = mgmt_class;
  req.mgmt_class_version = version;
  req.rmpp_version = rmpp_version;
  memcpy(req.method_mask, method_mask, sizeof req.method_mask);
  return agent_request(fd, &req, id);
}

static int register_agent1(int fd, struct ib_user_mad_reg_req* r) {
  return register_agent(fd, r->qpn, r->mgmt_class, r->mgmt_class_version, r->rmpp_version,
                        r->method_mask, &r->id);
}

static int register_agent2(int fd, struct ib_user_mad_reg_req2* r) {
  if (r->flags & ~IB_USER_MAD_REG_FLAGS_CAP) {
    /* The kernel says which flags it knows by writing them back. */
    r->flags = IB_USER_MAD_REG_FLAGS_CAP;
    errno = EINVAL;
    return -1;
  }
  return register_agent(fd, r->qpn, r->mgmt_class, r->mgmt_class_version, r->rmpp_version,
                        r->method_mask, &r->id);
}

int shim_umad_ioctl(int fd, unsigned long request, void* arg) {
  switch (request) {
    case IB_USER_MAD_ENABLE_PKEY:
      return 0; /* the header always has pkey_index (ABI 5 with P_Keys) */
    case IB_USER_MAD_REGISTER_AGENT:
      return register_agent1(fd, arg);
    case IB_USER_MAD_REGISTER_AGENT2:
      return register_agent2(fd, arg);
    case IB_USER_MAD_UNREGISTER_AGENT: {
      struct ibemu_umad_request req = {.op = IBEMU_UMAD_UNREGISTER};
      memcpy(&req.agent_id, arg, sizeof req.agent_id);
      return agent_request(fd, &req, NULL);
    }
    default:
      errno = ENOTTY;
      return -1;
  }
}

ssize_t shim_umad_read(int fd, void* buf, size_t count) {
  if (count < sizeof(struct ib_user_mad_hdr)) {
    errno = EINVAL;
    return -1;
  }
  ssize_t next = recv(fd, buf, sizeof(struct ib_user_mad_hdr), MSG_PEEK | MSG_TRUNC);
  if (next < 0) return -1;
  if ((size_t)next > count) {
    /* The kernel's answer: the header (its length field says how much is
     * needed), ENOSPC, and the MAD stays queued for a larger read. */
    errno = ENOSPC;
    return -1;
  }
  return recv(fd, buf, count, 0);
}

ssize_t shim_umad_write(int fd, const void* buf, size_t count) {
  /* The kernel refuses anything shorter than a header and an RMPP header. */
  if (count < sizeof(struct ib_user_mad_hdr) + 36) {
    errno = EINVAL;
    return -1;
  }
  return send(fd, buf, count, MSG_NOSIGNAL);
}
