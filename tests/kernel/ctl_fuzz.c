/*
 * ibemu-ctl-fuzz: throws bad input at ibemu.ko from a control file of its
 * own, which adds no device of ibemud's, so nothing it does reaches them
 * (but --stand-in, below):
 *
 *   ibemu-ctl-fuzz N            N malformed or misdirected messages written to
 *                               /dev/ibemu, each refused with EINVAL: random
 *                               bytes of random lengths, every message type
 *                               with a random body, messages only the module
 *                               sends, and messages about devices this file
 *                               never added.
 *   ibemu-ctl-fuzz --data N [R] the data channel: its life (IBEMU_IOC_OPEN_DATA,
 *                               EBUSY for a second, EOF and ENODEV once either
 *                               file closes, a blocked read() woken), N random
 *                               and mutated IBEMU_IOC_COMPLETE and IBEMU_IOC_COPY
 *                               arguments, records and segments (bad lengths,
 *                               huge counts, bad user pointers), reads of
 *                               random sizes and polls, each answered as the
 *                               ABI says; then channels closed from one side,
 *                               the other or both at once under threads that
 *                               use them (R rounds, 60 by default). Last, a
 *                               device of its own, and completions, events and
 *                               copies aimed at what consumers create on it.
 *   ibemu-ctl-fuzz --stand-in NAME N
 *                               stands in for a stopped ibemud: adopts device
 *                               NAME, reads the replay of its kernel objects
 *                               and completes N of the receives it replays
 *                               with IB_WC_LOC_LEN_ERR and vendor_err 0xbe17
 *                               (the consumer logs them: IPoIB's "failed recv
 *                               event"), then the same again, which the module
 *                               drops (stale tokens).
 *   ibemu-ctl-fuzz --daemon PID IBEMU_IOC_OPEN_DATA on the control file of
 *                               ibemud (PID), borrowed with pidfd_getfd(): it
 *                               opens a channel (closed again at once), or says
 *                               EBUSY when the daemon holds one.
 *
 * The expected answer to each input comes from the module's own checks
 * (kernel/ibemu_ctl_validate.c, linked in): EINVAL for what they refuse,
 * EFAULT for memory the module cannot read, success for well-formed
 * completions (the fuzzer's control file adds no device, so every record
 * names none and is dropped, as the ABI says of records about objects that
 * are gone) and ENOENT for well-formed copies (no such MR).
 * Exits 1 on any other outcome; the kernel's log is the qemu test's to check.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernel/ibemu_abi.h"
#include "kernel/ibemu_ctl_validate.h"

#define CTL_PATH "/dev/" IBEMU_CTL_DEVICE_NAME
#define PAGE 4096
/* User memory for records: room for the largest batch and more, then a
 * page nothing may touch. */
#define ARENA (2 * IBEMU_DATA_MAX_BATCH)
/* An address in the kernel's half: never readable from user space. */
#define KERNEL_ADDRESS 0xffff888000000000ull

/* Per thread: the racing threads draw their own numbers. */
static __thread unsigned long long state = 0x9e3779b97f4a7c15ull;
static long failures;

