/*
 * One side of a soak pair (tests/soak/README.md): QPS RC QPs, one UD QP and
 * one DC initiator (DCI) and target (DCT) toward the same process on the
 * other side, random SEND, RDMA WRITE, RDMA READ and atomic traffic of
 * random sizes for SECONDS, every byte checked.
 *
 *   soak_worker -d DEVICE -p TCP_PORT [-q QPS] [-t SECONDS] [-r SEED] [-o] [SERVER]
 *
 * DC needs mlx5 direct verbs on the device (ibemu's libmlx5, which `ibemu
 * run` puts first). Without them the worker fails, unless -o (DC optional)
 * is given: then it says so on stderr and runs without DC traffic.
 *
 * What it checks, and says on stderr before exiting 1 when it fails:
 *   - every posted work request completes exactly once, successfully, as
 *     the operation it was (RC and DC recover from the link's faults; a
 *     flush or retry error is a failure);
 *   - SENDs arrive in order, once each, with the bytes sent (a checksummed
 *     header carries the QP, sequence number and length), on each RC QP and
 *     from the partner's DCI on this side's DCT;
 *   - an RDMA READ of what an RDMA WRITE just put in the peer's memory returns
 *     exactly those bytes (over RC and over DC);
 *   - FETCH_AND_ADD returns the running sum of this QP's adds, and the peer's
 *     counter ends equal to the sum (compared over TCP at the end);
 *   - datagrams that arrive (UD may lose some under faults) are intact;
 *   - no QP goes STALL_SECONDS without a completion while it has work.
 * On success it prints one JSON line with what it did.
 */
#include <errno.h>
#include <infiniband/mlx5dv.h>
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

#include "dc_common.h"
#include "rc_common.h"

enum {
  kMaxQps = 64,
  kMaxLanes = kMaxQps + 1, /* the RC QPs, then the DCI */
  kWindow = 8,             /* WRs outstanding per lane */
  kMaxMsg = 32768,         /* largest SEND / WRITE */
  kRecvDepth = 2 * kWindow,
  kUdMsg = 1024, /* UD payload (path MTU 2048 fits it) */
  kUdRecvs = 64,
  kStallSeconds = 30, /* longer than the provider's stall tolerance */
  kQkey = 0x11111111,
  kWritePart = 1 << 16, /* in a DC wr_id: the WRITE before a READ */
};

enum op { kOpSend, kOpWrite, kOpRead, kOpAtomic, kOpUd };

/* The wr_id of the UD SEND; RC and DC wr_ids are (lane << 32 | slot). */
#define kUdWrId (UINT64_MAX - 1)

/* The header that starts every SEND and datagram. */
struct msg_header {
  uint32_t magic;
  uint32_t qp; /* the lane */
  uint64_t seq;
  uint32_t len; /* payload bytes after the header */
  uint32_t crc; /* of the payload */
};
#define kMagic 0x534f414bu /* "SOAK" */

/* One outstanding work request: its own buffers, so nothing is reused early. */
struct slot {
  int busy;
  int parts; /* completions still due: 2 for a DC WRITE-then-READ */
  enum op op;
  uint32_t len;
  uint64_t remote_off; /* WRITE/READ: where in the peer's area */
  uint64_t add;        /* atomic: what was added */
  uint8_t* buf;        /* kMaxMsg + header */
  uint8_t* check;      /* READ lands here; compared with buf */
};

struct remote_qp {
  uint32_t qpn;  /* for the DC lane, the DCT's number */
  uint64_t area; /* the peer's window for this lane's WRITEs and READs */
  uint64_t counter;
  uint32_t rkey;
};

struct side_info { /* what is exchanged over TCP */
  uint16_t lid;
  uint32_t ud_qpn;
  uint32_t dci_qpn; /* 0: this side runs no DC */
  uint64_t dc_key;  /* what its DCT wants in every request */
  struct remote_qp qp[kMaxLanes];
};

/* A lane is one send queue's traffic to the peer: RC QP q is lane q, the
 * DCI (to the partner's DCT) lane QPS. Each has its slots, its SEND
 * sequence, its receive buffers and its window of the peer's memory. */
