/*
 * XRC across processes (IBA annex A14) with the plain verbs API: process B
 * creates an XRC SRQ in a domain it shares with process A through a file;
 * A's XRC receive QP takes SENDs for B's SRQ from an XRC send QP, and B
 * polls the completions. Then B opens A's receive QP with ibv_open_qp, as
 * the kernel's ib_open_qp allows: the handle queries and modifies the QP,
 * destroying it leaves the QP working, the QP outlives its creator's handle
 * while another handle is open, every handle gets the QP's async events,
 * and the QP goes with its last handle.
 *
 *   xrc_shared DOMAIN_FILE     prints one "ok ..." line per step, then
 *                              "xrc_shared: all ok"; exits 0 on success
 *
 * A (the parent) uses ibemu1 for the send QP and ibemu0 for the receive QP;
 * B (a child) uses ibemu0. They talk over a socketpair.
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define SLOTS 32
#define PSN 0x1234

static const char* role = "A";

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xrc_shared %s: ", role);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
  va_end(ap);
  exit(1);
}

static void ok(const char* what) {
  printf("ok %s: %s\n", role, what);
  fflush(stdout);
}

/* ---- the socketpair ---- */

static void put(int fd, uint32_t v) {
  if (write(fd, &v, sizeof(v)) != sizeof(v)) fail("write to peer");
}

static uint32_t get(int fd) {
  uint32_t v;
  if (read(fd, &v, sizeof(v)) != sizeof(v)) fail("read from peer");
  return v;
}

/* ---- verbs helpers ---- */

static struct ibv_context* open_device(const char* name) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) {
      struct ibv_context* ctx = ibv_open_device(list[i]);
      ibv_free_device_list(list);
      if (!ctx) fail("ibv_open_device %s", name);
      return ctx;
    }
  fail("no device %s", name);
  return NULL;
}

static struct ibv_xrcd* open_xrcd(struct ibv_context* ctx, const char* file) {
  int fd = -1;
  if (file) {
    fd = open(file, O_RDONLY | O_CREAT, 0600);
    if (fd < 0) fail("open %s", file);
  }
  struct ibv_xrcd_init_attr a = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd, .oflags = O_CREAT};
  struct ibv_xrcd* x = ibv_open_xrcd(ctx, &a);
  if (!x) fail("ibv_open_xrcd");
  if (fd >= 0) close(fd);
  return x;
}

static uint16_t lid_of(struct ibv_context* ctx) {
  struct ibv_port_attr p;
  if (ibv_query_port(ctx, 1, &p)) fail("ibv_query_port");
  return p.lid;
}

static void modify(struct ibv_qp* qp, struct ibv_qp_attr* a, int mask, const char* what) {
  if (ibv_modify_qp(qp, a, mask)) fail("ibv_modify_qp to %s", what);
}

static struct ibv_wc poll_one(struct ibv_cq* cq) {
  struct ibv_wc wc;
  time_t start = time(NULL);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) fail("ibv_poll_cq");
    if (n == 1) return wc;
    if (time(NULL) - start > 10) fail("no completion within 10 s");
  }
}

/* The next async event of `type` (others are skipped), within 10 s. */
static struct ibv_async_event wait_event(struct ibv_context* ctx, enum ibv_event_type type) {
  struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
  for (;;) {
    if (poll(&p, 1, 10000) != 1) fail("no async event %d within 10 s", type);
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) fail("ibv_get_async_event");
    ibv_ack_async_event(&ev);
    if (ev.event_type == type) return ev;
  }
}

static struct ibv_qp* open_qp(struct ibv_context* ctx, struct ibv_xrcd* xrcd, uint32_t qpn,
                              enum ibv_qp_type type) {
  struct ibv_qp_open_attr a = {
      .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
      .qp_num = qpn,
      .xrcd = xrcd,
      .qp_context = (void*)0x5eed,
      .qp_type = type};
  return ibv_open_qp(ctx, &a);
}

static struct ibv_qp_attr query(struct ibv_qp* qp, struct ibv_qp_init_attr* init) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr i;
  if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_MIN_RNR_TIMER, init ? init : &i))
    fail("ibv_query_qp");
  return a;
}

/* ---- B: the SRQ's process ---- */