static unsigned long long next_random(unsigned long long* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static unsigned long long rnd(void) { return next_random(&state); }
static unsigned rnd_below(unsigned n) { return (unsigned)(rnd() % n); }

static void fail(const char* what, long i, const char* detail) {
  fprintf(stderr, "%s %ld: %s\n", what, i, detail);
  __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
}

static const char* outcome(long ret, int err) {
  static char text[64];
  if (ret >= 0) {
    snprintf(text, sizeof(text), "returned %ld", ret);
    return text;
  }
  return strerror(err);
}

/* Fails `what` unless the call failed with `want` (0: succeeded). */
static void expect(const char* what, long i, long ret, int err, int want);
/* The same for a call made here: errno is read once it has returned (as an
 * argument beside the call, it could be read before). */
#define EXPECT(what, i, call, want)     \
  do {                                  \
    long ret_ = (long)(call);           \
    expect(what, i, ret_, errno, want); \
  } while (0)

/* How often each answer was the right one, for the summary. */
static long answered_einval, answered_efault, answered_enoent, answered_ok;

static void tally(int want) {
  if (!want) answered_ok++;
  if (want == EINVAL) answered_einval++;
  if (want == EFAULT) answered_efault++;
  if (want == ENOENT) answered_enoent++;
}

static void expect(const char* what, long i, long ret, int err, int want) {
  char detail[160];
  if (want ? (ret == -1 && err == want) : ret >= 0) return;
  snprintf(detail, sizeof(detail), "%s, expected %s", outcome(ret, err),
           want ? strerror(want) : "success");
  fail(what, i, detail);
}

/* ---- control messages ---- */

static const struct {
  unsigned type;
  size_t size;
} kinds[] = {
    {IBEMU_CTL_ADD_DEVICE, sizeof(struct ibemu_ctl_add_device)},
    {IBEMU_CTL_SET_PORT, sizeof(struct ibemu_ctl_set_port)},
    {IBEMU_CTL_MAD_IN, sizeof(struct ibemu_ctl_mad_in)},
    {IBEMU_CTL_MAD_OUT, sizeof(struct ibemu_ctl_mad_out)},
    {IBEMU_CTL_PROCESS_MAD, sizeof(struct ibemu_ctl_process_mad)},
};

static int fuzz_control(long count) {
  unsigned char buf[1024];
  long refused = 0;
  int fd = open(CTL_PATH, O_RDWR | O_NONBLOCK);
  if (fd < 0) {
    perror(CTL_PATH);
    return 1;
  }
  for (long i = 0; i < count; i++) {
    size_t len;
    for (size_t b = 0; b < sizeof(buf); b++) buf[b] = (unsigned char)rnd();
    struct ibemu_ctl_hdr hdr;
    if (i % 3 == 0) {
      len = rnd() % sizeof(buf);
      memcpy(&hdr, buf, sizeof(hdr) < len ? sizeof(hdr) : len);
    } else {
      /* A well-formed header around a random body. ADD_DEVICE keeps a
       * wrong ABI version so that nothing is ever registered; the others
       * name devices this file never added. */
      unsigned k = rnd_below(sizeof(kinds) / sizeof(kinds[0]));
      len = kinds[k].size;
      hdr.type = (unsigned short)kinds[k].type;
      hdr.length = (unsigned short)len;
      hdr.seq = 0;
      memcpy(buf, &hdr, sizeof(hdr));
      if (hdr.type == IBEMU_CTL_ADD_DEVICE) {
        unsigned abi = IBEMU_CTL_ABI_VERSION + 1 + rnd_below(1000);
        memcpy(buf + sizeof(hdr), &abi, sizeof(abi));
      }
    }
    ssize_t n = write(fd, buf, len);
    if (n >= 0 || errno != EINVAL) {
      fprintf(stderr, "message %ld (%zu bytes, type %u): %s\n", i, len, len >= 2 ? buf[0] : 0,
              n >= 0 ? "accepted" : strerror(errno));
      return 1;
    }
    refused++;
  }
  /* Nothing was queued for this file, and a short read buffer is refused. */
  if (read(fd, buf, 4) != -1 || (errno != EAGAIN && errno != EINVAL)) {
    fprintf(stderr, "read: unexpected result\n");
    return 1;
  }
  close(fd);
  printf("%ld bad messages refused with EINVAL\n", refused);
  return 0;
}

/* ---- data channel: records and arguments ---- */

/*
 * Straight to the kernel: a sanitizer's interceptors check the memory an
 * ioctl or read() names, and would report the bad pointers that are here
 * for the module to refuse.
 */
static long raw_ioctl(int fd, unsigned long cmd, const void* arg) {
  return syscall(SYS_ioctl, fd, cmd, arg);
}

static long raw_read(int fd, void* buf, size_t len) { return syscall(SYS_read, fd, buf, len); }

static int open_data(int ctl) { return (int)raw_ioctl(ctl, IBEMU_IOC_OPEN_DATA, NULL); }

/* A well-formed CQE or EVENT, as the daemon would send it. */
static size_t valid_record(void* out) {
  if (rnd_below(2)) {
    struct ibemu_data_cqe r;
    static const unsigned char opcodes[] = {
        IBEMU_DATA_WC_SEND,      IBEMU_DATA_WC_RDMA_WRITE, IBEMU_DATA_WC_RDMA_READ,
        IBEMU_DATA_WC_COMP_SWAP, IBEMU_DATA_WC_FETCH_ADD,  IBEMU_DATA_WC_LOCAL_INV,
        IBEMU_DATA_WC_REG_MR,    IBEMU_DATA_WC_RECV,       IBEMU_DATA_WC_RECV_RDMA_WITH_IMM};
    memset(&r, 0, sizeof(r));
    r.hdr.type = IBEMU_DATA_CQE;
    r.hdr.length = sizeof(r);
    r.hdr.index = (unsigned char)rnd_below(IBEMU_CTL_MAX_DEVICES);
    r.token = rnd();
    r.cq = 1 + (unsigned)rnd_below(0xfffffffe);
    r.qpn = 2 + rnd_below(IBEMU_CTL_MULTICAST_QPN - 2);
    r.byte_len = (unsigned)rnd();
    r.imm_or_rkey = (unsigned)rnd();
    r.src_qp = rnd_below(0x1000000);
    r.flags = rnd_below(2) ? IBEMU_DATA_WC_GRH : 0;
    r.flags |= rnd_below(2) ? IBEMU_DATA_WC_WITH_IMM : IBEMU_DATA_WC_WITH_INV;
    r.vendor_err = (unsigned)rnd();
    r.slid = (unsigned short)rnd();
    r.pkey_index = (unsigned short)rnd_below(IBEMU_CTL_MAX_PKEYS);
    r.status = (unsigned char)rnd_below(IBEMU_DATA_WC_GENERAL_ERR + 1);
    r.opcode = opcodes[rnd_below(sizeof(opcodes))];
    r.sl = (unsigned char)rnd_below(16);
    r.dlid_path_bits = (unsigned char)rnd_below(128);
    r.solicited = (unsigned char)rnd_below(2);
    memcpy(out, &r, sizeof(r));
    return sizeof(r);
  }
  struct ibemu_data_event r;
  static const unsigned char qp_events[] = {
      IBEMU_DATA_EVENT_QP_FATAL, IBEMU_DATA_EVENT_QP_REQ_ERR, IBEMU_DATA_EVENT_QP_ACCESS_ERR,
      IBEMU_DATA_EVENT_COMM_EST, IBEMU_DATA_EVENT_SQ_DRAINED, IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED,
      IBEMU_DATA_EVENT_QP_STATE};
  memset(&r, 0, sizeof(r));
  r.hdr.type = IBEMU_DATA_EVENT;
  r.hdr.length = sizeof(r);
  r.hdr.index = (unsigned char)rnd_below(IBEMU_CTL_MAX_DEVICES);
  r.handle = 1 + (unsigned)rnd_below(0xfffffffe);
  switch (rnd_below(3)) {
    case 0:
      r.object = IBEMU_DATA_EVENT_ON_QP;
      r.handle = 2 + rnd_below(IBEMU_CTL_MULTICAST_QPN - 2);
      r.modify_seq = (unsigned)rnd();
      r.event = qp_events[rnd_below(sizeof(qp_events))];
      r.qp_state = (unsigned char)rnd_below(IBEMU_DATA_QPS_ERR + 1);
      break;
    case 1:
      r.object = IBEMU_DATA_EVENT_ON_SRQ;
      r.event = rnd_below(2) ? IBEMU_DATA_EVENT_SRQ_ERR : IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED;
      break;
    default:
      r.object = IBEMU_DATA_EVENT_ON_CQ;
      r.event = IBEMU_DATA_EVENT_CQ_ERR;
      break;
  }
  memcpy(out, &r, sizeof(r));
  return sizeof(r);
}

/*
 * One record of a batch into `out` (8-byte aligned, room for any): well
 * formed, one mutated byte, or garbage behind a header whose type is the
 * module's or not and whose length may lie. Returns the bytes it takes.
 */
static size_t some_record(unsigned char* out) {
  size_t len;
  switch (rnd_below(5)) {
    case 0:
    case 1:
      return valid_record(out);
    case 2:
      len = valid_record(out);
      out[rnd_below((unsigned)len)] ^= (unsigned char)(1 + rnd_below(255));
      return len;
    case 3: {
      struct ibemu_data_hdr hdr = {0};
      static const unsigned short types[] = {
          IBEMU_DATA_CQE, IBEMU_DATA_EVENT, IBEMU_DATA_CREATE_QP, IBEMU_DATA_SEND_WQE, 0, 0xffff};
      len = 8 * (1 + rnd_below(40));
      for (size_t b = 0; b < len; b++) out[b] = (unsigned char)rnd();
      hdr.type = types[rnd_below(sizeof(types) / sizeof(types[0]))];
      hdr.length = (unsigned short)(rnd_below(4) ? len : rnd());
      hdr.index = (unsigned char)rnd_below(IBEMU_CTL_MAX_DEVICES + 2);
      memcpy(out, &hdr, sizeof(hdr));
      return len;
    }
    default:
      /* A well-formed record whose length field says otherwise. */
      len = valid_record(out);
      ((struct ibemu_data_hdr*)out)->length = (unsigned short)(8 * rnd_below(40));
      return len;
  }
}

static unsigned char* arena;     /* ARENA bytes, then a PROT_NONE page */
static unsigned char* guard;     /* that page */
static unsigned char* read_only; /* a page for arguments the module cannot write */

/* Where a buffer of `len` bytes goes: the result and whether the module
 * can read all of it. */
static uint64_t place(size_t len, int* readable) {
  *readable = 1;
  switch (rnd_below(8)) {
    case 0:
      *readable = 0;
      return 0;
    case 1:
      *readable = 0;
      return KERNEL_ADDRESS + (rnd() & 0xffffff);
    case 2:
      *readable = 0;
      return rnd() | (1ull << 63);
    case 3:
      /* The last 8 bytes, or more, in the guard page. */
      *readable = len == 0;
      return (uint64_t)(uintptr_t)(guard - len + 8 * (1 + rnd_below(PAGE / 8)));
    case 4:
      return (uint64_t)(uintptr_t)(guard - len); /* ends right before it */
    default:
      return (uint64_t)(uintptr_t)arena;
  }
}

static void fuzz_complete(int data, long i) {
  static uint64_t batch[(IBEMU_DATA_MAX_BATCH + 8 * 1024) / 8];
  static uint64_t content[IBEMU_DATA_MAX_BATCH / 8];
  unsigned char* bytes = (unsigned char*)batch;
  size_t len = 0;
  unsigned records = rnd_below(8) ? 1 + rnd_below(8) : 1 + rnd_below(2000);
  int all_valid = rnd_below(3) == 0; /* then the batch is taken */
  while (records--) {
    unsigned char rec[1024] __attribute__((aligned(8)));
    size_t n = all_valid ? valid_record(rec) : some_record(rec);
    if (len + n > sizeof(batch)) break;
    memcpy(bytes + len, rec, n);
    len += n;
  }

  struct ibemu_data_complete arg = {0};
  arg.length = (unsigned)len;
  switch (rnd_below(12)) {
    case 0:
      arg.length = (unsigned)rnd();
      break;
    case 1:
      arg.length = (unsigned)(len - rnd_below((unsigned)len + 1));
      break;
    case 2:
      arg.reserved = (unsigned)rnd() | 1;
      break;
    case 3:
      arg.length = IBEMU_DATA_MAX_BATCH + 8 * rnd_below(4);
      break;
    default:
      break;
  }
  /* What the module reads: the records, and past them garbage. */
  size_t span = arg.length <= IBEMU_DATA_MAX_BATCH ? arg.length : 0;
  unsigned char* what = (unsigned char*)content;
  for (size_t b = 0; b < span; b++) what[b] = b < len ? bytes[b] : (unsigned char)rnd();
  int readable;
  arg.records = place(span, &readable);
  if (readable && span) memcpy((void*)(uintptr_t)arg.records, what, span);

  int want;
  int arg_readable = rnd_below(16) != 0;
  if (!arg_readable)
    want = EFAULT;
  else if (ibemu_data_complete_valid(&arg))
    want = EINVAL;
  else if (!readable)
    want = EFAULT;
  else if (ibemu_data_batch_valid(what, arg.length, IBEMU_DATA_TO_MODULE))
    want = EINVAL;
  else
    want = 0;
  void* where = &arg;
  if (!arg_readable) where = rnd_below(2) ? (void*)guard : NULL;
  long ret = raw_ioctl(data, IBEMU_IOC_COMPLETE, where);
  expect("IBEMU_IOC_COMPLETE", i, ret, errno, want);
  tally(want);
}

static void valid_segment(struct ibemu_data_copy_segment* s) {
  memset(s, 0, sizeof(*s));
  s->length = 1 + rnd_below(IBEMU_DATA_MAX_COPY_LENGTH);
  s->iova = rnd() % (UINT64_MAX - s->length);
  s->buffer = rnd_below(2) ? (uint64_t)(uintptr_t)arena : rnd() % (UINT64_MAX - s->length);
  s->mr = rnd_below(0x1000000);
  s->generation = (unsigned)rnd();
  s->index = (unsigned char)rnd_below(IBEMU_CTL_MAX_DEVICES);
  s->direction = rnd_below(2) ? IBEMU_DATA_COPY_TO_KERNEL : IBEMU_DATA_COPY_FROM_KERNEL;
}

static void fuzz_copy(int data, long i) {
  struct ibemu_data_copy_segment seg[8];
  unsigned count = 1 + rnd_below(8);
  for (unsigned s = 0; s < count; s++) {
    valid_segment(&seg[s]);
    if (rnd_below(3) == 0) {
      unsigned char* b = (unsigned char*)&seg[s];
      switch (rnd_below(4)) {
        case 0:
          b[rnd_below(sizeof(seg[s]))] ^= (unsigned char)(1 + rnd_below(255));
          break;
        case 1:
          seg[s].length = rnd_below(2) ? 0 : IBEMU_DATA_MAX_COPY_LENGTH + 1 + rnd_below(1000);
          break;
        case 2:
          seg[s].iova = UINT64_MAX - rnd_below(seg[s].length); /* wraps */
          break;
        default:
          for (size_t k = 0; k < sizeof(seg[s]); k++) b[k] = (unsigned char)rnd();
          break;
      }
    }
  }

  struct ibemu_data_copy arg = {0};
  arg.count = count;
  switch (rnd_below(10)) {
    case 0:
      arg.count = (unsigned)rnd(); /* huge */
      break;
    case 1:
      arg.count = 0;
      break;
    case 2:
      arg.done = 1 + (unsigned)rnd_below(100);
      break;
    case 3:
      arg.count = IBEMU_DATA_MAX_COPY_SEGMENTS + 1;
      break;
    default:
      break;
  }
  /* The segments: readable, or not at all, or the first ones only. */
  int first_readable = 1;
  unsigned char* at = arena + ARENA - count * sizeof(seg[0]);
  switch (rnd_below(6)) {
    case 0:
      arg.segments = 0;
      first_readable = 0;
      break;
    case 1:
      arg.segments = KERNEL_ADDRESS;
      first_readable = 0;
      break;
    case 2:
      /* Only the first one before the guard page: the module stops at it. */
      at = guard - sizeof(seg[0]);
      /* fall through */
    default:
      arg.segments = (uint64_t)(uintptr_t)at;
      memcpy(at, seg,
             (size_t)(guard - at) < count * sizeof(seg[0]) ? (size_t)(guard - at)
                                                           : count * sizeof(seg[0]));
      break;
  }

  int want;
  int arg_mode = rnd_below(16); /* 0: unreadable, 1: read-only, else writable */
  if (arg_mode == 0)
    want = EFAULT;
  else if (ibemu_data_copy_valid(&arg))
    want = EINVAL;
  else if (!first_readable)
    want = EFAULT;
  else if (ibemu_data_copy_segment_valid(&seg[0]))
    want = EINVAL;
  else
    want = ENOENT;
  /* `done` goes back once the argument passed its check, whatever the
   * segments said: into a read-only page it cannot. */
  if (arg_mode == 1 && !ibemu_data_copy_valid(&arg)) want = EFAULT;

  struct ibemu_data_copy* where;
  if (arg_mode == 0) {
    where = rnd_below(2) ? (void*)guard : NULL;
  } else if (arg_mode == 1) {
    where = (struct ibemu_data_copy*)read_only;
    mprotect(read_only, PAGE, PROT_READ | PROT_WRITE);
    *where = arg;
    mprotect(read_only, PAGE, PROT_READ);
  } else {
    where = (struct ibemu_data_copy*)(arena + PAGE);
    *where = arg;
  }
  long ret = raw_ioctl(data, IBEMU_IOC_COPY, where);
  expect("IBEMU_IOC_COPY", i, ret, errno, want);
  tally(want);
  if (arg_mode > 1 && !ibemu_data_copy_valid(&arg) && where->done != 0)
    fail("IBEMU_IOC_COPY", i, "done is not 0: no segment was copied");
}

/* Nothing is ever queued for this channel: a read of any size finds
 * nothing, and poll() says so. */
static void fuzz_read(int data, long i) {
  static uint64_t buf[(IBEMU_DATA_MAX_BATCH + 8192) / 8];
  size_t len = rnd_below(2) ? rnd_below(64) : rnd_below(sizeof(buf));
  void* where = buf;
  int bad = 0;
  switch (rnd_below(8)) {
    case 0:
      where = NULL;
      bad = 1;
      break;
    case 1:
      where = (void*)(uintptr_t)(KERNEL_ADDRESS);
      bad = 1;
      break;
    case 2:
      where = guard;
      bad = 1;
      break;
    default:
      break;
  }
  long n = raw_read(data, where, len);
  /* The VFS refuses a buffer in the kernel's half before the module sees it. */
  if (!(n == -1 && (errno == EAGAIN || (bad && errno == EFAULT))))
    expect("read", i, n, errno, EAGAIN);
  struct pollfd p = {.fd = data, .events = POLLIN};
  int r = poll(&p, 1, 0);
  if (r != 0) fail("poll", i, "an empty channel is not readable");
}

/* Other commands of the module's magic number: not this file's. */
static void fuzz_other_ioctl(int ctl, int data, long i) {
  unsigned dir = rnd_below(4), nr = rnd_below(256), size = rnd_below(1 << 14);
  unsigned long cmd = _IOC(dir, IBEMU_IOC_MAGIC, nr, size);
  int fd = rnd_below(2) ? ctl : data;
  if (cmd == IBEMU_IOC_OPEN_DATA || cmd == IBEMU_IOC_COMPLETE || cmd == IBEMU_IOC_COPY) {
    /* The control file has only the first, the data file only the others. */
    fd = cmd == IBEMU_IOC_OPEN_DATA ? data : ctl;
  }
  long ret = raw_ioctl(fd, cmd, arena);
  expect(fd == ctl ? "ioctl on the control file" : "ioctl on the data file", i, ret, errno, ENOTTY);
}

/* ---- data channel: its life ---- */

static void* blocked_reader(void* arg) {
  int fd = *(int*)arg;
  unsigned char buf[256];
  static ssize_t result;
  result = read(fd, buf, sizeof(buf));
  return &result;
}

static int lifecycle(void) {
  char link[128];
  char path[64];
  int ctl = open(CTL_PATH, O_RDWR);
  if (ctl < 0) {
    perror(CTL_PATH);
    return 1;
  }
  int data = open_data(ctl);
  expect("OPEN_DATA", 0, data, errno, 0);
  if (data < 0) return 1;
  snprintf(path, sizeof(path), "/proc/self/fd/%d", data);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  link[n > 0 ? n : 0] = 0;
  if (strcmp(link, "anon_inode:[ibemu-data]") != 0) fail("data fd", 0, link);
  if (!(fcntl(data, F_GETFD) & FD_CLOEXEC)) fail("data fd", 0, "not close-on-exec");
  EXPECT("a second OPEN_DATA", 0, open_data(ctl), EBUSY);
  EXPECT("write() of the data fd", 0, write(data, link, 8), EINVAL);
  EXPECT("lseek() of the data fd", 0, lseek(data, 0, SEEK_SET), ESPIPE);
  fcntl(data, F_SETFL, O_NONBLOCK);
  EXPECT("read of an empty channel", 0, read(data, link, sizeof(link)), EAGAIN);

  /* Closing the data fd ends the channel: the control file opens another. */
  close(data);
  data = open_data(ctl);
  expect("OPEN_DATA after the data fd closed", 0, data, errno, 0);

  /* Closing the control file ends it too, and wakes a blocked reader. */
  pthread_t reader;
  pthread_create(&reader, NULL, blocked_reader, &data);
  usleep(200 * 1000);
  close(ctl);
  void* result;
  pthread_join(reader, &result);
  if (*(ssize_t*)result != 0) fail("a blocked read()", 0, "not EOF when the control file closed");
  struct ibemu_data_complete c = {0};
  struct ibemu_data_copy cp = {0};
  if (read(data, link, 8) != 0) fail("read after the control file closed", 0, "not EOF");
  EXPECT("COMPLETE after the control file closed", 0, ioctl(data, IBEMU_IOC_COMPLETE, &c), ENODEV);
  EXPECT("COPY after the control file closed", 0, ioctl(data, IBEMU_IOC_COPY, &cp), ENODEV);
  struct pollfd p = {.fd = data, .events = POLLIN};
  if (poll(&p, 1, 0) != 1 || !(p.revents & POLLHUP))
    fail("poll after the control file closed", 0, "no POLLHUP");
  close(data);
  return 0;
}

/* ---- data channel: closed under threads that use it ---- */

struct round {
  int ctl, data;
  volatile int stop;
  pthread_barrier_t closing;
};

static int allowed(long ret, int err, const int* ok) {
  if (ret >= 0) return 1;
  for (; *ok; ok++)
    if (err == *ok) return 1;
  return 0;
}

static void* poller(void* arg) {
  struct round* r = arg;
  static const int ok[] = {EAGAIN, EBADF, 0};
  unsigned char buf[512];
  while (!r->stop) {
    struct pollfd p = {.fd = r->data, .events = POLLIN};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) {
      ssize_t n = read(r->data, buf, sizeof(buf));
      if (!allowed(n, errno, ok) || n > 0) fail("racing read", 0, outcome(n, errno));
    }
  }
  return NULL;
}

