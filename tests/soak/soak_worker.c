/*
 * One side of a soak pair (tests/soak/README.md): QPS RC QPs and one UD QP
 * to the same process on the other side, random SEND, RDMA WRITE, RDMA READ
 * and atomic traffic of random sizes for SECONDS, every byte checked.
 *
 *   soak_worker -d DEVICE -p TCP_PORT [-q QPS] [-t SECONDS] [-r SEED] [SERVER]
 *
 * What it checks, and says on stderr before exiting 1 when it fails:
 *   - every posted work request completes exactly once, successfully (RC
 *     recovers from the link's faults; a flush or retry error is a failure);
 *   - SENDs arrive in order, once each, with the bytes sent (a checksummed
 *     header carries the QP, sequence number and length);
 *   - an RDMA READ of what an RDMA WRITE just put in the peer's memory returns
 *     exactly those bytes;
 *   - FETCH_AND_ADD returns the running sum of this QP's adds, and the peer's
 *     counter ends equal to the sum (compared over TCP at the end);
 *   - datagrams that arrive (UD may lose some under faults) are intact;
 *   - no QP goes STALL_SECONDS without a completion while it has work.
 * On success it prints one JSON line with what it did.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "rc_common.h"

enum {
  kMaxQps = 64,
  kWindow = 8,     /* WRs outstanding per RC QP */
  kMaxMsg = 32768, /* largest SEND / WRITE */
  kRecvDepth = 2 * kWindow,
  kUdMsg = 1024, /* UD payload (path MTU 2048 fits it) */
  kUdRecvs = 64,
  kStallSeconds = 30, /* longer than the provider's stall tolerance */
  kQkey = 0x11111111,
};

enum op { kOpSend, kOpWrite, kOpRead, kOpAtomic, kOpUd };

/* The header that starts every SEND and datagram. */
struct msg_header {
  uint32_t magic;
  uint32_t qp;
  uint64_t seq;
  uint32_t len; /* payload bytes after the header */
  uint32_t crc; /* of the payload */
};
#define kMagic 0x534f414bu /* "SOAK" */

/* One outstanding work request: its own buffers, so nothing is reused early. */
struct slot {
  int busy;
  enum op op;
  uint32_t len;
  uint64_t remote_off; /* WRITE/READ: where in the peer's area */
  uint64_t add;        /* atomic: what was added */
  uint8_t* buf;        /* kMaxMsg + header */
  uint8_t* check;      /* READ lands here; compared with buf */
};

struct remote_qp {
  uint32_t qpn;
  uint64_t area; /* the peer's window for this QP's WRITEs and READs */
  uint64_t counter;
  uint32_t rkey;
};

struct side_info { /* what is exchanged over TCP */
  uint16_t lid;
  uint32_t ud_qpn;
  struct remote_qp qp[kMaxQps];
};

struct qp_state {
  struct ibv_qp* qp;
  struct slot slots[kWindow];
  int outstanding;
  int atomic_busy; /* one READ/atomic outstanding (max_rd_atomic 1) */
  uint64_t next_seq, expect_seq;
  uint64_t added;   /* sum of this QP's FETCH_AND_ADDs on the peer */
  uint64_t fetched; /* what the next one must return */
  time_t last_completion;
  uint8_t* recv_bufs;
};

static struct {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  uint8_t* mem;
  size_t mem_len;
  int nqps;
  struct qp_state qps[kMaxQps];
  struct ibv_qp* ud;
  struct ibv_ah* ah;
  uint8_t* ud_bufs; /* kUdRecvs receive buffers, then one send buffer */
  int ud_busy;
  struct side_info me, peer;
  uint64_t counts[5], ud_received, bytes;
  unsigned seed;
} g;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "soak_worker: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static uint32_t rnd(void) { return (uint32_t)rand_r(&g.seed); }

/* Memory layout: per QP, kWindow slots of (header + kMaxMsg) * 2 (data and
 * check), kRecvDepth receive buffers, an area the peer WRITEs and READs
 * (kWindow * kMaxMsg) and an 8-byte counter; then the UD buffers. */
static size_t slot_bytes(void) { return 2 * (sizeof(struct msg_header) + kMaxMsg); }
static size_t recv_bytes(void) { return sizeof(struct msg_header) + kMaxMsg; }
static size_t area_bytes(void) { return (size_t)kWindow * kMaxMsg; }
static size_t per_qp(void) {
  return kWindow * slot_bytes() + kRecvDepth * recv_bytes() + area_bytes() + 64;
}
static uint8_t* area_of(int q) {
  return g.mem + q * per_qp() + kWindow * slot_bytes() + kRecvDepth * recv_bytes();
}
static uint64_t* counter_of(int q) { return (uint64_t*)(area_of(q) + area_bytes()); }
static size_t ud_buf_bytes(void) { return 40 + sizeof(struct msg_header) + kUdMsg; }

