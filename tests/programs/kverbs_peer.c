/*
 * kverbs_peer: a verbs program at the other end of a kernel consumer's RC
 * QP, the one tests/kernel/kverbs/ibemu_kverbs_test.ko creates on an ibemu
 * device. It reads the kernel QP's number, LID, PSN and buffer from the
 * module's control file, connects its own RC QP to it, tells the module to
 * connect back, and then drives both ends:
 *
 *   SEND ping-pong (the kernel's receive and send, with immediate data),
 *   RDMA WRITE and READ into and out of kernel memory, both ways,
 *   the kernel's atomics (FETCH_ADD, CMP_SWAP) on the program's memory,
 *   a WRITE with a bad rkey (REM_ACCESS_ERR, the kernel QP in ERR, its
 *   other WQEs flushed, the program's QP in ERR too), ib_drain_qp, a
 *   reconnection of both QPs from RESET, and fast registration: the
 *   kernel's IB_WR_REG_MR, WRITE and READ through the rkey it registered,
 *   IB_WR_LOCAL_INV or this end's SEND with Invalidate taking it back, and
 *   the remote access error a WRITE through it gets then.
 *
 *   kverbs_peer [-d device] [-c control-file] [-n rounds] [-k | -u | -s]
 *
 * Defaults: ibemu1, /sys/kernel/debug/ibemu_kverbs/ctl, 10 rounds. With -k
 * it only connects, runs the rounds and leaves the kernel QP in RTS with a
 * receive posted (for a test of what the daemon's loss does to it). With -u
 * both QPs are UC: SENDs, RDMA WRITEs (also through a fast registration),
 * READ and atomics refused at post time, drain; the module gets an RC QP
 * again at the end. With -s the
 * kernel QP is an RC QP receiving through an SRQ: SENDs land in the SRQ's
 * WQEs in post order, the armed limit raises SRQ_LIMIT_REACHED once, the
 * QP's move to ERR raises LAST_WQE_REACHED and leaves the SRQ's other WQEs
 * posted, and after a reconnection from RESET a SEND lands in one of them
 * (with -k also: the QP left connected with SRQ WQEs posted, for the
 * daemon's loss and the SRQ's replay). Prints one line
 * per step; exits 0 when every step passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "rc_common.h"

#define BUF_SIZE 65536
#define POLL_MS 20000 /* a completion's time under qemu's emulated CPUs */
#define ACCESS                                                                 \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
   IBV_ACCESS_REMOTE_ATOMIC)

/* What the module says of its end. */
struct kernel_end {
  uint32_t qpn, psn, rkey, size;
  uint16_t lid;
  uint64_t addr;
};

static int ctl_fd = -1;
static char ctl_text[16384];

static struct rc_end me;
static struct ibv_mr* mr;
static uint8_t* buf;
static uint32_t my_psn;
static int uc;  /* both QPs are UC */
static int srq; /* the kernel QP receives through an SRQ */

/* ---- the module's control file ---- */

/* Its whole text now, after a newline (every field starts a line); NULL
 * on error. */
static const char* ctl_read(void) {
  ssize_t n = pread(ctl_fd, ctl_text + 1, sizeof(ctl_text) - 2, 0);
  if (n < 0) {
    perror("read control file");
    return NULL;
  }
  ctl_text[0] = '\n';
  ctl_text[n + 1] = 0;
  return ctl_text;
}

/* Runs a command; returns its result lines, or NULL when it failed. */
static const char* kcmd(const char* fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (pwrite(ctl_fd, line, strlen(line), 0) < 0) {
    fprintf(stderr, "kernel: '%s': %s\n", line, strerror(errno));
    return NULL;
  }
  const char* text = ctl_read();
  const char* result = text ? strstr(text, "result\n") : NULL;
  return result ? result + strlen("result\n") : NULL;
}

static int field(const char* text, const char* name, uint64_t* value) {
  char key[32], *end;
  snprintf(key, sizeof(key), "\n%s ", name);
  const char* at = strstr(text, key);
  if (!at) return -1;
  *value = strtoull(at + strlen(key), &end, 0);
  return end == at + strlen(key) ? -1 : 0;
}