static void* completer(void* arg) {
  struct round* r = arg;
  static const int ok[] = {ENOENT, ENODEV, EBADF, 0};
  uint64_t rec[128];
  while (!r->stop) {
    struct ibemu_data_complete c = {.records = (uint64_t)(uintptr_t)rec};
    c.length = (unsigned)valid_record(rec);
    long ret = ioctl(r->data, IBEMU_IOC_COMPLETE, &c);
    if (!allowed(ret, errno, ok) || ret > 0) fail("racing COMPLETE", 0, outcome(ret, errno));
    struct ibemu_data_copy_segment s;
    valid_segment(&s);
    struct ibemu_data_copy cp = {.segments = (uint64_t)(uintptr_t)&s, .count = 1};
    ret = ioctl(r->data, IBEMU_IOC_COPY, &cp);
    if (!allowed(ret, errno, ok) || ret >= 0) fail("racing COPY", 0, outcome(ret, errno));
  }
  return NULL;
}

/* Blocks in read() until the channel ends. */
static void* reader(void* arg) {
  struct round* r = arg;
  static const int ok[] = {EBADF, 0};
  unsigned char buf[512];
  ssize_t n = read(r->data, buf, sizeof(buf));
  if (!allowed(n, errno, ok) || n > 0) fail("racing blocked read", 0, outcome(n, errno));
  return NULL;
}

