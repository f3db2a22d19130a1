/*
 * The replies of the emulated NETLINK_RDMA socket (shim_netlink.h): the
 * kernel's RDMA_NL_NLDEV client, for the devices of ibemu's fake sysfs tree.
 *
 * Message layout, attributes and error codes follow the kernel's nldev
 * (drivers/infiniband/core/nldev.c): a doit request gets one reply (and an
 * ack when it asked for one), a dump gets NLM_F_MULTI replies and NLMSG_DONE,
 * a request that fails gets NLMSG_ERROR with the request echoed.
 *
 * Everything here runs inside a send() wrapper, so it allocates nothing and
 * touches files only through raw system calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netlink.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_netlink.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim_netlink.h"

/* A reply datagram stays below what libnl (one page) and libmnl
 * (MNL_SOCKET_BUFFER_SIZE, 4 KiB at most) receive into. */
#define DATAGRAM_MAX 3072
#define MESSAGE_MAX 1024
#define MAX_DEVICES 256
#define NAME_MAX_LEN 64

/* ---- the fake sysfs tree ---- */

struct nl_device {
  uint32_t index; /* N of its uverbsN: the kernel's device index */
  char name[NAME_MAX_LEN];
};

struct path_buf {
  char s[PATH_MAX];
  size_t len;
  int overflow;
};

static void path_add(struct path_buf* p, const char* part) {
  size_t n = strlen(part);
  if (p->len + n >= sizeof p->s) {
    p->overflow = 1;
    return;
  }
  memcpy(p->s + p->len, part, n + 1);
  p->len += n;
}

static void path_add_number(struct path_buf* p, uint32_t v) {
  char digits[11];
  int i = (int)sizeof digits - 1;
  digits[i] = '\0';
  do {
    digits[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  path_add(p, digits + i);
}

static void path_of_device(struct path_buf* p, const char* root, const char* name) {
  p->len = 0;
  p->overflow = 0;
  p->s[0] = '\0';
  path_add(p, root);
  path_add(p, "/class/infiniband/");
  path_add(p, name);
}

/* The file's first line, without its newline: its length, or -1. */
static ssize_t read_line(const struct path_buf* p, char* buf, size_t size) {
  if (p->overflow) return -1;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, p->s, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = syscall(SYS_read, fd, buf, size - 1);
  syscall(SYS_close, fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  char* nl = memchr(buf, '\n', (size_t)n);
  if (nl != NULL) *nl = '\0';
  return (ssize_t)strlen(buf);
}

static ssize_t read_device_file(const char* root, const struct nl_device* dev, const char* file,
                                char* buf, size_t size) {
  struct path_buf p;
  path_of_device(&p, root, dev->name);
  path_add(&p, "/");
  path_add(&p, file);
  return read_line(&p, buf, size);
}

static ssize_t read_port_file(const char* root, const struct nl_device* dev, uint32_t port,
                              const char* file, char* buf, size_t size) {
  struct path_buf p;
  path_of_device(&p, root, dev->name);
  path_add(&p, "/ports/");
  path_add_number(&p, port);
  path_add(&p, "/");
  path_add(&p, file);
  return read_line(&p, buf, size);
}

/* A decimal number and nothing else after `prefix`: it, or -1. */
static long numbered_name(const char* s, const char* prefix) {
  size_t plen = strlen(prefix);
  if (strncmp(s, prefix, plen) != 0) return -1;
  s += plen;
  long v = 0;
  int digits = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (++digits > 9) return -1;
    v = v * 10 + (*s - '0');
  }
  return digits > 0 && *s == '\0' ? v : -1;
}

struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

/* Calls visit(ctx, name) for every entry of the directory; -1 if it cannot
 * be read. */
static int for_each_entry(const struct path_buf* dir, void (*visit)(void*, const char*),
                          void* ctx) {
  if (dir->overflow) return -1;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, dir->s, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096] __attribute__((aligned(8)));
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const struct linux_dirent64* d = (const struct linux_dirent64*)(buf + off);
      visit(ctx, d->d_name);
      off += d->d_reclen;
    }
  }
  syscall(SYS_close, fd);
  return 0;
}

struct index_list {
  uint32_t v[MAX_DEVICES];
  size_t n;
};

static void collect_uverbs(void* ctx, const char* name) {
  struct index_list* list = ctx;
  long index = numbered_name(name, "uverbs");
  if (index < 0 || list->n == MAX_DEVICES) return;
  size_t i = list->n++;
  for (; i > 0 && list->v[i - 1] > (uint32_t)index; i--) list->v[i] = list->v[i - 1];
  list->v[i] = (uint32_t)index;
}