struct qp_state {
  struct ibv_qp* qp; /* the RC QP, or the DCI */
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
  int nlanes; /* nqps, and the DC lane when both sides run DC */
  struct qp_state qps[kMaxLanes];
  struct ibv_qp* ud;
  struct ibv_ah* ah; /* toward the peer's LID: for the UD QP and the DCI */
  uint8_t* ud_bufs;  /* kUdRecvs receive buffers, then one send buffer */
  int ud_busy;
  int dc_optional;
  struct ibv_qp* dct;  /* NULL while this side has no DC */
  struct ibv_srq* srq; /* the DCT's receives */
  struct ibv_qp_ex* dcx;
  struct mlx5dv_qp_ex* dcmx;
  struct side_info me, peer;
  uint64_t counts[5], dc_counts[5], ud_received, bytes, dc_bytes;
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

static int is_dc(int q) { return q == g.nqps; }
static int dc_running(void) { return g.nlanes > g.nqps; }

/* How failure messages name lane q. */
static const char* lane_name(int q) {
  static char name[16];
  if (is_dc(q)) return "the DCI";
  snprintf(name, sizeof(name), "QP %d", q);
  return name;
}

static uint64_t wr_id(int q, int i) { return (uint64_t)q << 32 | (uint64_t)i; }

/* Memory layout: per lane, kWindow slots of (header + kMaxMsg) * 2 (data
 * and check), kRecvDepth receive buffers, an area the peer WRITEs and READs
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

/* A receive buffer to qp's receive queue, or to srq when it is set. */
static void post_recv(struct ibv_qp* qp, struct ibv_srq* srq, uint8_t* buf, uint32_t len,
                      uint64_t id) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = g.mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad))
    fail("posting a receive: %s", strerror(errno));
}

/* Receive buffer k of lane q (back) to where the peer's SENDs land: the RC
 * QP's receive queue, or the DCT's SRQ. */