/* Asks for a channel again and again: EBUSY while one is open. */
static void* opener(void* arg) {
  struct round* r = arg;
  static const int ok[] = {EBUSY, EBADF, 0};
  while (!r->stop) {
    int fd = open_data(r->ctl);
    if (!allowed(fd, errno, ok)) fail("racing OPEN_DATA", 0, outcome(fd, errno));
    if (fd >= 0) close(fd);
  }
  return NULL;
}

static void* close_ctl(void* arg) {
  struct round* r = arg;
  pthread_barrier_wait(&r->closing);
  close(r->ctl);
  return NULL;
}

static void* close_data(void* arg) {
  struct round* r = arg;
  pthread_barrier_wait(&r->closing);
  close(r->data);
  return NULL;
}

static int race(long rounds) {
  void* (*const workers[])(void*) = {poller, completer, reader, opener};
  enum { WORKERS = sizeof(workers) / sizeof(workers[0]) };
  for (long i = 0; i < rounds; i++) {
    struct round r = {.stop = 0};
    pthread_t t[WORKERS], c[2];
    r.ctl = open(CTL_PATH, O_RDWR);
    r.data = r.ctl < 0 ? -1 : open_data(r.ctl);
    if (r.data < 0) {
      fail("race", i, "no channel");
      return 1;
    }
    pthread_barrier_init(&r.closing, NULL, 2);
    for (int w = 0; w < WORKERS; w++) pthread_create(&t[w], NULL, workers[w], &r);
    usleep(rnd_below(5000));
    /* One side, the other, or both at once. The control file always goes
     * too: it ends any channel a blocked reader still holds. */
    pthread_create(&c[0], NULL, close_ctl, &r);
    switch (rnd_below(3)) {
      case 0:
        pthread_barrier_wait(&r.closing);
        pthread_join(c[0], NULL);
        close(r.data);
        break;
      case 1:
        close(r.data);
        usleep(rnd_below(2000));
        pthread_barrier_wait(&r.closing);
        pthread_join(c[0], NULL);
        break;
      default:
        pthread_create(&c[1], NULL, close_data, &r);
        pthread_join(c[0], NULL);
        pthread_join(c[1], NULL);
        break;
    }
    r.stop = 1;
    for (int w = 0; w < WORKERS; w++) pthread_join(t[w], NULL);
    pthread_barrier_destroy(&r.closing);
  }
  return 0;
}