static int read_kernel_end(struct kernel_end* k) {
  const char* text = ctl_read();
  uint64_t v[6];
  if (!text || field(text, "qpn", &v[0]) || field(text, "lid", &v[1]) ||
      field(text, "psn", &v[2]) || field(text, "addr", &v[3]) || field(text, "rkey", &v[4]) ||
      field(text, "size", &v[5])) {
    fprintf(stderr, "unexpected control file:\n%s\n", text ? text : "");
    return -1;
  }
  *k = (struct kernel_end){
      .qpn = v[0], .lid = v[1], .psn = v[2], .addr = v[3], .rkey = v[4], .size = v[5]};
  return 0;
}

/* The kernel QP's state, as query_qp says. */
static int kernel_state_is(const char* state) {
  char want[32];
  snprintf(want, sizeof(want), "\nstate %s\n", state);
  for (int i = 0; i < 50; ++i) {
    const char* text = ctl_read();
    if (text && strstr(text, want)) return 1;
    usleep(100000);
  }
  return 0;
}

/* Waits for the kernel's next `n` completions; each must say `expect`
 * (e.g. "wc RECV status 0"), in order. */
static int kernel_completions(int n, const char* const* expect) {
  const char* r = kcmd("poll %d %d", n, POLL_MS);
  if (!r) return -1;
  const char* line = r;
  for (int i = 0; i < n; ++i) {
    if (strncmp(line, expect[i], strlen(expect[i]))) {
      fprintf(stderr, "kernel completion %d: expected '%s', got:\n%s", i, expect[i], r);
      return -1;
    }
    line = strchr(line, '\n');
    if (!line) return -1;
    line++;
  }
  return 0;
}

static int occurrences(const char* text, const char* what) {
  int n = 0;
  for (const char* at = text; at && (at = strstr(at, what)); at += strlen(what)) n++;
  return n;
}

static int kernel_ok(const char* r) {
  if (r && !strncmp(r, "ok\n", 3)) return 0;
  fprintf(stderr, "kernel: %s", r ? r : "failed\n");
  return -1;
}

/*
 * The module's verbs return before the daemon's engine has applied them, and
 * packets that reach the kernel QP meanwhile find it not yet in RTR or
 * without its receive: RC recovers (RNR NAK, retransmission), UC loses the
 * message. So on UC this end sends only once the engine has caught up: a
 * zero-length WRITE of the kernel's completes after everything the module
 * queued before it.
 */
static int kernel_settled(void) {
  const char* write_ok[] = {"wc RDMA_WRITE status 0"};
  if (!uc) return 0;
  return kernel_ok(kcmd("write 0 0 0 0")) || kernel_completions(1, write_ok);
}

/* The kernel's FRWR MR as it is registered now. */
static int read_frwr(uint32_t* rkey, uint64_t* iova) {
  const char* text = ctl_read();
  uint64_t v[2];
  if (!text || field(text, "frwr_rkey", &v[0]) || field(text, "frwr_iova", &v[1])) return -1;
  *rkey = (uint32_t)v[0];
  *iova = v[1];
  return 0;
}

/* The kernel registers `len` bytes of its buffer at `off` (IB_WR_REG_MR). */
static int kernel_registers(size_t off, size_t len, uint32_t* rkey, uint64_t* iova) {
  const char* reg_ok[] = {"wc REG_MR status 0"};
  if (kernel_ok(kcmd("frwr %zu %zu", off, len)) || kernel_completions(1, reg_ok) ||
      read_frwr(rkey, iova))
    return -1;
  if (*iova != 0 && (*rkey & 0xff) != 0) return 0;
  fprintf(stderr, "the kernel's FRWR MR: rkey 0x%x, iova 0x%lx\n", *rkey, (unsigned long)*iova);
  return -1;
}

/* ---- this end ---- */

static uint8_t pattern(uint64_t seed, uint64_t i) { return (uint8_t)(seed + i * 7 + (i >> 8)); }