static void post_lane_recv(int q, int k) {
  struct qp_state* s = &g.qps[q];
  post_recv(is_dc(q) ? NULL : s->qp, is_dc(q) ? g.srq : NULL,
            s->recv_bufs + (size_t)k * recv_bytes(), (uint32_t)recv_bytes(), wr_id(q, k));
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

/* A free slot of lane q, or -1 while its window is full. */
static int free_slot(int q) {
  for (int i = 0; i < kWindow; ++i)
    if (!g.qps[q].slots[i].busy) return i;
  return -1;
}

/* op, unless it is a READ or atomic and one is outstanding on the lane
 * already (max_rd_atomic 1): then a SEND. */
static enum op pick_op(int q, enum op op) {
  return (op == kOpRead || op == kOpAtomic) && g.qps[q].atomic_busy ? kOpSend : op;
}

/* Fills slot i of lane q for op: a SEND's message with the lane's next
 * sequence number; random bytes for a WRITE, and for a READ the same bytes
 * (written first) and a cleared buffer for what comes back; an atomic's
 * addend. Each slot has its own window of the peer's area, so nothing else
 * writes there while this WR is outstanding. */
static void prepare(int q, int i, enum op op) {
  struct qp_state* s = &g.qps[q];
  struct slot* sl = &s->slots[i];
  sl->op = op;
  sl->parts = 1;
  switch (op) {
    case kOpSend:
      sl->len = rnd() % kMaxMsg;
      fill_message(sl->buf, (uint32_t)q, s->next_seq++, sl->len);
      break;
    case kOpWrite:
    case kOpRead:
      sl->len = 1 + rnd() % kMaxMsg;
      sl->remote_off = (uint64_t)i * kMaxMsg;
      for (uint32_t k = 0; k < sl->len; ++k) sl->buf[k] = (uint8_t)rnd();
      if (op == kOpRead) memset(sl->check, 0, sl->len);
      break;
    case kOpAtomic:
      sl->len = 8;
      sl->add = 1 + rnd() % 1000;
      break;
    default:
      break;
  }
}

/* What the WR's local SGE covers: a SEND carries its header too. */
static uint32_t sge_bytes(const struct slot* sl) {
  return sl->op == kOpSend ? (uint32_t)sizeof(struct msg_header) + sl->len : sl->len;
}

/* Slot i of lane q is on the wire: count it. */
static void mark_posted(int q, int i) {
  struct qp_state* s = &g.qps[q];
  struct slot* sl = &s->slots[i];
  sl->busy = 1;
  ++s->outstanding;
  if (sl->op == kOpRead || sl->op == kOpAtomic) s->atomic_busy = 1;
  (is_dc(q) ? g.dc_counts : g.counts)[sl->op]++;
  *(is_dc(q) ? &g.dc_bytes : &g.bytes) += sl->len;
}

static void post_rc(int q) {
  const int i = free_slot(q);
  if (i < 0) return;
  struct qp_state* s = &g.qps[q];
  struct slot* sl = &s->slots[i];
  prepare(q, i, pick_op(q, (enum op)(rnd() % 4)));
  const struct remote_qp* r = &g.peer.qp[q];
  struct ibv_sge sge = {.addr = (uintptr_t)sl->buf, .length = sge_bytes(sl), .lkey = g.mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id(q, i),
                           .sg_list = &sge,
                           .num_sge = 1,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  /* A READ's bytes are put there first by an unsignaled WRITE, which
   * completes with the READ. */
  struct ibv_sge wsge = sge;
  struct ibv_send_wr w = {.wr_id = UINT64_MAX,
                          .next = &wr,
                          .sg_list = &wsge,
                          .num_sge = 1,
                          .opcode = IBV_WR_RDMA_WRITE};
  w.wr.rdma.remote_addr = r->area + sl->remote_off;
  w.wr.rdma.rkey = r->rkey;
  struct ibv_send_wr* first = &wr;
  switch (sl->op) {
    case kOpSend:
      wr.opcode = IBV_WR_SEND;
      break;
    case kOpWrite:
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma = w.wr.rdma;
      break;
    case kOpRead:
      sge.addr = (uintptr_t)sl->check;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.send_flags |= IBV_SEND_FENCE;
      wr.wr.rdma = w.wr.rdma;
      first = &w;
      break;
    case kOpAtomic:
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      wr.wr.atomic.remote_addr = r->counter;
      wr.wr.atomic.rkey = r->rkey;
      wr.wr.atomic.compare_add = sl->add;
      break;
    default:
      return;
  }
  if (ibv_post_send(s->qp, first, &bad)) fail("ibv_post_send on QP %d: %s", q, strerror(errno));
  mark_posted(q, i);
  if (rnd() % 8 == 0) post_ud(); /* datagrams in proportion to the RC traffic */
}

/* The rest of the DCI's current WR: its local buffer, and the partner's
 * DCT (number and key) at the partner's LID as its target. */
static void dc_finish_wr(const uint8_t* buf, uint32_t len) {
  ibv_wr_set_sge(g.dcx, g.mr->lkey, (uintptr_t)buf, len);
  mlx5dv_wr_set_dc_addr(g.dcmx, g.ah, g.peer.qp[g.nqps].qpn, g.peer.dc_key);
}

/* A SEND, or a WRITE then a READ of the same bytes, from the DCI to the
 * partner's DCT. Unlike RC's, the WRITE is signaled too: DC's completions
 * come in send-queue order, so each of its WRs is seen completing once. */
static void post_dc(void) {
  const int q = g.nqps, i = free_slot(q);
  if (i < 0) return;
  struct slot* sl = &g.qps[q].slots[i];
  prepare(q, i, pick_op(q, rnd() % 2 ? kOpRead : kOpSend));
  const struct remote_qp* r = &g.peer.qp[q];
  struct ibv_qp_ex* x = g.dcx;
  ibv_wr_start(x);
  if (sl->op == kOpRead) {
    x->wr_id = wr_id(q, i) | kWritePart;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(x, r->rkey, r->area + sl->remote_off);
    dc_finish_wr(sl->buf, sl->len);
    x->wr_id = wr_id(q, i);
    x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    ibv_wr_rdma_read(x, r->rkey, r->area + sl->remote_off);
    dc_finish_wr(sl->check, sl->len);
    sl->parts = 2;
  } else {
    x->wr_id = wr_id(q, i);
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    dc_finish_wr(sl->buf, sge_bytes(sl));
  }
  const int err = ibv_wr_complete(x);
  if (err) fail("posting on the DCI: %s", strerror(err));
  mark_posted(q, i);
}

static void post_ud(void) {
  if (g.ud_busy) return;
  uint8_t* buf = g.ud_bufs + kUdRecvs * ud_buf_bytes();
  const uint32_t len = rnd() % kUdMsg;
  fill_message(buf, UINT32_MAX, g.counts[kOpUd], len);
  struct ibv_sge sge = {.addr = (uintptr_t)buf,
                        .length = (uint32_t)sizeof(struct msg_header) + len,
                        .lkey = g.mr->lkey};
  struct ibv_send_wr wr = {.wr_id = kUdWrId,
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
    post_recv(g.ud, NULL, buf, (uint32_t)ud_buf_bytes(), id);
    return;
  }
  const int q = (int)(id >> 32), k = (int)(id & 0xffffffff);
  if (q >= g.nlanes || k >= kRecvDepth) fail("a receive completion for no buffer: 0x%" PRIx64, id);
  /* The SRQ is the DCT's alone, and only the partner's DCI sends to it. */
  if (is_dc(q) && (wc->qp_num != g.dct->qp_num || wc->src_qp != g.peer.dci_qpn))
    fail("a SEND on DCT 0x%x from QP 0x%x, not from the partner's DCI 0x%x", wc->qp_num, wc->src_qp,
         g.peer.dci_qpn);
  struct qp_state* s = &g.qps[q];
  const uint8_t* buf = s->recv_bufs + (size_t)k * recv_bytes();
  struct msg_header h;
  if (check_message(buf, wc->byte_len, &h) < 0)
    fail("%s: a SEND arrived corrupted (%u bytes)", lane_name(q), wc->byte_len);
  if (h.qp != (uint32_t)q) fail("%s: got lane %u's message", lane_name(q), h.qp);
  if (h.seq != s->expect_seq)
    fail("%s: SEND %" PRIu64 " arrived where %" PRIu64 " was due (lost or duplicated)",
         lane_name(q), h.seq, s->expect_seq);
  s->expect_seq++;
  post_lane_recv(q, k);
}

/* The completion opcode each operation must come back with. */
static enum ibv_wc_opcode wc_opcode(enum op op) {
  static const enum ibv_wc_opcode codes[] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
                                             IBV_WC_FETCH_ADD};
  return codes[op];
}

/* The DC WRITE before a READ: it must complete once, before the READ. */
static void on_write_part(int q, int i, struct slot* sl) {
  if (sl->op != kOpRead || sl->parts != 2)
    fail("%s: slot %d: a WRITE completed that was not outstanding", lane_name(q), i);
  sl->parts = 1;
}

/* What a READ or atomic brought back, checked against what it must be. */
static void check_result(int q, struct qp_state* s, const struct slot* sl) {
  if (sl->op == kOpRead) {
    if (memcmp(sl->buf, sl->check, sl->len))
      fail("%s: READ of %u bytes returned other bytes than the WRITE before it put there",
           lane_name(q), sl->len);
    s->atomic_busy = 0;
  } else if (sl->op == kOpAtomic) {
    uint64_t old;
    memcpy(&old, sl->buf, 8);
    if (old != s->fetched)
      fail("%s: FETCH_AND_ADD returned %" PRIu64 ", the counter should hold %" PRIu64, lane_name(q),
           old, s->fetched);
    s->fetched += sl->add;
    s->added += sl->add;
    s->atomic_busy = 0;
  }
}

static void on_send(struct ibv_wc* wc) {
  if (wc->wr_id == kUdWrId) {
    g.ud_busy = 0;
    return;
  }
  const uint32_t low = (uint32_t)wc->wr_id;
  const int q = (int)(wc->wr_id >> 32), i = (int)(low & ~(uint32_t)kWritePart);
  const int write_part = (low & kWritePart) != 0;
  if (q >= g.nlanes || i >= kWindow || (write_part && !is_dc(q)))
    fail("a completion for a WR never posted: 0x%" PRIx64, wc->wr_id);
  struct qp_state* s = &g.qps[q];
  struct slot* sl = &s->slots[i];
  if (!sl->busy) fail("%s: slot %d completed twice", lane_name(q), i);
  if (wc->opcode != wc_opcode(write_part ? kOpWrite : sl->op))
    fail("%s: slot %d completed as opcode %d, not as what was posted", lane_name(q), i, wc->opcode);
  if (write_part) {
    on_write_part(q, i, sl);
    return;
  }
  if (sl->parts != 1) fail("%s: slot %d: a READ completed before its WRITE", lane_name(q), i);
  check_result(q, s, sl);
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
    if (wc[i].qp_num != g.ud->qp_num && wc[i].wr_id < kUdWrId)
      g.qps[wc[i].wr_id >> 32].last_completion = now;
  }
  for (int q = 0; q < g.nlanes; ++q)
    if (g.qps[q].outstanding && now - g.qps[q].last_completion > kStallSeconds)
      fail("%s stalled: %d WRs outstanding and no completion for %d s", lane_name(q),
           g.qps[q].outstanding, kStallSeconds);
  return n;
}