/* ---- data channel: completions and copies aimed at live objects ---- */

/*
 * A device of the fuzzer's own on its channel: the kernel's consumers
 * loaded by then (ib_mad always; IPoIB, RDS, SRP when the test loaded them)
 * create their PDs, DMA MRs, CQs and UD QPs on it as it registers, and the
 * channel's replay announces them. Completions and events then name those
 * live CQs and QPs with tokens of no outstanding WQE (none is posted: the
 * device's port stays DOWN), which the module drops (success); copies name
 * live MRs at addresses that are not direct-mapped RAM (EACCES), with a
 * generation a DMA MR lacks (ESTALE), or read (never write) random kernel
 * addresses (bytes, or EACCES). The device stays registered until the
 * module goes, as a daemon's does.
 */
#define LIVE_MAX 64
static struct {
  unsigned cqs[LIVE_MAX], qpns[LIVE_MAX], qp_cqs[LIVE_MAX][2], mrs[LIVE_MAX];
  unsigned ncq, nqp, nmr;
} live;

static void collect(const unsigned char* buf, size_t len) {
  for (size_t at = 0; at + sizeof(struct ibemu_data_hdr) <= len;) {
    struct ibemu_data_hdr h;
    memcpy(&h, buf + at, sizeof(h));
    if (h.length < sizeof(h) || at + h.length > len) break;
    if (h.type == IBEMU_DATA_CREATE_CQ && live.ncq < LIVE_MAX) {
      struct ibemu_data_create_cq r;
      memcpy(&r, buf + at, sizeof(r));
      live.cqs[live.ncq++] = r.cq;
    } else if (h.type == IBEMU_DATA_CREATE_QP && live.nqp < LIVE_MAX) {
      struct ibemu_data_create_qp r;
      memcpy(&r, buf + at, sizeof(r));
      live.qp_cqs[live.nqp][0] = r.send_cq;
      live.qp_cqs[live.nqp][1] = r.recv_cq;
      live.qpns[live.nqp++] = r.qpn;
    } else if (h.type == IBEMU_DATA_REG_DMA_MR && live.nmr < LIVE_MAX) {
      struct ibemu_data_reg_dma_mr r;
      memcpy(&r, buf + at, sizeof(r));
      live.mrs[live.nmr++] = IBEMU_DATA_MR_HANDLE(r.key);
    }
    at += h.length;
  }
}