static void fill(size_t off, size_t len, uint64_t seed) {
  for (size_t i = 0; i < len; ++i) buf[off + i] = pattern(seed, i);
}

static long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int check(size_t off, size_t len, uint64_t seed) {
  for (size_t i = 0; i < len; ++i)
    if (buf[off + i] != pattern(seed, i)) {
      fprintf(stderr, "byte %zu: 0x%02x, expected 0x%02x\n", i, buf[off + i], pattern(seed, i));
      return -1;
    }
  return 0;
}

/* This end's next completion, which must have `status` (and, when
 * successful, `opcode`). */
static int my_completion(enum ibv_wc_status status, enum ibv_wc_opcode opcode, struct ibv_wc* out) {
  struct ibv_wc wc;
  long deadline = now_ms() + POLL_MS;
  int n;
  while ((n = ibv_poll_cq(me.cq, 1, &wc)) == 0 && now_ms() < deadline) usleep(1000);
  if (n != 1) {
    fprintf(stderr, "no completion of this end within %d ms\n", POLL_MS);
    return -1;
  }
  if (wc.status != status || (status == IBV_WC_SUCCESS && wc.opcode != opcode)) {
    fprintf(stderr, "this end: %s (opcode %d), expected %s (opcode %d)\n",
            ibv_wc_status_str(wc.status), wc.opcode, ibv_wc_status_str(status), opcode);
    return -1;
  }
  if (out) *out = wc;
  return 0;
}

static int post_recv(size_t off, size_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(me.qp, &wr, &bad);
}

static int post(enum ibv_wr_opcode opcode, size_t off, size_t len, uint64_t raddr, uint32_t rkey) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf + off, .length = len, .lkey = mr->lkey};
  struct ibv_send_wr wr = {
      .sg_list = &sge, .num_sge = 1, .opcode = opcode, .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  struct ibv_send_wr* bad;
  return ibv_post_send(me.qp, &wr, &bad);
}

static uint64_t my_addr(size_t off) { return (uintptr_t)buf + off; }

/* A WRITE of `len` bytes through the kernel's rkey; its status. */
static int write_through(uint32_t rkey, uint64_t iova, size_t len, enum ibv_wc_status status) {
  return post(IBV_WR_RDMA_WRITE, 0, len, iova, rkey) ||
         my_completion(status, IBV_WC_RDMA_WRITE, NULL);
}