/* Opens `name`; *dv says whether mlx5 direct verbs (DC) work on it. */
static void open_device(const char* name, int* dv) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i]; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), name)) continue;
    g.ctx = ibv_open_device(list[i]);
    *dv = mlx5dv_is_supported(list[i]);
  }
  if (!g.ctx) fail("cannot open %s", name);
  ibv_free_device_list(list);
}

/* Lane q's slots and receive buffers in its part of the memory, and what
 * the peer needs to reach it: qpn (the DCT's for the DC lane), its window
 * and counter. */
static void init_lane(int q, struct ibv_qp* qp, uint32_t qpn) {
  struct qp_state* s = &g.qps[q];
  s->qp = qp;
  uint8_t* base = g.mem + q * per_qp();
  for (int i = 0; i < kWindow; ++i) {
    s->slots[i].buf = base + i * slot_bytes();
    s->slots[i].check = s->slots[i].buf + slot_bytes() / 2;
  }
  s->recv_bufs = base + kWindow * slot_bytes();
  g.me.qp[q] = (struct remote_qp){qpn, (uintptr_t)area_of(q), (uintptr_t)counter_of(q), g.mr->rkey};
}

static void setup_rc(int q) {
  struct ibv_qp_init_attr ia = {.send_cq = g.cq,
                                .recv_cq = g.cq,
                                .cap = {.max_send_wr = 2 * kWindow,
                                        .max_recv_wr = kRecvDepth,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  struct ibv_qp* qp = ibv_create_qp(g.pd, &ia);
  if (!qp) fail("ibv_create_qp: %s", strerror(errno));
  init_lane(q, qp, qp->qp_num);
}

/* The DC lane: a DCI, ready to send to whatever DCT a WR names, and a DCT
 * with a key of its own that receives through its own SRQ. 0, or
 * EOPNOTSUPP when the device has no DC; any other failure ends the run. */
static int setup_dc(int dv) {
  if (!dv) return EOPNOTSUPP;
  struct dc_port port = {.ctx = g.ctx, .port = 1};
  int err = dc_query_port(&port);
  if (err) fail("port 1: %s", strerror(err));
  struct ibv_qp* dci =
      dc_create_dci(g.ctx, g.pd, g.cq, 2 * kWindow, 1,
                    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ);
  if (!dci && errno == EOPNOTSUPP) return EOPNOTSUPP;
  if (!dci) fail("mlx5dv_create_qp (DCI): %s", strerror(errno));
  if ((err = dc_dci_ready(dci, &port, &dc_dci_defaults)))
    fail("DCI RESET->INIT->RTR->RTS: %s", strerror(err));
  g.dcx = ibv_qp_to_qp_ex(dci);
  if (!g.dcx || !(g.dcmx = mlx5dv_qp_ex_from_ibv_qp_ex(g.dcx)))
    fail("the DCI has no ibv_wr_* API (mlx5dv_qp_ex)");
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = kRecvDepth, .max_sge = 1}};
  if (!(g.srq = ibv_create_srq(g.pd, &sa))) fail("ibv_create_srq: %s", strerror(errno));
  /* A key of this process's own: a request with a stale or foreign key
   * would fail with a remote access error. */
  g.me.dc_key = (uint64_t)rnd() << 32 | rnd();
  if (!(g.dct = dc_create_dct(g.ctx, g.pd, g.cq, g.srq, g.me.dc_key)))
    fail("mlx5dv_create_qp (DCT): %s", strerror(errno));
  if ((err = dc_dct_ready(g.dct, &port, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)))
    fail("DCT RESET->INIT->RTR: %s", strerror(err));
  init_lane(g.nqps, dci, g.dct->qp_num); /* a DCT's number is valid from RTR on */
  g.me.dci_qpn = dci->qp_num;
  return 0;
}

