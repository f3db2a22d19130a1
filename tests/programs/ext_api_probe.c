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

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

#define MSG 64

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq_ex* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t buf[8 * MSG];
  uint16_t lid;
};

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

static void setup(struct side* s, const char* dev, struct ibv_comp_channel* ch, void* cq_context,
                  int qp_ex) {
  struct ibv_cq_init_attr_ex cq_attr = {
      .cqe = 16,
      .cq_context = cq_context,
      .channel = ch,
      .wc_flags = IBV_WC_STANDARD_FLAGS,
  };
  s->ctx = open_device(dev);
  s->pd = ibv_alloc_pd(s->ctx);
  CHECK(s->pd);
  s->cq = ibv_create_cq_ex(s->ctx, &cq_attr);
  CHECK(s->cq);
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
  if (qp_ex) {
    qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  }
  s->qp = ibv_create_qp_ex(s->ctx, &qa);
  CHECK(s->qp);
  CHECK((ibv_qp_to_qp_ex(s->qp) != NULL) == !!qp_ex);
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

static void post_recv(struct side* s, uint64_t id) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + (id % 8) * MSG), MSG, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
  CHECK(!ibv_post_recv(s->qp, &wr, &bad));
}

/* Classic polling on an extended CQ, until n completions arrived. */
static int poll_classic(struct ibv_cq_ex* cq, int n, struct ibv_wc* wc) {
  int got = 0;
  double deadline = now() + 10;
  while (got < n) {
    int k = ibv_poll_cq(ibv_cq_ex_to_cq(cq), n - got, wc + got);
    CHECK(k >= 0);
    got += k;
    CHECK(now() < deadline);
  }
  return got;
}

static void start_poll_wait(struct ibv_cq_ex* cq) {
  struct ibv_poll_cq_attr pa = {0};
  double deadline = now() + 10;
  int rc;
  while ((rc = ibv_start_poll(cq, &pa)) == ENOENT) CHECK(now() < deadline);
  CHECK(rc == 0);
}

int main(int argc, char** argv) {
  const char* dev_a = argc > 2 ? argv[1] : "ibemu0";
  const char* dev_b = argc > 2 ? argv[2] : "ibemu1";
  static struct side a, b;
  int marker;
  struct ibv_wc wc[4];

  struct ibv_context* ctx = open_device(dev_a);
  probe_query_device(ctx);
  struct ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  CHECK(ch);

  setup(&a, dev_a, NULL, NULL, 1);
  /* b's CQ reports to a channel of another context of the same device; the
   * CQ must hold that channel (verbs_init_cq) and name its cq_context. */
  setup(&b, dev_a == dev_b ? dev_b : dev_b, NULL, NULL, 0);
  ibv_destroy_cq(ibv_cq_ex_to_cq(b.cq));
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16, .cq_context = &marker, .channel = ch};
  (void)cq_attr;

  /* The channel's CQ lives on the channel's context. */
  struct ibv_cq_init_attr_ex ch_attr = {
      .cqe = 16,
      .cq_context = &marker,
      .channel = ch,
      .wc_flags = IBV_WC_EX_WITH_BYTE_LEN,
      .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
      .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED,
  };
  struct ibv_cq_ex* ev_cq = ibv_create_cq_ex(ctx, &ch_attr);
  CHECK(ev_cq);
  CHECK(ev_cq->context == ctx && ev_cq->channel == ch && ev_cq->cq_context == &marker);
  CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
  CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(ev_cq), 0) == 0);
  return 0;
}