/* The devices in index order: their number (0 without a tree). */
static size_t list_devices(const char* root, struct index_list* list) {
  struct path_buf p = {.len = 0};
  path_add(&p, root);
  path_add(&p, "/class/infiniband_verbs");
  list->n = 0;
  for_each_entry(&p, collect_uverbs, list);
  return list->n;
}

static void uverbs_path(struct path_buf* p, const char* root, uint32_t index, const char* file) {
  p->len = 0;
  p->overflow = 0;
  path_add(p, root);
  path_add(p, "/class/infiniband_verbs/uverbs");
  path_add_number(p, index);
  path_add(p, "/");
  path_add(p, file);
}

static int find_device(const char* root, uint32_t index, struct nl_device* dev) {
  struct path_buf p;
  uverbs_path(&p, root, index, "ibdev");
  if (read_line(&p, dev->name, sizeof dev->name) <= 0) return -1;
  dev->index = index;
  return 0;
}

static void count_ports(void* ctx, const char* name) {
  uint32_t* last = ctx;
  long port = numbered_name(name, "");
  if (port > 0 && (uint32_t)port > *last) *last = (uint32_t)port;
}

static uint32_t port_count(const char* root, const struct nl_device* dev) {
  struct path_buf p;
  path_of_device(&p, root, dev->name);
  path_add(&p, "/ports");
  uint32_t last = 0;
  for_each_entry(&p, count_ports, &last);
  return last;
}

/* "0002:c903:0000:1234" (a GUID) or "fe80:0000:0000:0000:..." (a GID):
 * the first `groups` 16-bit groups as one number. */
static uint64_t parse_groups(const char* s, int groups) {
  uint64_t v = 0;
  for (int g = 0; g < groups; g++) {
    char* end;
    unsigned long part = strtoul(s, &end, 16);
    if (end == s) return 0;
    v = v << 16 | (part & 0xffff);
    s = *end == ':' ? end + 1 : end;
  }
  return v;
}

/* "4: ACTIVE", "0x1", "2": the leading number. */
static uint64_t parse_number(const char* s) { return strtoull(s, NULL, 0); }

/* ---- messages ---- */