static void setup(const char* device) {
  int dv = 0;
  open_device(device, &dv);
  struct ibv_port_attr pa;
  if (ibv_query_port(g.ctx, 1, &pa)) fail("ibv_query_port");
  g.me.lid = pa.lid;
  g.pd = ibv_alloc_pd(g.ctx);
  /* Every lane (the DC lane's slots and buffers are there even without DC)
   * sends up to 2 WRs per slot and has kRecvDepth receives. */
  const int lanes = g.nqps + 1;
  g.cq = ibv_create_cq(g.ctx, lanes * (kWindow * 2 + kRecvDepth) + 2 * kUdRecvs, NULL, NULL, 0);
  g.mem_len = lanes * per_qp() + (kUdRecvs + 1) * ud_buf_bytes();
  g.mem = calloc(1, g.mem_len);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
  if (!g.pd || !g.cq || !g.mem || !(g.mr = ibv_reg_mr(g.pd, g.mem, g.mem_len, access)))
    fail("PD, CQ or MR: %s", strerror(errno));
  for (int q = 0; q < g.nqps; ++q) setup_rc(q);
  struct ibv_qp_init_attr ua = {
      .send_cq = g.cq,
      .recv_cq = g.cq,
      .cap = {.max_send_wr = 2, .max_recv_wr = kUdRecvs, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_UD};
  if (!(g.ud = ibv_create_qp(g.pd, &ua))) fail("UD QP: %s", strerror(errno));
  g.me.ud_qpn = g.ud->qp_num;
  g.ud_bufs = g.mem + lanes * per_qp();
  if (setup_dc(dv) == 0) return;
  if (!g.dc_optional) fail("%s has no DC (mlx5 direct verbs); -o runs without DC traffic", device);
  fprintf(stderr, "soak_worker: %s has no DC (mlx5 direct verbs): no DC traffic\n", device);
}

/* DC traffic needs a DCI and a DCT on both sides. */
static void choose_lanes(void) {
  g.nlanes = g.nqps;
  if (g.me.dci_qpn && g.peer.dci_qpn) {
    g.nlanes = g.nqps + 1;
  } else if (g.me.dci_qpn) {
    if (!g.dc_optional) fail("the other side runs without DC");
    fprintf(stderr, "soak_worker: the other side has no DC: no DC traffic\n");
  }
}

static void connect_all(void) {
  for (int q = 0; q < g.nqps; ++q) {
    int err = connect_rc_qp(g.qps[q].qp, g.peer.qp[q].qpn, g.peer.lid, IBV_MTU_1024, 14, 7,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (err) fail("connecting QP %d: %s", q, strerror(err));
  }
  /* The DCI and DCT are ready since setup: DC needs no connecting. */
  for (int q = 0; q < g.nlanes; ++q) {
    for (int k = 0; k < kRecvDepth; ++k) post_lane_recv(q, k);
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
    post_recv(g.ud, NULL, g.ud_bufs + k * ud_buf_bytes(), (uint32_t)ud_buf_bytes(), (uint64_t)k);
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
  uint64_t sent[kMaxLanes];
  uint64_t added[kMaxLanes];
};

/* Every WR posted so far completes. */
static void drain(void) {
  for (;;) {
    int busy = g.ud_busy;
    for (int q = 0; q < g.nlanes; ++q) busy += g.qps[q].outstanding;
    if (!busy) return;
    poll_once();
  }
}

/* The peer's SENDs all completed, so they all arrived, once each (the
 * receive completions may still be on the way), and its adds are all in
 * the counters. */
static void check_totals(const struct totals* theirs) {
  const time_t deadline = time(NULL) + kStallSeconds;
  for (int q = 0; q < g.nlanes; ++q) {
    while (g.qps[q].expect_seq < theirs->sent[q]) {
      if (time(NULL) > deadline)
        fail("%s: %" PRIu64 " SENDs completed at the sender, %" PRIu64 " arrived", lane_name(q),
             theirs->sent[q], g.qps[q].expect_seq);
      poll_once();
    }
    if (g.qps[q].expect_seq != theirs->sent[q])
      fail("%s: more SENDs arrived than were sent", lane_name(q));
    if (*counter_of(q) != theirs->added[q])
      fail("%s: the counter holds %" PRIu64 ", the peer added %" PRIu64, lane_name(q),
           *counter_of(q), theirs->added[q]);
  }
}

static void report(const char* device, double secs) {
  uint64_t ops = 0; /* RC work requests */
  for (int i = kOpSend; i <= kOpAtomic; ++i) ops += g.counts[i];
  /* DC operations: SENDs, and WRITE-then-READ pairs (two WRs each). */
  const uint64_t dc_ops = g.dc_counts[kOpSend] + g.dc_counts[kOpRead];
  printf("{\"device\": \"%s\", \"qps\": %d, \"seconds\": %.0f, \"ops\": %" PRIu64
         ", \"sends\": %" PRIu64 ", \"writes\": %" PRIu64 ", \"reads\": %" PRIu64
         ", \"atomics\": %" PRIu64 ", \"datagrams_sent\": %" PRIu64
         ", \"datagrams_received\": %" PRIu64 ", \"bytes\": %" PRIu64
         ", \"dc\": %s"
         ", \"dc_ops\": %" PRIu64 ", \"dc_sends\": %" PRIu64 ", \"dc_reads\": %" PRIu64
         ", \"dc_bytes\": %" PRIu64 "}\n",
         device, g.nqps, secs, ops, g.counts[kOpSend], g.counts[kOpWrite], g.counts[kOpRead],
         g.counts[kOpAtomic], g.counts[kOpUd], g.ud_received, g.bytes,
         dc_running() ? "true" : "false", dc_ops, g.dc_counts[kOpSend], g.dc_counts[kOpRead],
         g.dc_bytes);
}

static void teardown(void) {
  for (int q = 0; q < g.nqps; ++q) ibv_destroy_qp(g.qps[q].qp);
  if (g.dct) {
    ibv_destroy_qp(g.qps[g.nqps].qp);
    ibv_destroy_qp(g.dct);
    ibv_destroy_srq(g.srq);
  }
  ibv_destroy_qp(g.ud);
  ibv_destroy_ah(g.ah);
  ibv_dereg_mr(g.mr);
  ibv_destroy_cq(g.cq);
  ibv_dealloc_pd(g.pd);
  ibv_close_device(g.ctx);
}

int main(int argc, char** argv) {
  const char* device = NULL;
  int port = 0, seconds = 10, opt;
  g.nqps = 4;
  g.seed = (unsigned)getpid();
  while ((opt = getopt(argc, argv, "d:p:q:t:r:o")) != -1) {
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
      case 'o':
        g.dc_optional = 1;
        break;
      default:
        return 2;
    }
  }
  if (!device || !port || g.nqps < 1 || g.nqps > kMaxQps) {
    fprintf(stderr,
            "usage: soak_worker -d DEVICE -p TCP_PORT [-q 1..%d] [-t SECONDS] [-r SEED] [-o] "
            "[SERVER]\n",
            kMaxQps);
    return 2;
  }
  g.nlanes = g.nqps; /* until both sides know whether they run DC */
  setup(device);
  const int fd = tcp_connect(optind < argc ? argv[optind] : NULL, port);
  if (fd < 0) fail("no TCP connection to the other side");
  talk(fd, &g.me, &g.peer, sizeof(g.me));
  choose_lanes();
  connect_all();
  char sync = 0;
  talk(fd, &sync, &sync, 1); /* both sides are ready to receive */

  const time_t start = time(NULL), end = start + seconds;
  while (time(NULL) < end) {
    for (int q = 0; q < g.nqps; ++q) post_rc(q);
    if (dc_running()) post_dc();
    poll_once();
  }
  drain();
  struct totals mine, theirs;
  memset(&mine, 0, sizeof(mine));
  for (int q = 0; q < g.nlanes; ++q) {
    mine.sent[q] = g.qps[q].next_seq;
    mine.added[q] = g.qps[q].added;
  }
  talk(fd, &mine, &theirs, sizeof(mine));
  check_totals(&theirs);
  talk(fd, &sync, &sync, 1); /* neither side leaves while the other still checks */
  report(device, (double)(time(NULL) - start));
  teardown();
  close(fd);
  return 0;
}