static void post_recv(struct ibv_qp* qp, uint8_t* buf, uint32_t len, uint64_t wr_id) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = g.mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &wr, &bad)) fail("ibv_post_recv: %s", strerror(errno));
}

static void fill_message(uint8_t* buf, uint32_t q, uint64_t seq, uint32_t len) {
  struct msg_header h = {kMagic, q, seq, len, 0};
  for (uint32_t i = 0; i < len; ++i) buf[sizeof(h) + i] = (uint8_t)rnd();
  h.crc = (uint32_t)crc32(0, buf + sizeof(h), len);
  memcpy(buf, &h, sizeof(h));
}

/* The header and checksum of a received message; its length on success. */
static int check_message(const uint8_t* buf, uint32_t byte_len, struct msg_header* h) {
  if (byte_len < sizeof(*h)) return -1;
  memcpy(h, buf, sizeof(*h));
  if (h->magic != kMagic || h->len != byte_len - sizeof(*h)) return -1;
  if ((uint32_t)crc32(0, buf + sizeof(*h), h->len) != h->crc) return -1;
  return (int)h->len;
}

static void post_ud(void);

static void post_rc(int q) {
  struct qp_state* s = &g.qps[q];
  int i = 0;
  while (i < kWindow && s->slots[i].busy) ++i;
  if (i == kWindow) return;
  struct slot* sl = &s->slots[i];
  enum op op = (enum op)(rnd() % 4);
  if ((op == kOpRead || op == kOpAtomic) && s->atomic_busy) op = kOpSend;
  struct ibv_sge sge = {.addr = (uintptr_t)sl->buf, .lkey = g.mr->lkey};
  struct ibv_send_wr wr = {.wr_id = (uint64_t)q << 32 | (uint64_t)i,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  const struct remote_qp* r = &g.peer.qp[q];
  sl->op = op;
  switch (op) {
    case kOpSend:
      sl->len = rnd() % kMaxMsg;
      fill_message(sl->buf, (uint32_t)q, s->next_seq++, sl->len);
      sge.length = (uint32_t)sizeof(struct msg_header) + sl->len;
      wr.opcode = IBV_WR_SEND;
      break;
    case kOpWrite:
    case kOpRead:
      /* A WRITE of random bytes into this slot's window of the peer's area,
       * then (kOpRead) a READ of the same bytes back for comparison. */
      sl->len = 1 + rnd() % kMaxMsg;
      sl->remote_off = (uint64_t)i * kMaxMsg;
      if (op == kOpWrite) {
        for (uint32_t k = 0; k < sl->len; ++k) sl->buf[k] = (uint8_t)rnd();
        sge.length = sl->len;
        wr.opcode = IBV_WR_RDMA_WRITE;
      } else {
        /* A READ needs a WRITE before it on this window: post both, fenced. */
        for (uint32_t k = 0; k < sl->len; ++k) sl->buf[k] = (uint8_t)rnd();
        struct ibv_sge wsge = {.addr = (uintptr_t)sl->buf, .length = sl->len, .lkey = g.mr->lkey};
        struct ibv_send_wr w = {.wr_id = UINT64_MAX, /* unsignaled: completes with the READ */
                                .sg_list = &wsge,
                                .num_sge = 1,
                                .opcode = IBV_WR_RDMA_WRITE};
        w.wr.rdma.remote_addr = r->area + sl->remote_off;
        w.wr.rdma.rkey = r->rkey;
        w.next = &wr;
        sge.addr = (uintptr_t)sl->check;
        sge.length = sl->len;
        memset(sl->check, 0, sl->len);
        wr.opcode = IBV_WR_RDMA_READ;
        wr.send_flags |= IBV_SEND_FENCE;
        wr.wr.rdma.remote_addr = r->area + sl->remote_off;
        wr.wr.rdma.rkey = r->rkey;
        if (ibv_post_send(s->qp, &w, &bad)) fail("post WRITE+READ: %s", strerror(errno));
        s->atomic_busy = 1;
        goto posted;
      }
      wr.wr.rdma.remote_addr = r->area + sl->remote_off;
      wr.wr.rdma.rkey = r->rkey;
      break;
    case kOpAtomic:
      sl->add = 1 + rnd() % 1000;
      sge.length = 8;
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic.remote_addr = r->counter;
      wr.wr.atomic.rkey = r->rkey;
      wr.wr.atomic.compare_add = sl->add;
      s->atomic_busy = 1;
      break;
    default:
      return;
  }
  if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send on QP %d: %s", q, strerror(errno));
posted:
  sl->busy = 1;
  ++s->outstanding;
  g.counts[op]++;
  g.bytes += sl->len;
  if (rnd() % 8 == 0) post_ud(); /* datagrams in proportion to the RC traffic */
}

static void post_ud(void) {
  if (g.ud_busy) return;
  uint8_t* buf = g.ud_bufs + kUdRecvs * ud_buf_bytes();
  const uint32_t len = rnd() % kUdMsg;
  fill_message(buf, UINT32_MAX, g.counts[kOpUd], len);
  struct ibv_sge sge = {.addr = (uintptr_t)buf,
                        .length = (uint32_t)sizeof(struct msg_header) + len,
                        .lkey = g.mr->lkey};
  struct ibv_send_wr wr = {.wr_id = UINT64_MAX - 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.ud.ah = g.ah;
  wr.wr.ud.remote_qpn = g.peer.ud_qpn;
  wr.wr.ud.remote_qkey = kQkey;
  if (ibv_post_send(g.ud, &wr, &bad)) fail("UD post: %s", strerror(errno));
  g.ud_busy = 1;
  g.counts[kOpUd]++;
}

static void on_recv(struct ibv_wc* wc) {
  const uint64_t id = wc->wr_id;
  if (wc->qp_num == g.ud->qp_num) {
    uint8_t* buf = g.ud_bufs + id * ud_buf_bytes();
    struct msg_header h;
    if (check_message(buf + 40, wc->byte_len - 40, &h) < 0) fail("a datagram arrived corrupted");
    g.ud_received++;
    post_recv(g.ud, buf, (uint32_t)ud_buf_bytes(), id);
    return;
  }
  const int q = (int)(id >> 32), k = (int)(id & 0xffffffff);
  struct qp_state* s = &g.qps[q];
  uint8_t* buf = s->recv_bufs + (size_t)k * recv_bytes();
  struct msg_header h;
  if (check_message(buf, wc->byte_len, &h) < 0)
    fail("QP %d: a SEND arrived corrupted (%u bytes)", q, wc->byte_len);
  if (h.qp != (uint32_t)q) fail("QP %d: got QP %u's message", q, h.qp);
  if (h.seq != s->expect_seq)
    fail("QP %d: SEND %" PRIu64 " arrived where %" PRIu64 " was due (lost or duplicated)", q, h.seq,
         s->expect_seq);
  s->expect_seq++;
  post_recv(s->qp, buf, (uint32_t)recv_bytes(), id);
}

static void on_send(struct ibv_wc* wc) {
  if (wc->wr_id == UINT64_MAX - 1) {
    g.ud_busy = 0;
    return;
  }
  const int q = (int)(wc->wr_id >> 32), i = (int)(wc->wr_id & 0xffffffff);
  if (q >= g.nqps || i >= kWindow)
    fail("a completion for a WR never posted: 0x%" PRIx64, wc->wr_id);
  struct qp_state* s = &g.qps[q];
  struct slot* sl = &s->slots[i];
  if (!sl->busy) fail("QP %d: slot %d completed twice", q, i);
  if (sl->op == kOpRead) {
    if (memcmp(sl->buf, sl->check, sl->len))
      fail("QP %d: READ of %u bytes returned other bytes than the WRITE before it put there", q,
           sl->len);
    s->atomic_busy = 0;
  } else if (sl->op == kOpAtomic) {
    uint64_t old;
    memcpy(&old, sl->buf, 8);
    if (old != s->fetched)
      fail("QP %d: FETCH_AND_ADD returned %" PRIu64 ", the counter should hold %" PRIu64, q, old,
           s->fetched);
    s->fetched += sl->add;
    s->added += sl->add;
    s->atomic_busy = 0;
  }
  sl->busy = 0;
  --s->outstanding;
}

static int poll_once(void) {
  struct ibv_wc wc[32];
  int n = ibv_poll_cq(g.cq, 32, wc);
  if (n < 0) fail("ibv_poll_cq: %d", n);
  const time_t now = time(NULL);
  for (int i = 0; i < n; ++i) {
    if (wc[i].status != IBV_WC_SUCCESS)
      fail("work request 0x%" PRIx64 " on QP 0x%x completed with %s", wc[i].wr_id, wc[i].qp_num,
           ibv_wc_status_str(wc[i].status));
    if (wc[i].opcode & IBV_WC_RECV)
      on_recv(&wc[i]);
    else
      on_send(&wc[i]);
    if (wc[i].qp_num != g.ud->qp_num && wc[i].wr_id < UINT64_MAX - 1)
      g.qps[wc[i].wr_id >> 32].last_completion = now;
  }
  for (int q = 0; q < g.nqps; ++q)
    if (g.qps[q].outstanding && now - g.qps[q].last_completion > kStallSeconds)
      fail("QP %d stalled: %d WRs outstanding and no completion for %d s", q, g.qps[q].outstanding,
           kStallSeconds);
  return n;
}

static void setup(const char* device) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), device)) g.ctx = ibv_open_device(list[i]);
  if (!g.ctx) fail("cannot open %s", device);
  ibv_free_device_list(list);
  struct ibv_port_attr pa;
  if (ibv_query_port(g.ctx, 1, &pa)) fail("ibv_query_port");
  g.me.lid = pa.lid;
  g.pd = ibv_alloc_pd(g.ctx);
  g.cq = ibv_create_cq(g.ctx, g.nqps * (kWindow * 2 + kRecvDepth) + 2 * kUdRecvs, NULL, NULL, 0);
  g.mem_len = g.nqps * per_qp() + (kUdRecvs + 1) * ud_buf_bytes();
  g.mem = calloc(1, g.mem_len);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
  if (!g.pd || !g.cq || !g.mem || !(g.mr = ibv_reg_mr(g.pd, g.mem, g.mem_len, access)))
    fail("PD, CQ or MR: %s", strerror(errno));
  for (int q = 0; q < g.nqps; ++q) {
    struct qp_state* s = &g.qps[q];
    struct ibv_qp_init_attr ia = {.send_cq = g.cq,
                                  .recv_cq = g.cq,
                                  .cap = {.max_send_wr = 2 * kWindow,
                                          .max_recv_wr = kRecvDepth,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RC};
    if (!(s->qp = ibv_create_qp(g.pd, &ia))) fail("ibv_create_qp: %s", strerror(errno));
    uint8_t* base = g.mem + q * per_qp();
    for (int i = 0; i < kWindow; ++i) {
      s->slots[i].buf = base + i * slot_bytes();
      s->slots[i].check = s->slots[i].buf + slot_bytes() / 2;
    }
    s->recv_bufs = base + kWindow * slot_bytes();
    g.me.qp[q] = (struct remote_qp){s->qp->qp_num, (uintptr_t)area_of(q), (uintptr_t)counter_of(q),
                                    g.mr->rkey};
  }
  struct ibv_qp_init_attr ua = {
      .send_cq = g.cq,
      .recv_cq = g.cq,
      .cap = {.max_send_wr = 2, .max_recv_wr = kUdRecvs, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_UD};
  if (!(g.ud = ibv_create_qp(g.pd, &ua))) fail("UD QP: %s", strerror(errno));
  g.me.ud_qpn = g.ud->qp_num;
  g.ud_bufs = g.mem + g.nqps * per_qp();
}

static void connect_all(void) {
  for (int q = 0; q < g.nqps; ++q) {
    int err = connect_rc_qp(g.qps[q].qp, g.peer.qp[q].qpn, g.peer.lid, IBV_MTU_1024, 14, 7,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (err) fail("connecting QP %d: %s", q, strerror(err));
    for (int k = 0; k < kRecvDepth; ++k)
      post_recv(g.qps[q].qp, g.qps[q].recv_bufs + (size_t)k * recv_bytes(), (uint32_t)recv_bytes(),
                (uint64_t)q << 32 | (uint64_t)k);
    g.qps[q].last_completion = time(NULL);
  }
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = kQkey};
  if (ibv_modify_qp(g.ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    fail("UD to INIT");
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(g.ud, &a, IBV_QP_STATE)) fail("UD to RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(g.ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) fail("UD to RTS");
  for (int k = 0; k < kUdRecvs; ++k)
    post_recv(g.ud, g.ud_bufs + k * ud_buf_bytes(), (uint32_t)ud_buf_bytes(), (uint64_t)k);
  struct ibv_ah_attr ah = {.dlid = g.peer.lid, .port_num = 1};
  if (!(g.ah = ibv_create_ah(g.pd, &ah))) fail("ibv_create_ah: %s", strerror(errno));
}

/* The TCP exchange of rc_common.c, but completions keep being polled while
 * the peer's answer is awaited: receives are reposted only from here, and a
 * peer still draining would otherwise wait on RNR NAKs for ever. */
static void talk(int fd, const void* out, void* in, size_t n) {
  if (write(fd, out, n) != (ssize_t)n) fail("TCP write: %s", strerror(errno));
  size_t got = 0;
  while (got < n) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 1) > 0) {
      ssize_t r = read(fd, (char*)in + got, n - got);
      if (r <= 0) fail("the other side went away");
      got += (size_t)r;
    }
    if (g.cq) poll_once();
  }
}

