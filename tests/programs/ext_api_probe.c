/*
 * ext_api_probe: what the extended verbs API promises that only C can check.
 *
 *  - ibv_query_device_ex through the provider op with the attr_size of an
 *    older verbs.h (less is written), of a newer one (the rest is zeroed) and
 *    of ibv_query_device; the extended fields are sane.
 *  - A CQ from ibv_create_cq_ex is a full CQ: cq_context and the completion
 *    channel are set (the channel is busy while the CQ lives), events arrive,
 *    and ibv_poll_cq works on it, also after start_poll/end_poll took some.
 *  - ibv_wr_* on one QP and ibv_post_send on its peer, in one process between
 *    two HCAs (default ibemu0 and ibemu1).
 *
 * Prints "ok" and exits 0, or says what went wrong and exits 1.
 *
 *   ext_api_probe [dev_a dev_b]
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define MSG 64

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct ibv_context* open_device(const char* name) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  CHECK(list);
  for (int i = 0; i < n; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  CHECK(ctx);
  return ctx;
}

/* ---- ibv_query_device_ex and attr_size ---- */

static int query_op(struct ibv_context* ctx, void* attr, size_t size) {
  struct verbs_context* vctx = verbs_get_ctx_op(ctx, query_device_ex);
  CHECK(vctx);
  return vctx->query_device_ex(ctx, NULL, attr, size);
}

static void probe_query_device(struct ibv_context* ctx) {
  struct ibv_device_attr_ex ex;
  struct ibv_device_attr classic;
  const size_t full = sizeof(struct ibv_device_attr_ex);
  const size_t older = offsetof(struct ibv_device_attr_ex, max_dm_size);
  uint8_t buf[sizeof(struct ibv_device_attr_ex) + 64];

  memset(&ex, 0xa5, sizeof(ex));
  CHECK(ibv_query_device_ex(ctx, NULL, &ex) == 0);
  CHECK(ibv_query_device(ctx, &classic) == 0);
  CHECK(!memcmp(&classic, &ex.orig_attr, sizeof(classic)));
  CHECK(ex.comp_mask == 0);
  CHECK(ex.completion_timestamp_mask == 0 && ex.hca_core_clock == 0);
  CHECK((uint32_t)ex.device_cap_flags_ex == (uint32_t)ex.orig_attr.device_cap_flags);
  CHECK(ex.phys_port_cnt_ex == ex.orig_attr.phys_port_cnt);
  CHECK(ex.odp_caps.general_caps == 0 && ex.max_dm_size == 0 && ex.tso_caps.max_tso == 0);

  /* An older program's struct ends earlier: nothing past it is written. */
  memset(buf, 0xa5, sizeof(buf));
  CHECK(query_op(ctx, buf, older) == 0);
  CHECK(!memcmp(buf, &ex, older));
  for (size_t i = older; i < sizeof(buf); ++i) CHECK(buf[i] == 0xa5);

  /* ibv_query_device's size: just orig_attr. */
  memset(buf, 0xa5, sizeof(buf));
  CHECK(query_op(ctx, buf, sizeof(ex.orig_attr)) == 0);
  CHECK(!memcmp(buf, &ex.orig_attr, sizeof(ex.orig_attr)));
  for (size_t i = sizeof(ex.orig_attr); i < sizeof(buf); ++i) CHECK(buf[i] == 0xa5);

  /* A newer program's struct is longer: what this provider does not know is 0. */
  memset(buf, 0xa5, sizeof(buf));
  CHECK(query_op(ctx, buf, sizeof(buf)) == 0);
  CHECK(!memcmp(buf, &ex, full));
  for (size_t i = full; i < sizeof(buf); ++i) CHECK(buf[i] == 0);

  CHECK(query_op(ctx, buf, sizeof(ex.orig_attr) - 1) == EINVAL);
  struct ibv_query_device_ex_input in = {.comp_mask = 1};
  CHECK(ibv_query_device_ex(ctx, &in, &ex) == EINVAL);
}

/* ---- a connected pair ---- */

struct side {
  struct ibv_context* ctx;
  struct ibv_comp_channel* ch;
  struct ibv_pd* pd;
  struct ibv_cq_ex* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t buf[8 * MSG];
  uint16_t lid;
};