static void live_complete(int data, long i) {
  uint64_t rec[2 * sizeof(struct ibemu_data_cqe) / 8];
  unsigned q = rnd_below(live.nqp);
  size_t n;
  if (rnd_below(4)) {
    struct ibemu_data_cqe c;
    memset(&c, 0, sizeof(c));
    c.hdr.type = IBEMU_DATA_CQE;
    c.hdr.length = sizeof(c);
    c.qpn = live.qpns[q];
    c.token = rnd_below(2) ? rnd() : rnd_below(4) | (uint64_t)rnd_below(2) << 32;
    c.cq = rnd_below(4) ? live.qp_cqs[q][(c.token >> 32) & 1] : live.cqs[rnd_below(live.ncq)];
    c.status = (unsigned char)rnd_below(IBEMU_DATA_WC_GENERAL_ERR + 1);
    c.opcode = (c.token >> 32) & 1 ? IBEMU_DATA_WC_RECV : IBEMU_DATA_WC_SEND;
    c.byte_len = (unsigned)rnd();
    c.solicited = (unsigned char)rnd_below(2);
    memcpy(rec, &c, sizeof(c));
    n = sizeof(c);
  } else {
    struct ibemu_data_event e;
    memset(&e, 0, sizeof(e));
    e.hdr.type = IBEMU_DATA_EVENT;
    e.hdr.length = sizeof(e);
    e.object = IBEMU_DATA_EVENT_ON_QP;
    e.handle = live.qpns[q];
    /* A state change, or an event whose handler runs in the workqueue;
     * the modify sequence is stale but for chance. */
    e.event = rnd_below(2) ? IBEMU_DATA_EVENT_QP_STATE : IBEMU_DATA_EVENT_COMM_EST;
    e.qp_state = (unsigned char)rnd_below(IBEMU_DATA_QPS_ERR + 1);
    e.modify_seq = 1000000 + (unsigned)rnd_below(1000);
    memcpy(rec, &e, sizeof(e));
    n = sizeof(e);
  }
  struct ibemu_data_complete arg = {.records = (uint64_t)(uintptr_t)rec, .length = (unsigned)n};
  EXPECT("COMPLETE naming a live QP", i, raw_ioctl(data, IBEMU_IOC_COMPLETE, &arg), 0);
  tally(0);
}

static void live_copy(int data, long i) {
  /* Not direct-mapped RAM: user space, vmalloc space, the kernel's image. */
  static const uint64_t not_ram[] = {0x10000, 0xffffc90000000000ull, 0xffffffff81000000ull};
  struct ibemu_data_copy_segment seg;
  memset(&seg, 0, sizeof(seg));
  seg.mr = live.mrs[rnd_below(live.nmr)];
  seg.buffer = (uint64_t)(uintptr_t)arena;
  seg.length = 1 + rnd_below(2 * PAGE);
  seg.direction = rnd_below(2) ? IBEMU_DATA_COPY_TO_KERNEL : IBEMU_DATA_COPY_FROM_KERNEL;
  int want;
  switch (rnd_below(4)) {
    case 0:
      seg.generation = 1 + (unsigned)rnd_below(1000);
      seg.iova = KERNEL_ADDRESS;
      want = ESTALE;
      break;
    case 1:
      seg.mr = 0xffffff - (unsigned)rnd_below(16); /* no MR has it */
      seg.iova = KERNEL_ADDRESS;
      want = ENOENT;
      break;
    case 2:
      seg.iova = not_ram[rnd_below(3)] + rnd_below(1 << 20);
      seg.iova = rnd_below(2) ? (uint64_t)(uintptr_t)arena : seg.iova;
      want = EACCES;
      break;
    default: {
      /* A read of whatever the direct map holds there: bytes, or EACCES
       * where it is no RAM the module may hand out. */
      seg.direction = IBEMU_DATA_COPY_FROM_KERNEL;
      seg.iova = KERNEL_ADDRESS + ((uint64_t)rnd_below(1 << 20) << 12) + rnd_below(PAGE);
      struct ibemu_data_copy arg = {.segments = (uint64_t)(uintptr_t)&seg, .count = 1};
      long ret = raw_ioctl(data, IBEMU_IOC_COPY, &arg);
      if (ret != (long)seg.length && !(ret == -1 && errno == EACCES))
        fail("COPY reading the direct map", i, outcome(ret, errno));
      return;
    }
  }
  struct ibemu_data_copy arg = {.segments = (uint64_t)(uintptr_t)&seg, .count = 1};
  EXPECT("COPY naming a live MR", i, raw_ioctl(data, IBEMU_IOC_COPY, &arg), want);
  if (want == ENOENT) tally(ENOENT);
}