struct message {
  unsigned char b[MESSAGE_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
  size_t len;
  int overflow;
};

struct replies {
  unsigned char b[DATAGRAM_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
  size_t len;
  shim_nl_emit_fn emit;
  void* ctx;
  int err;
  uint32_t portid;
};

static void message_begin(struct message* m, const struct replies* r, uint16_t type, uint16_t flags,
                          uint32_t seq) {
  struct nlmsghdr h = {.nlmsg_len = NLMSG_HDRLEN,
                       .nlmsg_type = type,
                       .nlmsg_flags = flags,
                       .nlmsg_seq = seq,
                       .nlmsg_pid = r->portid};
  memset(m->b, 0, NLMSG_HDRLEN);
  memcpy(m->b, &h, sizeof h);
  m->len = NLMSG_HDRLEN;
  m->overflow = 0;
}

static void message_put(struct message* m, const void* data, size_t len) {
  size_t padded = NLMSG_ALIGN(len);
  if (m->len + padded > sizeof m->b) {
    m->overflow = 1;
    return;
  }
  memcpy(m->b + m->len, data, len);
  memset(m->b + m->len + len, 0, padded - len);
  m->len += padded;
}

static void put_attr(struct message* m, uint16_t type, const void* data, size_t len) {
  struct nlattr a = {.nla_len = (uint16_t)(NLA_HDRLEN + len), .nla_type = type};
  if (m->len + NLA_HDRLEN + NLA_ALIGN(len) > sizeof m->b) {
    m->overflow = 1;
    return;
  }
  memcpy(m->b + m->len, &a, sizeof a);
  m->len += NLA_HDRLEN;
  message_put(m, data, len);
}

static void put_u8(struct message* m, uint16_t type, uint8_t v) { put_attr(m, type, &v, 1); }
static void put_u32(struct message* m, uint16_t type, uint32_t v) { put_attr(m, type, &v, 4); }
static void put_u64(struct message* m, uint16_t type, uint64_t v) { put_attr(m, type, &v, 8); }
static void put_string(struct message* m, uint16_t type, const char* s) {
  put_attr(m, type, s, strlen(s) + 1);
}

static void flush(struct replies* r) {
  if (r->len == 0 || r->err != 0) return;
  r->err = r->emit(r->ctx, r->b, r->len);
  r->len = 0;
}

static void send_message(struct replies* r, struct message* m) {
  ((struct nlmsghdr*)m->b)->nlmsg_len = (uint32_t)m->len;
  if (r->len + m->len > sizeof r->b) flush(r);
  memcpy(r->b + r->len, m->b, m->len);
  r->len += m->len;
}

/* NLMSG_ERROR for `req`: an ack (error 0) carries its header, an error
 * the whole request as far as it fits (else NLM_F_CAPPED). */
static void send_error(struct replies* r, const struct nlmsghdr* req, int error) {
  struct message m;
  size_t echoed = error != 0 ? req->nlmsg_len : NLMSG_HDRLEN;
  uint16_t flags = 0;
  if (NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(int) + echoed) > sizeof m.b) {
    echoed = NLMSG_HDRLEN;
    flags = NLM_F_CAPPED;
  }
  message_begin(&m, r, NLMSG_ERROR, flags, req->nlmsg_seq);
  unsigned char body[MESSAGE_MAX];
  memcpy(body, &error, sizeof error);
  memcpy(body + sizeof error, req, echoed);
  message_put(&m, body, sizeof error + echoed);
  send_message(r, &m);
}

static void send_done(struct replies* r, const struct nlmsghdr* req) {
  struct message m;
  message_begin(&m, r, NLMSG_DONE, NLM_F_MULTI, req->nlmsg_seq);
  int zero = 0;
  message_put(&m, &zero, sizeof zero);
  send_message(r, &m);
}

/* ---- the request ---- */

struct request {
  const struct nlmsghdr* h;
  const struct nlattr* attr[RDMA_NLDEV_ATTR_MAX];
};

/* The attributes that follow the header: -EINVAL if one runs past the
 * message. */
static int parse_request(struct request* q, const struct nlmsghdr* h) {
  memset(q, 0, sizeof *q);
  q->h = h;
  const unsigned char* p = (const unsigned char*)h + NLMSG_HDRLEN;
  size_t left = h->nlmsg_len - NLMSG_HDRLEN;
  while (left >= NLA_HDRLEN) {
    const struct nlattr* a = (const struct nlattr*)p;
    if (a->nla_len < NLA_HDRLEN || a->nla_len > left) return -EINVAL;
    uint16_t type = a->nla_type & NLA_TYPE_MASK;
    if (type < RDMA_NLDEV_ATTR_MAX) q->attr[type] = a;
    size_t step = NLA_ALIGN(a->nla_len);
    if (step >= left) break;
    p += step;
    left -= step;
  }
  return 0;
}

static int attr_u32(const struct request* q, int type, uint32_t* v) {
  const struct nlattr* a = q->attr[type];
  if (a == NULL || a->nla_len != NLA_HDRLEN + 4) return -EINVAL;
  memcpy(v, (const char*)a + NLA_HDRLEN, 4);
  return 0;
}

/* A NUL-terminated string attribute, or NULL. */
static const char* attr_string(const struct request* q, int type) {
  const struct nlattr* a = q->attr[type];
  if (a == NULL || a->nla_len <= NLA_HDRLEN) return NULL;
  const char* s = (const char*)a + NLA_HDRLEN;
  return memchr(s, '\0', a->nla_len - NLA_HDRLEN) != NULL ? s : NULL;
}

static int requested_device(const char* root, const struct request* q, struct nl_device* dev) {
  uint32_t index;
  if (attr_u32(q, RDMA_NLDEV_ATTR_DEV_INDEX, &index) != 0) return -EINVAL;
  return find_device(root, index, dev) == 0 ? 0 : -EINVAL;
}

/* ---- the commands ---- */

static void put_device_id(struct message* m, const struct nl_device* dev) {
  put_u32(m, RDMA_NLDEV_ATTR_DEV_INDEX, dev->index);
  put_string(m, RDMA_NLDEV_ATTR_DEV_NAME, dev->name);
}

static void fill_device(struct message* m, const char* root, const struct nl_device* dev) {
  char v[NAME_MAX_LEN];
  put_device_id(m, dev);
  put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, port_count(root, dev));
  if (read_device_file(root, dev, "fw_ver", v, sizeof v) > 0)
    put_string(m, RDMA_NLDEV_ATTR_FW_VERSION, v);
  if (read_device_file(root, dev, "node_guid", v, sizeof v) > 0)
    put_u64(m, RDMA_NLDEV_ATTR_NODE_GUID, parse_groups(v, 4));
  if (read_device_file(root, dev, "sys_image_guid", v, sizeof v) > 0)
    put_u64(m, RDMA_NLDEV_ATTR_SYS_IMAGE_GUID, parse_groups(v, 4));
  if (read_device_file(root, dev, "node_type", v, sizeof v) > 0)
    put_u8(m, RDMA_NLDEV_ATTR_DEV_NODE_TYPE, (uint8_t)parse_number(v));
  put_u8(m, RDMA_NLDEV_ATTR_DEV_DIM, 0);
  put_string(m, RDMA_NLDEV_ATTR_DEV_PROTOCOL, "ib");
}