/* Side a: a QP with the ibv_wr_* API and a CQ with a completion channel.
 * Side b: a classic QP and a single-threaded CQ without channel. */
static void setup(struct side* s, const char* dev, int is_a) {
  s->ctx = open_device(dev);
  if (is_a) {
    s->ch = ibv_create_comp_channel(s->ctx);
    CHECK(s->ch);
  }
  struct ibv_cq_init_attr_ex cq_attr = {
      .cqe = 16,
      .cq_context = s,
      .channel = s->ch,
      .wc_flags = IBV_WC_STANDARD_FLAGS,
  };
  if (!is_a) {
    cq_attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    cq_attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  }
  s->pd = ibv_alloc_pd(s->ctx);
  CHECK(s->pd);
  s->cq = ibv_create_cq_ex(s->ctx, &cq_attr);
  CHECK(s->cq);
  CHECK(s->cq->context == s->ctx && s->cq->channel == s->ch && s->cq->cq_context == s);
  s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
  CHECK(s->mr);
  struct ibv_qp_init_attr_ex qa = {
      .send_cq = ibv_cq_ex_to_cq(s->cq),
      .recv_cq = ibv_cq_ex_to_cq(s->cq),
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD,
      .pd = s->pd,
  };
  if (is_a) {
    qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  }
  s->qp = ibv_create_qp_ex(s->ctx, &qa);
  CHECK(s->qp);
  CHECK((ibv_qp_to_qp_ex(s->qp) != NULL) == !!is_a);
  struct ibv_port_attr pa;
  CHECK(ibv_query_port(s->ctx, 1, &pa) == 0);
  s->lid = pa.lid;
}