static void post_slot(struct ibv_srq* srq, struct ibv_mr* mr, char* buf, uint64_t slot) {
  struct ibv_sge sge = {(uintptr_t)(buf + slot * MSG), MSG, mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_srq_recv(srq, &wr, &bad)) fail("ibv_post_srq_recv");
}

/* `count` receives of messages `first`... naming QP `tgt_qpn`; each slot is
 * posted again once checked. */
static void expect_receives(struct ibv_cq* cq, struct ibv_srq* srq, struct ibv_mr* mr, char* buf,
                            uint32_t tgt_qpn, int count, int first) {
  for (int i = 0; i < count; ++i) {
    struct ibv_wc wc = poll_one(cq);
    if (wc.status != IBV_WC_SUCCESS) fail("receive %d: %s", i, ibv_wc_status_str(wc.status));
    if (wc.qp_num != tgt_qpn) fail("receive names QP 0x%x, not 0x%x", wc.qp_num, tgt_qpn);
    if (wc.byte_len != MSG) fail("receive of %u bytes", wc.byte_len);
    char want[MSG];
    snprintf(want, sizeof(want), "message %d", first + i);
    if (strcmp(buf + wc.wr_id * MSG, want))
      fail("slot %lu holds '%s'", (unsigned long)wc.wr_id, buf + wc.wr_id * MSG);
    post_slot(srq, mr, buf, wc.wr_id);
  }
}

static void run_b(int sock, const char* file) {
  role = "B";
  struct ibv_context* ctx = open_device("ibemu0");
  struct ibv_xrcd* xrcd = open_xrcd(ctx, file);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  char* buf = calloc(SLOTS, MSG);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, SLOTS * MSG, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * SLOTS, NULL, NULL, 0);
  if (!pd || !buf || !mr || !cq) fail("PD, MR or CQ");
  struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = SLOTS, .max_sge = 1},
                                    .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
                                                 IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
                                    .srq_type = IBV_SRQT_XRC,
                                    .pd = pd,
                                    .xrcd = xrcd,
                                    .cq = cq};
  struct ibv_srq* srq = ibv_create_srq_ex(ctx, &sa);
  if (!srq) fail("ibv_create_srq_ex");
  uint32_t srqn;
  if (ibv_get_srq_num(srq, &srqn)) fail("ibv_get_srq_num");
  for (uint64_t slot = 0; slot < SLOTS; ++slot) post_slot(srq, mr, buf, slot);
  put(sock, srqn);
  const uint32_t tgt = get(sock), send_qpn = get(sock);

  /* 1: A's receive QP delivers into this process's SRQ. */
  expect_receives(cq, srq, mr, buf, tgt, 8, 0);
  ok("8 SENDs through A's receive QP completed on B's CQ, in B's buffers");
  put(sock, 1);

  /* 2: a handle on A's QP. */
  errno = 0;
  if (open_qp(ctx, xrcd, tgt + 1000, IBV_QPT_XRC_RECV) || errno != EINVAL)
    fail("ibv_open_qp of a QP that does not exist");
  if (open_qp(ctx, xrcd, tgt, IBV_QPT_RC) || errno != EINVAL)
    fail("ibv_open_qp with another QP type");
  struct ibv_xrcd* other = open_xrcd(ctx, NULL);
  if (open_qp(ctx, other, tgt, IBV_QPT_XRC_RECV) || errno != EINVAL)
    fail("ibv_open_qp through another XRC domain");
  ok("ibv_open_qp refuses unknown QPs, other types and other domains (EINVAL)");
  struct ibv_qp* h = open_qp(ctx, xrcd, tgt, IBV_QPT_XRC_RECV);
  if (!h) fail("ibv_open_qp");
  if (h->qp_num != tgt || h->qp_type != IBV_QPT_XRC_RECV || h->qp_context != (void*)0x5eed)
    fail("the handle's fields");
  struct ibv_qp_init_attr init;
  struct ibv_qp_attr a = query(h, &init);
  if (a.qp_state != IBV_QPS_RTS || a.dest_qp_num != send_qpn || init.qp_type != IBV_QPT_XRC_RECV)
    fail("query through the handle: state %d dest 0x%x", a.qp_state, a.dest_qp_num);
  ok("the handle queries A's QP (RTS, connected to A's send QP)");
  struct ibv_qp_attr m = {.qp_state = IBV_QPS_RTS, .min_rnr_timer = 5};
  modify(h, &m, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER, "RTS through the handle");
  if (ibv_post_recv(h, &(struct ibv_recv_wr){0}, &(struct ibv_recv_wr*){NULL}) == 0)
    fail("a receive posted to an XRC receive QP");
  put(sock, 2);

  /* 3: closing the handle leaves the QP to its creator. */
  if (ibv_destroy_qp(h)) fail("ibv_destroy_qp of the handle");
  put(sock, 3);
  expect_receives(cq, srq, mr, buf, tgt, 4, 100);
  ok("after B's handle is destroyed, A's QP still delivers into B's SRQ");

  /* 4: the QP outlives its creator's handle while B holds one. */
  h = open_qp(ctx, xrcd, tgt, IBV_QPT_XRC_RECV);
  if (!h) fail("ibv_open_qp again");
  put(sock, 4);
  expect_receives(cq, srq, mr, buf, tgt, 4, 200);
  a = query(h, NULL);
  if (a.qp_state != IBV_QPS_RTS) fail("state %d after the creator's destroy", a.qp_state);
  ok("with the creator's handle destroyed, B's handle keeps the QP working");
  put(sock, 4); /* A breaks the QP only after this query */

  /* 5: every handle hears the QP's async events. */
  struct ibv_async_event ev = wait_event(ctx, IBV_EVENT_QP_REQ_ERR);
  if (ev.element.qp != h) fail("the event names %p, not the handle %p", ev.element.qp, h);
  a = query(h, NULL);
  if (a.qp_state != IBV_QPS_ERR) fail("state %d after the invalid request", a.qp_state);
  ok("B's handle got IBV_EVENT_QP_REQ_ERR; the QP is in ERR");
  get(sock);

  /* 6: the QP goes with its last handle. */
  if (ibv_destroy_qp(h)) fail("ibv_destroy_qp of the last handle");
  if (open_qp(ctx, xrcd, tgt, IBV_QPT_XRC_RECV) || errno != EINVAL)
    fail("the QP is still there after its last handle");
  ok("the QP went with its last handle");
  put(sock, 6);

  /* 7: a domain its SRQ still uses stays open (EBUSY), as with the kernel. */
  if (ibv_close_xrcd(xrcd) != EBUSY) fail("ibv_close_xrcd of a domain an SRQ uses");
  if (ibv_destroy_srq(srq) || ibv_close_xrcd(xrcd)) fail("ibv_close_xrcd once the SRQ is gone");
  ok("ibv_close_xrcd is EBUSY while an XRC SRQ uses the domain");
  if (ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) || ibv_close_xrcd(other) ||
      ibv_close_device(ctx))
    fail("clean-up");
  exit(0);
}