static void fill_port(struct message* m, const char* root, const struct nl_device* dev,
                      uint32_t port) {
  char v[NAME_MAX_LEN];
  put_device_id(m, dev);
  put_u32(m, RDMA_NLDEV_ATTR_PORT_INDEX, port);
  if (read_port_file(root, dev, port, "cap_mask", v, sizeof v) > 0)
    put_u64(m, RDMA_NLDEV_ATTR_CAP_FLAGS, parse_number(v));
  if (read_port_file(root, dev, port, "gids/0", v, sizeof v) > 0)
    put_u64(m, RDMA_NLDEV_ATTR_SUBNET_PREFIX, parse_groups(v, 4));
  if (read_port_file(root, dev, port, "lid", v, sizeof v) > 0)
    put_u32(m, RDMA_NLDEV_ATTR_LID, (uint32_t)parse_number(v));
  if (read_port_file(root, dev, port, "sm_lid", v, sizeof v) > 0)
    put_u32(m, RDMA_NLDEV_ATTR_SM_LID, (uint32_t)parse_number(v));
  if (read_port_file(root, dev, port, "lid_mask_count", v, sizeof v) > 0)
    put_u8(m, RDMA_NLDEV_ATTR_LMC, (uint8_t)parse_number(v));
  if (read_port_file(root, dev, port, "state", v, sizeof v) > 0)
    put_u8(m, RDMA_NLDEV_ATTR_PORT_STATE, (uint8_t)parse_number(v));
  if (read_port_file(root, dev, port, "phys_state", v, sizeof v) > 0)
    put_u8(m, RDMA_NLDEV_ATTR_PORT_PHYS_STATE, (uint8_t)parse_number(v));
  /* No RDMA_NLDEV_ATTR_NDEV_*: an InfiniBand port without IPoIB. */
}

static int is_dump(const struct nlmsghdr* h) { return (h->nlmsg_flags & NLM_F_DUMP) == NLM_F_DUMP; }

static void reply_begin(struct message* m, const struct replies* r, const struct nlmsghdr* h) {
  message_begin(m, r, h->nlmsg_type, is_dump(h) ? NLM_F_MULTI : 0, h->nlmsg_seq);
}

static int get_device(struct replies* r, const char* root, const struct request* q) {
  struct message m;
  if (is_dump(q->h)) {
    struct index_list list;
    list_devices(root, &list);
    for (size_t i = 0; i < list.n; i++) {
      struct nl_device dev;
      if (find_device(root, list.v[i], &dev) != 0) continue;
      reply_begin(&m, r, q->h);
      fill_device(&m, root, &dev);
      if (!m.overflow) send_message(r, &m);
    }
    return 0;
  }
  struct nl_device dev;
  int err = requested_device(root, q, &dev);
  if (err != 0) return err;
  reply_begin(&m, r, q->h);
  fill_device(&m, root, &dev);
  if (m.overflow) return -EMSGSIZE;
  send_message(r, &m);
  return 0;
}

static int get_port(struct replies* r, const char* root, const struct request* q) {
  struct message m;
  struct nl_device dev;
  int err = requested_device(root, q, &dev);
  if (err != 0) return err;
  uint32_t ports = port_count(root, &dev);
  if (is_dump(q->h)) {
    for (uint32_t port = 1; port <= ports; port++) {
      reply_begin(&m, r, q->h);
      fill_port(&m, root, &dev, port);
      if (!m.overflow) send_message(r, &m);
    }
    return 0;
  }
  uint32_t port;
  if (attr_u32(q, RDMA_NLDEV_ATTR_PORT_INDEX, &port) != 0 || port == 0 || port > ports)
    return -EINVAL;
  reply_begin(&m, r, q->h);
  fill_port(&m, root, &dev, port);
  if (m.overflow) return -EMSGSIZE;
  send_message(r, &m);
  return 0;
}

/* No RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK: libibverbs then protects registered
 * memory across fork() as it does with the sysfs-only discovery. */