static void connect_qp(struct side* s, const struct side* peer) {
  struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  CHECK(!ibv_modify_qp(s->qp, &at,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_1024;
  at.dest_qp_num = peer->qp->qp_num;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 1;
  at.ah_attr.dlid = peer->lid;
  at.ah_attr.port_num = 1;
  CHECK(!ibv_modify_qp(s->qp, &at,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  memset(&at, 0, sizeof(at));
  at.qp_state = IBV_QPS_RTS;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  at.max_rd_atomic = 1;
  CHECK(!ibv_modify_qp(s->qp, &at,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

static uint8_t* slot(struct side* s, uint64_t id) { return s->buf + (id % 8) * MSG; }

static void post_recv(struct side* s, uint64_t id) {
  struct ibv_sge sge = {(uintptr_t)slot(s, id), MSG, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
  CHECK(!ibv_post_recv(s->qp, &wr, &bad));
}

/* Classic polling on an extended CQ, until n completions arrived. */
static void poll_classic(struct ibv_cq_ex* cq, int n, struct ibv_wc* wc) {
  int got = 0;
  double deadline = now() + 10;
  while (got < n) {
    int k = ibv_poll_cq(ibv_cq_ex_to_cq(cq), n - got, wc + got);
    CHECK(k >= 0);
    got += k;
    CHECK(now() < deadline);
  }
  for (int i = 0; i < n; ++i) CHECK(wc[i].status == IBV_WC_SUCCESS);
}

static void wait_ex(struct ibv_cq_ex* cq,
                    int (*step)(struct ibv_cq_ex*, struct ibv_poll_cq_attr*)) {
  struct ibv_poll_cq_attr pa = {0};
  double deadline = now() + 10;
  int rc;
  while ((rc = step(cq, &pa)) == ENOENT) CHECK(now() < deadline);
  CHECK(rc == 0);
  CHECK(cq->status == IBV_WC_SUCCESS);
}

static int start_step(struct ibv_cq_ex* cq, struct ibv_poll_cq_attr* pa) {
  return ibv_start_poll(cq, pa);
}

static int next_step(struct ibv_cq_ex* cq, struct ibv_poll_cq_attr* pa) {
  (void)pa;
  return ibv_next_poll(cq);
}

int main(int argc, char** argv) {
  static struct side a, b;
  struct ibv_wc wc[4];
  setup(&a, argc > 2 ? argv[1] : "ibemu0", 1);
  setup(&b, argc > 2 ? argv[2] : "ibemu1", 0);
  probe_query_device(a.ctx);
  /* The CQ holds its channel (verbs_init_cq counted it). */
  CHECK(ibv_destroy_comp_channel(a.ch) == EBUSY);
  connect_qp(&a, &b);
  connect_qp(&b, &a);

  /* b -> a with ibv_post_send; a's CQ signals its channel. */
  for (uint64_t i = 0; i < 3; ++i) post_recv(&a, i);
  CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(a.cq), 0) == 0);
  for (uint64_t i = 0; i < 3; ++i) {
    snprintf((char*)slot(&b, i), MSG, "classic %d", (int)i);
    struct ibv_sge sge = {(uintptr_t)slot(&b, i), 10, b.mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 50 + i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    CHECK(!ibv_post_send(b.qp, &wr, &bad));
  }
  struct pollfd pfd = {.fd = a.ch->fd, .events = POLLIN};
  CHECK(poll(&pfd, 1, 10000) == 1);
  struct ibv_cq* ev_cq;
  void* ev_ctx;
  CHECK(ibv_get_cq_event(a.ch, &ev_cq, &ev_ctx) == 0);
  CHECK(ev_cq == ibv_cq_ex_to_cq(a.cq) && ev_ctx == &a);
  ibv_ack_cq_events(ev_cq, 1);
  poll_classic(b.cq, 3, wc);
  for (int i = 0; i < 3; ++i) CHECK(wc[i].wr_id == 50u + i && wc[i].opcode == IBV_WC_SEND);

  /* One completion through start_poll/end_poll, the rest through ibv_poll_cq. */
  wait_ex(a.cq, start_step);
  CHECK(a.cq->wr_id == 0 && ibv_wc_read_opcode(a.cq) == IBV_WC_RECV);
  CHECK(ibv_wc_read_byte_len(a.cq) == 10 && ibv_wc_read_qp_num(a.cq) == a.qp->qp_num);
  ibv_end_poll(a.cq);
  poll_classic(a.cq, 2, wc);
  for (int i = 0; i < 2; ++i)
    CHECK(wc[i].wr_id == 1u + i && wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == 10);
  CHECK(!strcmp((char*)slot(&a, 2), "classic 2"));

  /* a -> b with ibv_wr_*; a reads its send completions with ibv_poll_cq. */
  post_recv(&b, 10);
  post_recv(&b, 11);
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a.qp);
  snprintf((char*)slot(&a, 5), MSG, "wr_send");
  ibv_wr_start(qpx);
  qpx->wr_id = 100;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a.mr->lkey, (uintptr_t)slot(&a, 5), 8);
  qpx->wr_id = 101;
  ibv_wr_send_imm(qpx, htobe32(0x1234));
  char inl[] = "inline!";
  ibv_wr_set_inline_data(qpx, inl, sizeof(inl));
  memset(inl, 0, sizeof(inl)); /* inline data was copied by the setter */
  CHECK(ibv_wr_complete(qpx) == 0);
  poll_classic(a.cq, 2, wc);
  CHECK(wc[0].wr_id == 100 && wc[1].wr_id == 101 && wc[1].opcode == IBV_WC_SEND);
  wait_ex(b.cq, start_step);
  CHECK(b.cq->wr_id == 10 && ibv_wc_read_byte_len(b.cq) == 8);
  wait_ex(b.cq, next_step);
  CHECK(b.cq->wr_id == 11 && ibv_wc_read_byte_len(b.cq) == 8);
  CHECK((ibv_wc_read_wc_flags(b.cq) & IBV_WC_WITH_IMM) &&
        be32toh(ibv_wc_read_imm_data(b.cq)) == 0x1234);
  CHECK(ibv_wc_read_src_qp(b.cq) == a.qp->qp_num && ibv_wc_read_slid(b.cq) == a.lid);
  ibv_end_poll(b.cq);
  CHECK(!strcmp((char*)slot(&b, 10), "wr_send") && !strcmp((char*)slot(&b, 11), "inline!"));

  CHECK(!ibv_destroy_qp(a.qp) && !ibv_destroy_qp(b.qp));
  CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(a.cq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(b.cq)));
  CHECK(ibv_destroy_comp_channel(a.ch) == 0);
  printf("ok\n");
  return 0;
}