/* Final accounts, exchanged once traffic stopped. */
struct totals {
  uint64_t sent[kMaxQps];
  uint64_t added[kMaxQps];
};

int main(int argc, char** argv) {
  const char* device = NULL;
  int port = 0, seconds = 10, opt;
  g.nqps = 4;
  g.seed = (unsigned)getpid();
  while ((opt = getopt(argc, argv, "d:p:q:t:r:")) != -1) {
    switch (opt) {
      case 'd':
        device = optarg;
        break;
      case 'p':
        port = atoi(optarg);
        break;
      case 'q':
        g.nqps = atoi(optarg);
        break;
      case 't':
        seconds = atoi(optarg);
        break;
      case 'r':
        g.seed = (unsigned)strtoul(optarg, NULL, 0);
        break;
      default:
        return 2;
    }
  }
  if (!device || !port || g.nqps < 1 || g.nqps > kMaxQps) {
    fprintf(stderr,
            "usage: soak_worker -d DEVICE -p TCP_PORT [-q 1..%d] [-t SECONDS] [-r SEED] [SERVER]\n",
            kMaxQps);
    return 2;
  }
  setup(device);
  const int fd = tcp_connect(optind < argc ? argv[optind] : NULL, port);
  if (fd < 0) fail("no TCP connection to the other side");
  talk(fd, &g.me, &g.peer, sizeof(g.me));
  connect_all();
  char sync = 0;
  talk(fd, &sync, &sync, 1); /* both sides are ready to receive */

  const time_t start = time(NULL), end = start + seconds;
  while (time(NULL) < end) {
    for (int q = 0; q < g.nqps; ++q) post_rc(q);
    poll_once();
  }
  /* Drain: every WR must complete. */
  for (;;) {
    int busy = g.ud_busy;
    for (int q = 0; q < g.nqps; ++q) busy += g.qps[q].outstanding;
    if (!busy) break;
    poll_once();
  }
  struct totals mine, theirs;
  memset(&mine, 0, sizeof(mine));
  for (int q = 0; q < g.nqps; ++q) {
    mine.sent[q] = g.qps[q].next_seq;
    mine.added[q] = g.qps[q].added;
  }
  talk(fd, &mine, &theirs, sizeof(mine));
  /* Their SENDs all completed, so they all arrived; the receive completions
   * may still be on the way. */
  const time_t deadline = time(NULL) + kStallSeconds;
  for (int q = 0; q < g.nqps; ++q) {
    while (g.qps[q].expect_seq < theirs.sent[q]) {
      if (time(NULL) > deadline)
        fail("QP %d: %" PRIu64 " SENDs completed at the sender, %" PRIu64 " arrived", q,
             theirs.sent[q], g.qps[q].expect_seq);
      poll_once();
    }
    if (g.qps[q].expect_seq != theirs.sent[q]) fail("QP %d: more SENDs arrived than were sent", q);
    if (*counter_of(q) != theirs.added[q])
      fail("QP %d: the counter holds %" PRIu64 ", the peer added %" PRIu64, q, *counter_of(q),
           theirs.added[q]);
  }
  talk(fd, &sync, &sync, 1); /* neither side leaves while the other still checks */
  const double secs = (double)(time(NULL) - start);
  uint64_t ops = 0; /* RC work requests */
  for (int i = kOpSend; i <= kOpAtomic; ++i) ops += g.counts[i];
  printf("{\"device\": \"%s\", \"qps\": %d, \"seconds\": %.0f, \"ops\": %" PRIu64
         ", \"sends\": %" PRIu64 ", \"writes\": %" PRIu64 ", \"reads\": %" PRIu64
         ", \"atomics\": %" PRIu64 ", \"datagrams_sent\": %" PRIu64
         ", \"datagrams_received\": %" PRIu64 ", \"bytes\": %" PRIu64 "}\n",
         device, g.nqps, secs, ops, g.counts[kOpSend], g.counts[kOpWrite], g.counts[kOpRead],
         g.counts[kOpAtomic], g.counts[kOpUd], g.ud_received, g.bytes);
  for (int q = 0; q < g.nqps; ++q) ibv_destroy_qp(g.qps[q].qp);
  ibv_destroy_qp(g.ud);
  ibv_destroy_ah(g.ah);
  ibv_dereg_mr(g.mr);
  ibv_destroy_cq(g.cq);
  ibv_dealloc_pd(g.pd);
  ibv_close_device(g.ctx);
  close(fd);
  return 0;
}