static int get_system(struct replies* r, const struct request* q) {
  struct message m;
  reply_begin(&m, r, q->h);
  put_u8(&m, RDMA_NLDEV_SYS_ATTR_NETNS_MODE, 1);
  send_message(r, &m);
  return 0;
}

/* The uverbs char device of a device; other char device types (umad,
 * rdma_cm) are not known to this kernel. */
static int get_chardev(struct replies* r, const char* root, const struct request* q) {
  const char* type = attr_string(q, RDMA_NLDEV_ATTR_CHARDEV_TYPE);
  if (type == NULL) return -EINVAL;
  if (strcmp(type, "uverbs") != 0) return -EOPNOTSUPP;
  struct nl_device dev;
  int err = requested_device(root, q, &dev);
  if (err != 0) return err;
  struct path_buf p;
  char abi[16];
  uverbs_path(&p, root, dev.index, "abi_version");
  if (read_line(&p, abi, sizeof abi) <= 0) return -EINVAL;
  struct path_buf name = {.len = 0};
  path_add(&name, "uverbs");
  path_add_number(&name, dev.index);

  struct message m;
  reply_begin(&m, r, q->h);
  /* The fake tree's uverbs "dev" is 0:0: a char device libibverbs opens
   * by name without comparing numbers. */
  put_u64(&m, RDMA_NLDEV_ATTR_CHARDEV, 0);
  put_u64(&m, RDMA_NLDEV_ATTR_CHARDEV_ABI, parse_number(abi));
  put_string(&m, RDMA_NLDEV_ATTR_CHARDEV_NAME, name.s);
  put_u32(&m, RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID, RDMA_DRIVER_UNKNOWN);
  send_message(r, &m);
  return 0;
}

static int answer_one(struct replies* r, const char* root, const struct nlmsghdr* h) {
  struct request q;
  int err = parse_request(&q, h);
  if (err != 0) return err;
  if (RDMA_NL_GET_CLIENT(h->nlmsg_type) != RDMA_NL_NLDEV) return -EOPNOTSUPP;
  /* A dump of a command that has none is EINVAL, as in the kernel. */
  switch (RDMA_NL_GET_OP(h->nlmsg_type)) {
    case RDMA_NLDEV_CMD_GET:
      return get_device(r, root, &q);
    case RDMA_NLDEV_CMD_PORT_GET:
      return get_port(r, root, &q);
    case RDMA_NLDEV_CMD_SYS_GET:
      return is_dump(h) ? -EINVAL : get_system(r, &q);
    case RDMA_NLDEV_CMD_GET_CHARDEV:
      return is_dump(h) ? -EINVAL : get_chardev(r, root, &q);
    default:
      return -EOPNOTSUPP;
  }
}

int shim_rdma_nl_answer(const char* root, uint32_t portid, const void* req, size_t len,
                        shim_nl_emit_fn emit, void* ctx) {
  struct replies r = {.len = 0, .emit = emit, .ctx = ctx, .err = 0, .portid = portid};
  const unsigned char* p = req;
  /* As the kernel does: stop quietly at a truncated message. */
  while (len >= NLMSG_HDRLEN) {
    struct nlmsghdr h;
    memcpy(&h, p, sizeof h);
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > len) break;
    /* A copy keeps the attributes aligned whatever buffer the program sent. */
    unsigned char copy[MESSAGE_MAX] __attribute__((aligned(NLMSG_ALIGNTO)));
    const struct nlmsghdr* msg = (const struct nlmsghdr*)copy;
    int err;
    if (h.nlmsg_len > sizeof copy) {
      memcpy(copy, &h, sizeof h);
      ((struct nlmsghdr*)copy)->nlmsg_len = NLMSG_HDRLEN;
      err = -EMSGSIZE;
    } else {
      memcpy(copy, p, h.nlmsg_len);
      /* Control messages and replies are not requests: only acked. */
      err = (h.nlmsg_flags & NLM_F_REQUEST) && h.nlmsg_type >= NLMSG_MIN_TYPE
                ? answer_one(&r, root, msg)
                : 0;
    }
    if (err == 0 && is_dump(msg) && (h.nlmsg_flags & NLM_F_REQUEST) &&
        h.nlmsg_type >= NLMSG_MIN_TYPE)
      send_done(&r, msg);
    else if (err != 0 || (h.nlmsg_flags & NLM_F_ACK))
      send_error(&r, msg, err);
    size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step >= len) break;
    p += step;
    len -= step;
  }
  flush(&r);
  return r.err;
}