/* A UC QP in place of open_rc_end's RC one. */
static int use_uc_qp(void) {
  struct ibv_qp_init_attr qa = {
      .send_cq = me.cq,
      .recv_cq = me.cq,
      .qp_type = IBV_QPT_UC,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  ibv_destroy_qp(me.qp);
  me.qp = ibv_create_qp(me.pd, &qa);
  return me.qp ? 0 : -1;
}

/* RESET -> RTS for UC: no responder resources, RNR NAKs or retries. */
static int connect_uc_qp(uint32_t remote_qpn, uint16_t remote_lid, uint32_t rq_psn) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(me.qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.ah_attr.dlid = remote_lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(me.qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
    return -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = my_psn;
  return ibv_modify_qp(me.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int connect_both(const struct kernel_end* k) {
  struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
  my_psn = (uint32_t)random() & 0xffffff;
  if (ibv_modify_qp(me.qp, &reset, IBV_QP_STATE) ||
      (uc ? connect_uc_qp(k->qpn, k->lid, k->psn)
          : connect_rc_qp_psn(me.qp, k->qpn, k->lid, IBV_MTU_1024, 14, 7, ACCESS, my_psn, k->psn)))
    return -1;
  return kernel_ok(kcmd("connect %u %u %u", me.qp->qp_num, me.lid, my_psn)) || kernel_settled();
}

/* ---- the steps ---- */

/* The kernel receives the program's SEND, then answers with its own. */
static int ping_pong(int rounds) {
  const char* recv_ok[] = {"wc RECV status 0 (success) len 4096"};
  const char* send_ok[] = {"wc SEND status 0"};
  for (int r = 0; r < rounds; ++r) {
    struct ibv_wc wc;
    if (kernel_ok(kcmd("recv 0 4096")) || post_recv(32768, 4096) || kernel_settled()) return -1;
    fill(0, 4096, r);
    if (post(IBV_WR_SEND, 0, 4096, 0, 0) || my_completion(IBV_WC_SUCCESS, IBV_WC_SEND, NULL) ||
        kernel_completions(1, recv_ok) || kernel_ok(kcmd("check 0 4096 %d", r)))
      return -1;
    if (kernel_ok(kcmd("fill 4096 4096 %d", 100 + r)) ||
        kernel_ok(kcmd("send 4096 4096 %d", 0x1000 + r)) || kernel_completions(1, send_ok) ||
        my_completion(IBV_WC_SUCCESS, IBV_WC_RECV, &wc))
      return -1;
    if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != (uint32_t)(0x1000 + r) ||
        wc.byte_len != 4096 || check(32768, 4096, 100 + r)) {
      fprintf(stderr, "round %d: the kernel's SEND arrived wrong\n", r);
      return -1;
    }
  }
  return 0;
}

/*
 * A WRITE's data in place, as its completion says on RC (the ACK came back
 * after it landed). On UC the requester's WQE completes once sent: the
 * data is looked for until it is there.
 */
static int landed_here(size_t off, size_t len, uint64_t seed) {
  for (long deadline = now_ms() + POLL_MS; uc && now_ms() < deadline; usleep(10000))
    if (buf[off + len - 1] == pattern(seed, len - 1) && !check(off, len, seed)) return 0;
  return check(off, len, seed);
}

static int landed_in_kernel(size_t off, size_t len, uint64_t seed) {
  const char* r = kcmd("check %zu %zu %lu", off, len, (unsigned long)seed);
  for (long deadline = now_ms() + POLL_MS; uc && r && strncmp(r, "ok\n", 3) && now_ms() < deadline;
       usleep(10000))
    r = kcmd("check %zu %zu %lu", off, len, (unsigned long)seed);
  return kernel_ok(r);
}

static int rdma_write(const struct kernel_end* k) {
  const char* write_ok[] = {"wc RDMA_WRITE status 0"};
  /* Into kernel memory. */
  fill(0, 16384, 7);
  if (post(IBV_WR_RDMA_WRITE, 0, 16384, k->addr + 8192, k->rkey) ||
      my_completion(IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, NULL) || landed_in_kernel(8192, 16384, 7))
    return -1;
  /* Out of it. */
  memset(buf + 16384, 0, 8192);
  if (kernel_ok(kcmd("fill 0 8192 9")) ||
      kernel_ok(kcmd("write 0 8192 %lu %u", my_addr(16384), mr->rkey)) ||
      kernel_completions(1, write_ok))
    return -1;
  return landed_here(16384, 8192, 9);
}

static int rdma_read(const struct kernel_end* k) {
  const char* read_ok[] = {"wc RDMA_READ status 0"};
  /* Out of kernel memory. */
  memset(buf, 0, 16384);
  if (kernel_ok(kcmd("fill 24576 16384 11")) ||
      post(IBV_WR_RDMA_READ, 0, 16384, k->addr + 24576, k->rkey) ||
      my_completion(IBV_WC_SUCCESS, IBV_WC_RDMA_READ, NULL) || check(0, 16384, 11))
    return -1;
  /* Into it. */
  fill(16384, 8192, 13);
  if (kernel_ok(kcmd("read 40960 8192 %lu %u", my_addr(16384), mr->rkey)) ||
      kernel_completions(1, read_ok))
    return -1;
  return kernel_ok(kcmd("check 40960 8192 13"));
}

static int expect_word(const char* r, uint64_t want) {
  unsigned long long got;
  if (!r || sscanf(r, "word %llx", &got) != 1 || got != want) {
    fprintf(stderr, "kernel word: %s, expected 0x%llx\n", r ? r : "?", (unsigned long long)want);
    return -1;
  }
  return 0;
}

static int atomics(void) {
  const char* fadd_ok[] = {"wc FETCH_ADD status 0"};
  const char* cswap_ok[] = {"wc CMP_SWAP status 0"};
  volatile uint64_t* word = (volatile uint64_t*)(buf + 49152);
  *word = 100;
  /* The kernel's atomics on this program's memory. */
  if (kernel_ok(kcmd("fadd 49152 %lu %u 5", my_addr(49152), mr->rkey)) ||
      kernel_completions(1, fadd_ok) || expect_word(kcmd("word 49152"), 100))
    return -1;
  if (kernel_ok(kcmd("cswap 49160 %lu %u 105 7", my_addr(49152), mr->rkey)) ||
      kernel_completions(1, cswap_ok) || expect_word(kcmd("word 49160"), 105))
    return -1;
  if (*word != 7) {
    fprintf(stderr, "this end's word: %lu, expected 7\n", (unsigned long)*word);
    return -1;
  }
  /* Not the other way: the unsafe global rkey grants remote read and
   * write only (ib_alloc_pd), as on any HCA. */
  return 0;
}

/*
 * A WRITE with an rkey the program never handed out: the kernel's WQE
 * completes with a remote access error, its QP goes to ERR and the WQEs
 * behind it (a SEND, two receives) flush. The program's QP, the responder,
 * goes to ERR too: its receive flushes.
 */
static int bad_rkey(void) {
  const char* error[] = {"wc RDMA_WRITE status 10 (remote access error)"};
  if (post_recv(0, 64) || kernel_ok(kcmd("recv 0 64")) || kernel_ok(kcmd("recv 64 64")) ||
      kernel_ok(kcmd("write 0 64 %lu %u", my_addr(0), mr->rkey ^ 0x5a5a00)) ||
      kernel_ok(kcmd("send 0 64")))
    return -1;
  /* The WRITE's error first; then the flushes of both queues, whose order
   * between the queues is not defined (the SEND may reach the engine
   * after the error). */
  if (kernel_completions(1, error)) return -1;
  const char* r = kcmd("poll 3 %d", POLL_MS);
  if (occurrences(r, "wc SEND status 5 (WR flushed)") != 1 ||
      occurrences(r, "wc RECV status 5 (WR flushed)") != 2) {
    fprintf(stderr, "expected one SEND and two RECVs flushed, got:\n%s", r ? r : "");
    return -1;
  }
  if (!kernel_state_is("ERR")) {
    fprintf(stderr, "the kernel QP is not in ERR:\n%s\n", ctl_read());
    return -1;
  }
  return my_completion(IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, NULL);
}

/* ib_drain_qp on a QP in ERR with a receive still posted: it returns, and
 * the receive flushed before it. */
static int drain(void) {
  const char* flushed[] = {"wc RECV status 5 (WR flushed)"};
  if (kernel_ok(kcmd("recv 0 64")) || kernel_ok(kcmd("drain")) || kernel_completions(1, flushed))
    return -1;
  return kernel_state_is("ERR") ? 0 : -1;
}

/*
 * The kernel registers part of its buffer; this end WRITEs into it and
 * READs it back through the new rkey; the kernel invalidates it
 * (LOCAL_INV); a WRITE through it then is a remote access error, which puts
 * both QPs in ERR.
 */
static int frwr_local_inv(void) {
  const char* inv_ok[] = {"wc LOCAL_INV status 0"};
  uint32_t rkey;
  uint64_t iova;
  if (kernel_registers(8192, 16384, &rkey, &iova)) return -1;
  fill(0, 16384, 21);
  if (write_through(rkey, iova, 16384, IBV_WC_SUCCESS) || landed_in_kernel(8192, 16384, 21))
    return -1;
  memset(buf + 16384, 0, 16384);
  if (post(IBV_WR_RDMA_READ, 16384, 16384, iova, rkey) ||
      my_completion(IBV_WC_SUCCESS, IBV_WC_RDMA_READ, NULL) || check(16384, 16384, 21))
    return -1;
  if (kernel_ok(kcmd("inv")) || kernel_completions(1, inv_ok)) return -1;
  return write_through(rkey, iova, 64, IBV_WC_REM_ACCESS_ERR) || !kernel_state_is("ERR");
}

/* This end's SEND with Invalidate of the kernel's rkey: the kernel's
 * receive says so, and a WRITE through the rkey is refused after it. */
static int frwr_send_with_inv(void) {
  uint32_t rkey;
  uint64_t iova;
  char want[64];
  if (kernel_registers(0, 4096, &rkey, &iova) || kernel_ok(kcmd("recv 4096 64"))) return -1;
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND_WITH_INV,
                           .send_flags = IBV_SEND_SIGNALED,
                           .invalidate_rkey = rkey},
                     *bad;
  if (ibv_post_send(me.qp, &wr, &bad) || my_completion(IBV_WC_SUCCESS, IBV_WC_SEND, NULL))
    return -1;
  snprintf(want, sizeof(want), "wc RECV status 0 (success) len 64 opcode %d inv 0x%x",
           128 /* IB_WC_RECV */, rkey);
  const char* expect[] = {want};
  if (kernel_completions(1, expect)) return -1;
  return write_through(rkey, iova, 64, IBV_WC_REM_ACCESS_ERR);
}

/* UC: the kernel's registration, a WRITE through it, the invalidation
 * (UC has no NAK to say a later WRITE was refused). */
static int uc_frwr(void) {
  const char* inv_ok[] = {"wc LOCAL_INV status 0"};
  uint32_t rkey;
  uint64_t iova;
  fill(0, 4096, 23);
  if (kernel_registers(12288, 4096, &rkey, &iova) ||
      write_through(rkey, iova, 4096, IBV_WC_SUCCESS) || landed_in_kernel(12288, 4096, 23))
    return -1;
  return kernel_ok(kcmd("inv")) || kernel_completions(1, inv_ok);
}

static int step(const char* name, int rc) {
  printf("%s %s\n", rc ? "FAIL" : "ok  ", name);
  fflush(stdout);
  return rc ? 1 : 0;
}

/* A command the module's QP must refuse at post time (EINVAL). */
static int kernel_refuses(const char* line) {
  if (pwrite(ctl_fd, line, strlen(line), 0) < 0 && errno == EINVAL) return 0;
  fprintf(stderr, "kernel: '%s' was not refused with EINVAL\n", line);
  return -1;
}

/* UC carries no RDMA READ and no atomics (IBA table 84). */
static int uc_refusals(void) {
  char line[128];
  snprintf(line, sizeof(line), "read 0 64 %lu %u", my_addr(0), mr->rkey);
  if (kernel_refuses(line)) return -1;
  snprintf(line, sizeof(line), "fadd 0 %lu %u 1", my_addr(0), mr->rkey);
  return kernel_refuses(line);
}

static int uc_steps(const struct kernel_end* k, int rounds) {
  int failed = step("UC: connect (the program's QP and the kernel's)", connect_both(k));
  if (failed) return 1;
  failed += step("UC: SEND ping-pong with the kernel QP", ping_pong(rounds));
  failed += step("UC: RDMA WRITE into and out of kernel memory", rdma_write(k));
  failed += step("UC: RDMA READ and atomics refused at post time", uc_refusals());
  failed += step("UC: REG_MR, a WRITE through its rkey, LOCAL_INV", uc_frwr());
  failed += step("UC: ib_drain_qp", kernel_ok(kcmd("drain")));
  return failed + step("the module's QP an RC one again", kernel_ok(kcmd("type rc")));
}

/* ---- the kernel QP on an SRQ ---- */

/* The kernel's control file says `what` (a "\nname value" line or an
 * event) within a few seconds. */
static int kernel_says(const char* what) {
  for (int i = 0; i < 100; ++i) {
    const char* text = ctl_read();
    if (text && strstr(text, what)) return 0;
    usleep(100000);
  }
  fprintf(stderr, "the kernel never said '%s':\n%s\n", what, ctl_text);
  return -1;
}

/* SENDs of `count` 4 KiB messages, seeds from `seed`, each received by the
 * kernel (its completions in order) and found in SRQ WQE `first` + i, that
 * is at offset 4096 * (first + i): the SRQ hands its WQEs out in post
 * order. */
static int sends_into_srq(int first, int count, int seed) {
  for (int i = 0; i < count; ++i) {
    const char* recv_ok[] = {"wc RECV status 0 (success) len 4096"};
    fill(0, 4096, seed + i);
    if (post(IBV_WR_SEND, 0, 4096, 0, 0) || my_completion(IBV_WC_SUCCESS, IBV_WC_SEND, NULL) ||
        kernel_completions(1, recv_ok) ||
        kernel_ok(kcmd("check %d 4096 %d", 4096 * (first + i), seed + i)))
      return -1;
  }
  return 0;
}

/* Four WQEs on the SRQ, the limit armed at 2: three messages take three,
 * and the third leaves one, below the limit: one event, the limit 0 again. */
static int srq_receives(void) {
  for (int i = 0; i < 4; ++i)
    if (kernel_ok(kcmd("srecv %d 4096", 4096 * i))) return -1;
  if (kernel_ok(kcmd("limit 2")) || kernel_says("\nsrq_limit 2\n") || sends_into_srq(0, 2, 40))
    return -1;
  if (strstr(ctl_read(), "SRQ limit reached")) {
    fprintf(stderr, "the limit fired with two WQEs left:\n%s\n", ctl_text);
    return -1;
  }
  if (sends_into_srq(2, 1, 42) || kernel_says("SRQ limit reached") ||
      kernel_says("\nsrq_limit 0\n"))
    return -1;
  return occurrences(ctl_read(), "SRQ limit reached") == 1 ? 0 : -1;
}

/* ib_drain_qp moves the QP to ERR (and drains only its send queue: its
 * receives are the SRQ's): LAST_WQE_REACHED, and the SRQ's last WQE is not
 * flushed. */
static int srq_last_wqe(void) {
  if (kernel_ok(kcmd("drain")) || kernel_says("last WQE reached") || !kernel_state_is("ERR"))
    return -1;
  const char* r = kcmd("poll 1 2000");
  if (!r || !strstr(r, "timeout: 1 more")) {
    fprintf(stderr, "the SRQ's WQE completed when its QP went to ERR:\n%s", r ? r : "");
    return -1;
  }
  return 0;
}

static int srq_steps(const struct kernel_end* k, int keep) {
  int failed = step("SRQ: connect the kernel RC QP on an SRQ",
                    connect_both(k) || kernel_says("\nsrq_qp yes\n"));
  if (failed) return 1;
  if (keep) {
    /* Two WQEs posted, one taken: one left for the daemon's successor. */
    failed += step("SRQ: a SEND through the SRQ, one WQE left posted",
                   kernel_ok(kcmd("srecv 0 4096")) || kernel_ok(kcmd("srecv 4096 4096")) ||
                       sends_into_srq(0, 1, 50));
    return failed;
  }
  failed += step("SRQ: SENDs land in the SRQ's WQEs in order; the limit event fires once",
                 srq_receives());
  failed +=
      step("SRQ: the QP to ERR: LAST_WQE_REACHED, the SRQ's WQE stays posted", srq_last_wqe());
  failed += step("SRQ: reconnected from RESET, a SEND lands in the WQE left",
                 connect_both(k) || sends_into_srq(3, 1, 60));
  failed += step("SRQ: ib_drain_qp on teardown", kernel_ok(kcmd("drain")));
  return failed + step("the module's QP an RC one again", kernel_ok(kcmd("type rc")));
}

/* After the daemon's loss and restart (-s -k first): the QP went to ERR,
 * with LAST_WQE_REACHED; reconnected, a SEND lands in the WQE the SRQ kept
 * and the new daemon got again. */
static int srq_after_restart(const struct kernel_end* k) {
  int failed = step(
      "SRQ: the QP on the SRQ in ERR with QP_FATAL and LAST_WQE_REACHED",
      !kernel_state_is("ERR") || kernel_says("QP fatal error") || kernel_says("last WQE reached"));
  failed += step("SRQ: reconnected, a SEND lands in the replayed SRQ WQE",
                 connect_both(k) || sends_into_srq(1, 1, 70));
  failed += step("SRQ: ib_drain_qp on teardown", kernel_ok(kcmd("drain")));
  return failed + step("the module's QP an RC one again", kernel_ok(kcmd("type rc")));
}

int main(int argc, char** argv) {
  const char* device = "ibemu1";
  const char* ctl = "/sys/kernel/debug/ibemu_kverbs/ctl";
  int rounds = 10, keep = 0, restarted = 0, opt;
  while ((opt = getopt(argc, argv, "d:c:n:kusr")) != -1) {
    switch (opt) {
      case 'd':
        device = optarg;
        break;
      case 'c':
        ctl = optarg;
        break;
      case 'n':
        rounds = atoi(optarg);
        break;
      case 'k':
        keep = 1;
        break;
      case 'u':
        uc = 1;
        break;
      case 's':
        srq = 1;
        break;
      case 'r':
        restarted = 1;
        break;
      default:
        fprintf(stderr,
                "usage: %s [-d device] [-c control-file] [-n rounds] [-k | -u | -s [-k | -r]]\n",
                argv[0]);
        return 2;
    }
  }
  srandom(getpid() ^ time(NULL));
  ctl_fd = open(ctl, O_RDWR);
  if (ctl_fd < 0) {
    perror(ctl);
    return 1;
  }
  struct kernel_end k;
  if ((uc && kernel_ok(kcmd("type uc"))) || (srq && !restarted && kernel_ok(kcmd("type srq"))) ||
      read_kernel_end(&k))
    return 1;
  printf("kernel QP 0x%x, LID %u, PSN 0x%x, buffer 0x%lx (rkey 0x%x)\n", k.qpn, k.lid, k.psn,
         (unsigned long)k.addr, k.rkey);
  buf = aligned_alloc(4096, BUF_SIZE);
  if (!buf || open_rc_end(device, 16, &me) || !(mr = ibv_reg_mr(me.pd, buf, BUF_SIZE, ACCESS)) ||
      (uc && use_uc_qp())) {
    fprintf(stderr, "%s: no QP: %s\n", device, strerror(errno));
    return 1;
  }
  if (uc) return uc_steps(&k, rounds) ? 1 : 0;
  if (srq && restarted) return srq_after_restart(&k) ? 1 : 0;
  if (srq) return srq_steps(&k, keep) ? 1 : 0;
  int failed = step("connect (the program's QP and the kernel's, RESET to RTS)", connect_both(&k));
  if (failed) return 1;
  failed += step("SEND ping-pong with the kernel QP", ping_pong(rounds));
  if (keep)
    return step("the kernel QP left in RTS with a receive posted", kernel_ok(kcmd("recv 0 64"))) ||
           failed;
  failed += step("RDMA WRITE into and out of kernel memory", rdma_write(&k));
  failed += step("RDMA READ out of and into kernel memory", rdma_read(&k));
  failed += step("the kernel's atomics on this program's memory", atomics());
  failed += step("a bad rkey: REM_ACCESS_ERR, the kernel QP in ERR, the rest flushed", bad_rkey());
  failed += step("ib_drain_qp", drain());
  failed += step("reconnected from RESET: a SEND round trip", connect_both(&k) || ping_pong(1));
  failed +=
      step("fast registration: WRITE and READ through the kernel's REG_MR, none after LOCAL_INV",
           frwr_local_inv());
  failed += step("fast registration: a SEND with Invalidate takes the kernel's rkey back",
                 connect_both(&k) || frwr_send_with_inv());
  failed += step("ib_drain_qp on teardown", connect_both(&k) || kernel_ok(kcmd("drain")));
  ibv_destroy_qp(me.qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(me.cq);
  ibv_dealloc_pd(me.pd);
  ibv_close_device(me.ctx);
  return failed ? 1 : 0;
}