/* The limits both of the fuzzer's own devices advertise (a small HCA's). */
static void set_limits(struct ibemu_ctl_add_device* m) {
  m->max_qp = m->max_cq = m->max_mr = m->max_pd = 1024;
  m->max_qp_wr = 4096;
  m->max_sge = 16;
  m->max_cqe = 65536;
  m->max_mr_size = 1ull << 40;
  m->kernel_qpn_first = 0xf00000;
}

static int fuzz_live(int ctl, int data, long count) {
  struct ibemu_ctl_add_device m;
  memset(&m, 0, sizeof(m));
  m.hdr.type = IBEMU_CTL_ADD_DEVICE;
  m.hdr.length = sizeof(m);
  m.abi_version = IBEMU_CTL_ABI_VERSION;
  m.index = 0;
  m.num_ports = 1;
  snprintf(m.name, sizeof(m.name), "ibemufuzz%d", (int)getpid() % 1000);
  snprintf(m.node_desc, sizeof(m.node_desc), "ctl_fuzz");
  m.node_guid = m.sys_image_guid = 0x0200f00d00000000ull | (unsigned)getpid();
  set_limits(&m);
  m.kernel_qpn_count = 0x1000;
  if (ibemu_ctl_validate(&m, sizeof(m)) || write(ctl, &m, sizeof(m)) != (ssize_t)sizeof(m)) {
    perror("ADD_DEVICE of the fuzzer's device");
    return 1;
  }
  static uint64_t buf[IBEMU_DATA_MAX_BATCH / 8];
  long n;
  while ((n = raw_read(data, buf, sizeof(buf))) > 0) collect((unsigned char*)buf, (size_t)n);
  printf("data channel: a device of its own: %u CQs, %u UD QPs, %u DMA MRs announced\n", live.ncq,
         live.nqp, live.nmr);
  if (!live.nmr || !live.ncq) {
    fprintf(stderr, "no DMA MR or CQ was announced (ib_mad makes both)\n");
    return 1;
  }
  for (long i = 0; i < count && failures < 20; i++) {
    if (live.nqp && rnd_below(2))
      live_complete(data, i);
    else
      live_copy(data, i);
  }
  return failures ? 1 : 0;
}

