/*
 * rc_crossfire: RC traffic in both directions at once, checked byte for
 * byte. One process opens ibemu0 and ibemu1 and connects -q pairs of RC QPs
 * between them at path MTU -M; every QP then moves -s bytes per iteration
 * to (WRITE, SEND) or from (READ) its peer, both ends at the same time, -n
 * iterations. After each iteration every destination buffer is compared
 * with what its source held. Prints
 *   crossfire OP q=Q mtu=M size=S iterations=N ok
 * and exits 0, or says what went wrong and exits 1 (2 for a bad command
 * line).
 *
 *   rc_crossfire [-o read|write|send] [-q qps] [-M 256..4096] [-s bytes] [-n iters]
 *
 * It is the traffic pattern of an MPI library's rendezvous in both
 * directions: each end's progress answers the other's requests while its own
 * wait for answers, so a link that drops or stalls when both inboxes fill
 * shows here as a retry error or a hang.
 */
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_common.h"

#define MAX_QPS 64
#define DEPTH 4 /* WRs a QP has posted at once: the message in a few pieces */
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct end {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp[MAX_QPS];
  struct ibv_mr* mr;
  uint8_t* src; /* per QP: `size` bytes this end sends or is read from */
  uint8_t* dst; /* per QP: `size` bytes the peer writes, sends or is read into */
  uint16_t lid;
};

static int qps = 4, iterations = 5;
static size_t size = 4u << 20;
static enum ibv_mtu mtu = IBV_MTU_1024;
static enum { OP_READ, OP_WRITE, OP_SEND } op = OP_READ;
static const char* op_names[] = {"read", "write", "send"};

static void die(const char* what) {
  fprintf(stderr, "rc_crossfire: %s\n", what);
  exit(1);
}

static void open_end(struct end* e, const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i] && !e->ctx; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) e->ctx = ibv_open_device(list[i]);
  if (!e->ctx) die("no such device");
  ibv_free_device_list(list);
  e->pd = ibv_alloc_pd(e->ctx);
  e->cq = ibv_create_cq(e->ctx, 4 * DEPTH * qps, NULL, NULL, 0);
  const size_t bytes = 2 * size * (size_t)qps;
  e->src = malloc(bytes);
  if (!e->pd || !e->cq || !e->src) die("resources");
  e->dst = e->src + size * (size_t)qps;
  e->mr = ibv_reg_mr(e->pd, e->src, bytes, ACCESS);
  struct ibv_port_attr pa;
  if (!e->mr || ibv_query_port(e->ctx, 1, &pa)) die("MR or port");
  e->lid = pa.lid;
  for (int i = 0; i < qps; ++i) {
    struct ibv_qp_init_attr init = {
        .send_cq = e->cq,
        .recv_cq = e->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = DEPTH, .max_recv_wr = DEPTH, .max_send_sge = 1, .max_recv_sge = 1}};
    if (!(e->qp[i] = ibv_create_qp(e->pd, &init))) die("ibv_create_qp");
  }
}

static void connect_qp(struct ibv_qp* qp, uint32_t remote_qpn, uint16_t remote_lid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = ACCESS};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = DEPTH;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote_lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = DEPTH;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

/* What end `side`'s QP `q` sends (or is read from) in iteration `it`. */
static void fill(uint8_t* p, int side, int q, int it) {
  uint64_t v = ((uint64_t)side << 56) ^ ((uint64_t)q << 40) ^ ((uint64_t)it << 24);
  for (size_t i = 0; i < size; i += 8, ++v) {
    const uint64_t x = v * 0x9e3779b97f4a7c15ull;
    memcpy(p + i, &x, size - i < 8 ? size - i : 8);
  }
}

/* A QP's message goes in pieces of this size, at most DEPTH of them. */
static size_t piece_size(void) { return (size + DEPTH - 1) / DEPTH; }
static int pieces(void) { return (int)((size + piece_size() - 1) / piece_size()); }

