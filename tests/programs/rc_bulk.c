/*
 * rc_bulk: moves MiB of data between an RC QP on ibemu0 and one on ibemu1
 * (one process, the two HCAs' links in between) by RDMA WRITE and by SEND,
 * in 1 MiB work requests with a window outstanding, and checks that every
 * byte arrived and every work request completed exactly once with success.
 * Made for lossy links (ibemu fault): prints
 *   write N MiB ok
 *   send N MiB ok
 * and exits 0, or says what went wrong and exits 1.
 *
 * With -w it prints "qpn A B" (the QP numbers on ibemu0 and ibemu1) once
 * connected and waits for a line on stdin before it starts.
 *
 *   rc_bulk [-m MiB] [-t timeout] [-w]
 */
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_common.h"

#define CHUNK (1u << 20)
#define ROUND_CHUNKS 32 /* a round moves 32 MiB, then checks it */
#define WINDOW 8

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* buf;
  uint16_t lid;
};

static void die(const char* what) {
  fprintf(stderr, "rc_bulk: %s\n", what);
  exit(1);
}

static struct ibv_context* open_device(const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) return ibv_open_device(list[i]);
  die("no such device");
  return NULL;
}

static void make_side(struct side* s, const char* dev) {
  s->ctx = open_device(dev);
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 2 * WINDOW + ROUND_CHUNKS, NULL, NULL, 0);
  s->buf = malloc((size_t)ROUND_CHUNKS * CHUNK);
  if (!s->pd || !s->cq || !s->buf) die("resources");
  s->mr = ibv_reg_mr(s->pd, s->buf, (size_t)ROUND_CHUNKS * CHUNK,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  struct ibv_qp_init_attr init = {.send_cq = s->cq,
                                  .recv_cq = s->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = WINDOW,
                                          .max_recv_wr = ROUND_CHUNKS,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1}};
  s->qp = ibv_create_qp(s->pd, &init);
  struct ibv_port_attr pa;
  if (!s->mr || !s->qp || ibv_query_port(s->ctx, 1, &pa)) die("QP");
  s->lid = pa.lid;
}

/* The byte at `offset` of the whole transfer: every MiB differs. */
static void fill(uint8_t* p, uint64_t offset, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = (offset + i) * 0x9e3779b97f4a7c15ull;
    memcpy(p + i, &v, 8);
  }
}

/* Waits for one completion on s; its wr_id must not have completed before. */
static void complete_one(struct side* s, uint8_t* done, enum ibv_wc_opcode op) {
  struct ibv_wc wc;
  while (ibv_poll_cq(s->cq, 1, &wc) == 0) {
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "rc_bulk: %s for wr %llu\n", ibv_wc_status_str(wc.status),
            (unsigned long long)wc.wr_id);
    exit(1);
  }
  if (wc.opcode != op || wc.wr_id >= ROUND_CHUNKS || done[wc.wr_id]++) die("a WR completed twice");
}

static void post(struct side* s, enum ibv_wr_opcode op, uint32_t chunk, uint64_t raddr,
                 uint32_t rkey) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + (size_t)chunk * CHUNK), CHUNK, s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = chunk,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(s->qp, &wr, &bad)) die("ibv_post_send");
}

static void post_recv(struct side* s, uint32_t chunk) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + (size_t)chunk * CHUNK), CHUNK, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = chunk, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s->qp, &wr, &bad)) die("ibv_post_recv");
}

/* One round: ROUND_CHUNKS MiB from a to b, then b's buffer checked. */
static void round_trip(struct side* a, struct side* b, int use_send, uint64_t base) {
  uint8_t sent[ROUND_CHUNKS] = {0}, received[ROUND_CHUNKS] = {0};
  fill(a->buf, base, (size_t)ROUND_CHUNKS * CHUNK);
  memset(b->buf, 0, (size_t)ROUND_CHUNKS * CHUNK);
  if (use_send)
    for (uint32_t c = 0; c < ROUND_CHUNKS; ++c) post_recv(b, c);
  uint32_t posted = 0, completed = 0;
  while (completed < ROUND_CHUNKS) {
    while (posted < ROUND_CHUNKS && posted - completed < WINDOW) {
      post(a, use_send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, posted,
           (uintptr_t)(b->buf + (size_t)posted * CHUNK), b->mr->rkey);
      ++posted;
    }
    complete_one(a, sent, use_send ? IBV_WC_SEND : IBV_WC_RDMA_WRITE);
    ++completed;
  }
  if (use_send)
    for (uint32_t c = 0; c < ROUND_CHUNKS; ++c) complete_one(b, received, IBV_WC_RECV);
  uint8_t* expect = malloc(CHUNK);
  for (uint32_t c = 0; c < ROUND_CHUNKS; ++c) {
    fill(expect, base + (uint64_t)c * CHUNK, CHUNK);
    if (memcmp(expect, b->buf + (size_t)c * CHUNK, CHUNK)) die("data differ");
  }
  free(expect);
}

int main(int argc, char** argv) {
  int mib = 1024, timeout = 14, wait_for_go = 0, c;
  while ((c = getopt(argc, argv, "m:t:w")) != -1) {
    if (c == 'm')
      mib = atoi(optarg);
    else if (c == 't')
      timeout = atoi(optarg);
    else if (c == 'w')
      wait_for_go = 1;
    else
      return 2;
  }
  if (mib < ROUND_CHUNKS || mib % ROUND_CHUNKS) die("-m must be a multiple of 32");
  struct side a, b;
  make_side(&a, "ibemu0");
  make_side(&b, "ibemu1");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (connect_rc_qp(a.qp, b.qp->qp_num, b.lid, IBV_MTU_4096, timeout, 7, access) ||
      connect_rc_qp(b.qp, a.qp->qp_num, a.lid, IBV_MTU_4096, timeout, 7, access))
    die("connect");
  if (wait_for_go) {
    printf("qpn %#x %#x\n", a.qp->qp_num, b.qp->qp_num);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) die("stdin closed");
  }
  for (int use_send = 0; use_send < 2; ++use_send) {
    for (int r = 0; r < mib / ROUND_CHUNKS; ++r)
      round_trip(&a, &b, use_send, (uint64_t)r * ROUND_CHUNKS * CHUNK);
    printf("%s %d MiB ok\n", use_send ? "send" : "write", mib);
    fflush(stdout);
  }
  return 0;
}