static int fuzz_data(long count, long rounds) {
  arena = mmap(NULL, ARENA + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  read_only = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (arena == MAP_FAILED || read_only == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  guard = arena + ARENA;
  mprotect(guard, PAGE, PROT_NONE);
  /* A read() that blocked for ever would hang the guest's whole test. */
  alarm(300);

  if (lifecycle() || failures) return 1;
  printf("data channel: OPEN_DATA, EBUSY, EOF and ENODEV after either file closes\n");

  int ctl = open(CTL_PATH, O_RDWR);
  int data = ctl < 0 ? -1 : open_data(ctl);
  if (data < 0) {
    perror("OPEN_DATA");
    return 1;
  }
  fcntl(data, F_SETFL, O_NONBLOCK);
  for (long i = 0; i < count && failures < 20; i++) {
    switch (rnd_below(8)) {
      case 0:
      case 1:
      case 2:
        fuzz_complete(data, i);
        break;
      case 3:
      case 4:
      case 5:
        fuzz_copy(data, i);
        break;
      case 6:
        fuzz_read(data, i);
        break;
      default:
        if (rnd_below(2))
          fuzz_other_ioctl(ctl, data, i);
        else
          EXPECT("a second OPEN_DATA", i, open_data(ctl), EBUSY);
        break;
    }
  }
  if (!failures && fuzz_live(ctl, data, count / 4)) return 1;
  close(data);
  close(ctl);
  if (failures) return 1;
  printf(
      "data channel: %ld inputs got the ABI's answer (COMPLETE and COPY: %ld EINVAL, %ld EFAULT, "
      "%ld ENOENT, %ld taken)\n",
      count, answered_einval, answered_efault, answered_enoent, answered_ok);

  if (race(rounds) || failures) return 1;
  printf("data channel: %ld channels closed under threads using them\n", rounds);
  return 0;
}

/* ---- the daemon's control file ---- */

static int daemon_channel(int pid) {
  char dir[64], path[320], link[128];
  int target = -1;
  snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
  DIR* d = opendir(dir);
  if (!d) {
    perror(dir);
    return 1;
  }
  for (struct dirent* e; (e = readdir(d));) {
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (strcmp(link, CTL_PATH) == 0) target = atoi(e->d_name);
  }
  closedir(d);
  if (target < 0) {
    fprintf(stderr, "process %d has no %s open\n", pid, CTL_PATH);
    return 1;
  }
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int ctl = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, target, 0);
  if (ctl < 0) {
    perror("pidfd_getfd");
    return 1;
  }
  int data = open_data(ctl);
  if (data < 0 && errno == EBUSY) {
    printf("process %d's control file (fd %d): the daemon holds its data channel (EBUSY)\n", pid,
           target);
    return 0;
  }
  if (data < 0) {
    perror("OPEN_DATA");
    return 1;
  }
  /* No consumer queues anything yet, and the replay has nothing to say. */
  unsigned char buf[256];
  fcntl(data, F_SETFL, O_NONBLOCK);
  ssize_t n = read(data, buf, sizeof(buf));
  int read_errno = errno;
  int busy = open_data(ctl) < 0 && errno == EBUSY;
  close(data);
  close(ctl);
  close(pidfd);
  if (!(n == -1 && read_errno == EAGAIN) || !busy) {
    fprintf(stderr, "the daemon's data channel: read %s, second OPEN_DATA %s\n",
            outcome(n, read_errno), busy ? "EBUSY" : "not EBUSY");
    return 1;
  }
  printf("process %d's control file (fd %d): a data channel opened, empty, and closed\n", pid,
         target);
  return 0;
}

/* ---- standing in for the daemon ---- */

struct recv_seen {
  uint32_t qpn;
  uint64_t token;
};

static int stand_in(const char* name, int want) {
  char path[256];
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports", name);
  DIR* d = opendir(path);
  int ports = 0;
  for (struct dirent* e; d && (e = readdir(d));) ports += e->d_name[0] != '.';
  if (d) closedir(d);
  int ctl = open(CTL_PATH, O_RDWR);
  int data = ctl < 0 ? -1 : open_data(ctl);
  if (!ports || data < 0) {
    fprintf(stderr, "no device %s, or no data channel\n", name);
    return 1;
  }
  fcntl(data, F_SETFL, O_NONBLOCK);
  struct ibemu_ctl_add_device m;
  memset(&m, 0, sizeof(m));
  m.hdr.type = IBEMU_CTL_ADD_DEVICE;
  m.hdr.length = sizeof(m);
  m.abi_version = IBEMU_CTL_ABI_VERSION;
  m.num_ports = (unsigned char)ports;
  snprintf(m.name, sizeof(m.name), "%s", name);
  snprintf(m.node_desc, sizeof(m.node_desc), "ctl_fuzz stand-in");
  m.node_guid = m.sys_image_guid = 0x0200f00d00000001ull;
  set_limits(&m);
  m.kernel_qpn_count = 0xfffff;
  /* Adopted (the daemon is gone): the module replays its objects here. */
  if (write(ctl, &m, sizeof(m)) != (ssize_t)sizeof(m)) {
    perror("ADD_DEVICE");
    return 1;
  }
  static uint64_t buf[IBEMU_DATA_MAX_BATCH / 8];
  static struct recv_seen seen[4096];
  static struct { uint32_t qpn, recv_cq; } qps[64];
  int nseen = 0, nqp = 0;
  long n;
  struct pollfd p = {.fd = data, .events = POLLIN};
  while (poll(&p, 1, 1000) == 1 && (n = raw_read(data, buf, sizeof(buf))) > 0) {
    const unsigned char* b = (const unsigned char*)buf;
    for (long at = 0; at < n;) {
      struct ibemu_data_hdr h;
      memcpy(&h, b + at, sizeof(h));
      if (h.type == IBEMU_DATA_CREATE_QP && nqp < 64) {
        struct ibemu_data_create_qp r;
        memcpy(&r, b + at, sizeof(r));
        qps[nqp].qpn = r.qpn;
        qps[nqp++].recv_cq = r.recv_cq;
      } else if (h.type == IBEMU_DATA_RECV_WQE && nseen < 4096) {
        struct ibemu_data_recv_wqe r;
        memcpy(&r, b + at, offsetof(struct ibemu_data_recv_wqe, sge));
        /* An SRQ's WQE (IPoIB's connected mode) names no QP until one
         * takes it: only QPs' own receives are completed here. */
        if (r.qpn) {
          seen[nseen].qpn = r.qpn;
          seen[nseen++].token = r.token;
        }
      }
      at += h.length;
    }
  }
  printf("stand-in for %s: %d QPs and %d receives replayed\n", name, nqp, nseen);
  /* The first QP's oldest receives, completed in order. */
  static uint64_t batch[IBEMU_DATA_MAX_BATCH / 8];
  int done = 0;
  for (int i = 0; i < nseen && done < want; i++) {
    if (seen[i].qpn != seen[0].qpn) continue;
    struct ibemu_data_cqe c;
    memset(&c, 0, sizeof(c));
    c.hdr.type = IBEMU_DATA_CQE;
    c.hdr.length = sizeof(c);
    c.token = seen[i].token;
    c.qpn = seen[i].qpn;
    for (int q = 0; q < nqp; q++)
      if (qps[q].qpn == c.qpn) c.cq = qps[q].recv_cq;
    c.status = 1; /* IB_WC_LOC_LEN_ERR */
    c.opcode = IBEMU_DATA_WC_RECV;
    c.vendor_err = 0xbe17;
    memcpy((unsigned char*)batch + done * sizeof(c), &c, sizeof(c));
    done++;
  }
  struct ibemu_data_complete arg = {.records = (uint64_t)(uintptr_t)batch,
                                    .length = (unsigned)(done * sizeof(struct ibemu_data_cqe))};
  if (done < want || raw_ioctl(data, IBEMU_IOC_COMPLETE, &arg) != 0 ||
      raw_ioctl(data, IBEMU_IOC_COMPLETE, &arg) != 0) {
    fprintf(stderr, "%d receives to complete (%d wanted), or COMPLETE failed: %s\n", done, want,
            strerror(errno));
    return 1;
  }
  printf("stand-in for %s: %d receives of QP 0x%x completed, then again (stale)\n", name, done,
         seen[0].qpn);
  close(data);
  close(ctl);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 3 && strcmp(argv[1], "--stand-in") == 0) return stand_in(argv[2], atoi(argv[3]));
  if (argc > 2 && strcmp(argv[1], "--data") == 0)
    return fuzz_data(atol(argv[2]), argc > 3 ? atol(argv[3]) : 60) ? 1 : 0;
  if (argc > 2 && strcmp(argv[1], "--daemon") == 0) return daemon_channel(atoi(argv[2]));
  return fuzz_control(argc > 1 ? atol(argv[1]) : 10000);
}