/* Posts one iteration's WRs on every QP of `e` toward `peer`. */
static void post_all(struct end* e, struct end* peer) {
  const size_t piece = piece_size();
  for (int q = 0; q < qps; ++q)
    for (int k = 0; k < pieces(); ++k) {
      const size_t off = (size_t)k * piece;
      const uint32_t n = (uint32_t)(size - off < piece ? size - off : piece);
      uint8_t* local = (op == OP_READ ? e->dst : e->src) + (size_t)q * size + off;
      struct ibv_sge sge = {(uintptr_t)local, n, e->mr->lkey};
      struct ibv_send_wr wr = {.wr_id = (uint64_t)q,
                               .sg_list = &sge,
                               .num_sge = 1,
                               .send_flags = IBV_SEND_SIGNALED},
                         *bad;
      wr.opcode = op == OP_READ    ? IBV_WR_RDMA_READ
                  : op == OP_WRITE ? IBV_WR_RDMA_WRITE
                                   : IBV_WR_SEND;
      /* READ fetches the peer's source; WRITE lands in the peer's destination. */
      uint8_t* remote = (op == OP_READ ? peer->src : peer->dst) + (size_t)q * size + off;
      wr.wr.rdma.remote_addr = (uintptr_t)remote;
      wr.wr.rdma.rkey = peer->mr->rkey;
      if (op == OP_SEND) {
        struct ibv_sge rsge = {(uintptr_t)(peer->dst + (size_t)q * size + off), n, peer->mr->lkey};
        struct ibv_recv_wr rwr = {.wr_id = (uint64_t)q, .sg_list = &rsge, .num_sge = 1}, *rbad;
        if (ibv_post_recv(peer->qp[q], &rwr, &rbad)) die("ibv_post_recv");
      }
      if (ibv_post_send(e->qp[q], &wr, &bad)) die("ibv_post_send");
    }
}

/* Waits for `n` successful completions on either end. */
static void complete(struct end* a, struct end* b, int n) {
  struct ibv_wc wc[16];
  while (n > 0) {
    for (int s = 0; s < 2; ++s) {
      const int got = ibv_poll_cq((s ? b : a)->cq, 16, wc);
      if (got < 0) die("ibv_poll_cq");
      for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) {
          fprintf(stderr, "rc_crossfire: %s on QP %d of %s\n", ibv_wc_status_str(wc[i].status),
                  (int)wc[i].wr_id, s ? "ibemu1" : "ibemu0");
          exit(1);
        }
      n -= got;
    }
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: rc_crossfire [-o read|write|send] [-q qps] [-M 256..4096] [-s bytes] "
          "[-n iterations]\n");
  exit(2);
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "o:q:M:s:n:")) != -1) {
    switch (c) {
      case 'o':
        op = !strcmp(optarg, "read") ? OP_READ : !strcmp(optarg, "write") ? OP_WRITE : OP_SEND;
        if (strcmp(optarg, op_names[op])) usage();
        break;
      case 'q':
        qps = atoi(optarg);
        if (qps < 1 || qps > MAX_QPS) usage();
        break;
      case 'M':
        if (!(mtu = mtu_from_bytes(atoi(optarg)))) usage();
        break;
      case 's':
        size = strtoull(optarg, NULL, 0);
        if (size < DEPTH) usage();
        break;
      case 'n':
        iterations = atoi(optarg);
        if (iterations < 1) usage();
        break;
      default:
        usage();
    }
  }
  struct end e[2] = {0};
  open_end(&e[0], "ibemu0");
  open_end(&e[1], "ibemu1");
  for (int q = 0; q < qps; ++q) {
    connect_qp(e[0].qp[q], e[1].qp[q]->qp_num, e[1].lid);
    connect_qp(e[1].qp[q], e[0].qp[q]->qp_num, e[0].lid);
  }
  uint8_t* expect = malloc(size);
  if (!expect) die("memory");
  const int per_end = qps * pieces();
  for (int it = 0; it < iterations; ++it) {
    for (int s = 0; s < 2; ++s) {
      memset(e[s].dst, 0, size * (size_t)qps);
      for (int q = 0; q < qps; ++q) fill(e[s].src + (size_t)q * size, s, q, it);
    }
    post_all(&e[0], &e[1]);
    post_all(&e[1], &e[0]);
    /* Each end's WRs complete, and with SEND the peer's receives too. */
    complete(&e[0], &e[1], (op == OP_SEND ? 4 : 2) * per_end);
    for (int s = 0; s < 2; ++s)
      for (int q = 0; q < qps; ++q) {
        fill(expect, 1 - s, q, it); /* the peer's source: what arrived here */
        if (memcmp(expect, e[s].dst + (size_t)q * size, size)) {
          fprintf(stderr, "rc_crossfire: data differ on QP %d of ibemu%d, iteration %d\n", q, s,
                  it);
          return 1;
        }
      }
  }
  printf("crossfire %s q=%d mtu=%d size=%zu iterations=%d ok\n", op_names[op], qps, 128 << mtu,
         size, iterations);
  return 0;
}