/* ---- A: the receive QP's process ---- */

struct sender {
  struct ibv_qp* qp;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  char buf[MSG];
};

static void send_to(struct sender* s, uint32_t srqn, int number, enum ibv_wc_status want) {
  snprintf(s->buf, sizeof(s->buf), "message %d", number);
  struct ibv_sge sge = {(uintptr_t)s->buf, MSG, s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = number,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.qp_type.xrc.remote_srqn = srqn;
  struct ibv_send_wr* bad;
  if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send");
  struct ibv_wc wc = poll_one(s->cq);
  if (wc.status != want)
    fail("send %d: %s, not %s", number, ibv_wc_status_str(wc.status), ibv_wc_status_str(want));
}

static void run_a(int sock, const char* file, pid_t b) {
  struct ibv_context* tctx = open_device("ibemu0");
  struct ibv_context* ictx = open_device("ibemu1");
  struct ibv_xrcd* xrcd = open_xrcd(tctx, file);
  const uint32_t srqn = get(sock);

  struct ibv_qp_init_attr_ex ta = {
      .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
  struct ibv_qp* tgt = ibv_create_qp_ex(tctx, &ta);
  struct sender s;
  struct ibv_pd* pd = ibv_alloc_pd(ictx);
  s.cq = ibv_create_cq(ictx, 16, NULL, NULL, 0);
  s.mr = pd ? ibv_reg_mr(pd, s.buf, MSG, IBV_ACCESS_LOCAL_WRITE) : NULL;
  struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND,
                                   .send_cq = s.cq,
                                   .cap = {.max_send_wr = 16, .max_send_sge = 1},
                                   .comp_mask = IBV_QP_INIT_ATTR_PD,
                                   .pd = pd};
  s.qp = s.cq && s.mr ? ibv_create_qp_ex(ictx, &ia) : NULL;
  if (!tgt || !s.qp) fail("creating the QPs");

  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  modify(tgt, &a, init, "INIT");
  a.qp_access_flags = 0;
  modify(s.qp, &a, init, "INIT");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR,
                           .path_mtu = IBV_MTU_1024,
                           .dest_qp_num = s.qp->qp_num,
                           .rq_psn = PSN,
                           .max_dest_rd_atomic = 1,
                           .min_rnr_timer = 12,
                           .ah_attr = {.dlid = lid_of(ictx), .port_num = 1}};
  modify(tgt, &a,
         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
         "RTR");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 14, .sq_psn = PSN};
  modify(tgt, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN, "RTS");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR,
                           .path_mtu = IBV_MTU_1024,
                           .dest_qp_num = tgt->qp_num,
                           .rq_psn = PSN,
                           .ah_attr = {.dlid = lid_of(tctx), .port_num = 1}};
  modify(s.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
         "RTR");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS,
                           .timeout = 14,
                           .retry_cnt = 7,
                           .rnr_retry = 7,
                           .sq_psn = PSN,
                           .max_rd_atomic = 1};
  modify(s.qp, &a,
         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC,
         "RTS");
  put(sock, tgt->qp_num);
  put(sock, s.qp->qp_num);

  /* 1 */
  for (int i = 0; i < 8; ++i) send_to(&s, srqn, i, IBV_WC_SUCCESS);
  get(sock);
  ok("8 SENDs to B's SRQ acknowledged by A's receive QP");

  /* 2: B modified the QP through its handle. */
  get(sock);
  struct ibv_qp_attr q;
  struct ibv_qp_init_attr qi;
  if (ibv_query_qp(tgt, &q, IBV_QP_MIN_RNR_TIMER, &qi) || q.min_rnr_timer != 5)
    fail("B's modify did not reach the QP (min_rnr_timer %d)", q.min_rnr_timer);
  ok("B's ibv_modify_qp through its handle changed A's QP");

  /* 3 */
  get(sock);
  for (int i = 0; i < 4; ++i) send_to(&s, srqn, 100 + i, IBV_WC_SUCCESS);

  /* 4: A keeps a handle of its own and destroys the creator's. */
  get(sock);
  struct ibv_qp* mine = open_qp(tctx, xrcd, tgt->qp_num, IBV_QPT_XRC_RECV);
  if (!mine) fail("ibv_open_qp in the creating process");
  if (ibv_destroy_qp(tgt)) fail("ibv_destroy_qp of the creator's handle");
  for (int i = 0; i < 4; ++i) send_to(&s, srqn, 200 + i, IBV_WC_SUCCESS);
  ok("the QP outlived its creator's handle");
  get(sock);

  /* 5: an SRQ number nobody has: invalid request, and QP_REQ_ERR on every handle. */
  send_to(&s, 0xfffff0, 300, IBV_WC_REM_INV_REQ_ERR);
  struct ibv_async_event ev = wait_event(tctx, IBV_EVENT_QP_REQ_ERR);
  if (ev.element.qp != mine) fail("the event names %p, not A's handle %p", ev.element.qp, mine);
  ok("A's handle got IBV_EVENT_QP_REQ_ERR too");
  if (ibv_destroy_qp(mine)) fail("ibv_destroy_qp of A's handle");
  put(sock, 5);

  /* 6: B's handle is the last one. */
  get(sock);
  int status;
  if (waitpid(b, &status, 0) != b || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("B failed");
  if (ibv_destroy_qp(s.qp) || ibv_destroy_cq(s.cq) || ibv_dereg_mr(s.mr) || ibv_dealloc_pd(pd) ||
      ibv_close_xrcd(xrcd) || ibv_close_device(ictx) || ibv_close_device(tctx))
    fail("clean-up");
  printf("xrc_shared: all ok\n");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DOMAIN_FILE\n", argv[0]);
    return 2;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) fail("socketpair");
  setvbuf(stdout, NULL, _IOLBF, 0);
  pid_t b = fork();
  if (b < 0) fail("fork");
  if (b == 0) {
    close(sv[0]);
    run_b(sv[1], argv[1]);
  }
  close(sv[1]);
  run_a(sv[0], argv[1], b);
  return 0;
}
