/*
 * comp_channel_probe: completion events through a completion channel's fd,
 * the way event-driven programs use it — with poll() and with epoll, not only
 * the blocking ibv_get_cq_event. One process, an RC QP on ibemu0 sending to
 * one on ibemu1 whose CQ has a channel:
 *   1. armed for solicited events only, an unsolicited SEND raises no event;
 *   2. a solicited SEND then does (poll() sees the fd readable);
 *   3. re-armed for any completion, the next SEND makes epoll_wait report it;
 *   4. unarmed, a SEND raises nothing;
 *   5. arming while that completion still waits unpolled raises the event at
 *      once: no event announced it (programs that poll once per event and
 *      re-arm, as Open MPI's openib connection manager, rely on it);
 *   6. re-arming over a completion its event announced raises nothing more
 *      (perftest's event mode polls once per event); ibv_ack_cq_events and
 *      teardown work.
 * Prints "ok" and exits 0, or says which step failed.
 */
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "rc_common.h"

static struct ibv_context* open_dev(const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr);          \
    return 1;                     \
  } while (0)

int main(void) {
  struct ibv_context *ca = open_dev("ibemu0"), *cb = open_dev("ibemu1");
  if (!ca || !cb) FAIL("cannot open ibemu0/ibemu1");
  struct ibv_port_attr pa, pb;
  ibv_query_port(ca, 1, &pa);
  ibv_query_port(cb, 1, &pb);
  struct ibv_pd *pda = ibv_alloc_pd(ca), *pdb = ibv_alloc_pd(cb);
  struct ibv_comp_channel* ch = ibv_create_comp_channel(cb);
  if (!ch) FAIL("ibv_create_comp_channel failed");
  struct ibv_cq* cqa = ibv_create_cq(ca, 16, NULL, NULL, 0);
  struct ibv_cq* cqb = ibv_create_cq(cb, 16, (void*)0x1234, ch, 0);
  static char bufa[64], bufb[4096];
  struct ibv_mr* mra = ibv_reg_mr(pda, bufa, sizeof(bufa), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* mrb = ibv_reg_mr(pdb, bufb, sizeof(bufb), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr ia = {
      .send_cq = cqa, .recv_cq = cqa, .qp_type = IBV_QPT_RC, .cap = {8, 8, 1, 1, 0}};
  struct ibv_qp_init_attr ib = {
      .send_cq = cqb, .recv_cq = cqb, .qp_type = IBV_QPT_RC, .cap = {8, 8, 1, 1, 0}};
  struct ibv_qp *qa = ibv_create_qp(pda, &ia), *qb = ibv_create_qp(pdb, &ib);
  if (!cqa || !cqb || !mra || !mrb || !qa || !qb) FAIL("setup failed");
  if (connect_rc_qp(qa, qb->qp_num, pb.lid, IBV_MTU_1024, 14, 7, 0) ||
      connect_rc_qp(qb, qa->qp_num, pa.lid, IBV_MTU_1024, 14, 7, 0))
    FAIL("connect failed");
  for (int i = 0; i < 8; ++i) {
    struct ibv_sge s = {(uintptr_t)bufb + 512 * (i % 8), 512, mrb->lkey};
    struct ibv_recv_wr r = {.wr_id = i, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(qb, &r, &bad)) FAIL("post_recv failed");
  }
  struct pollfd pfd = {ch->fd, POLLIN, 0};
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN}, out;
  epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev);
  struct ibv_wc wc[8];
  unsigned events = 0;
#define SEND(flags)                                                                    \
  do {                                                                                 \
    struct ibv_sge s = {(uintptr_t)bufa, 8, mra->lkey};                                \
    struct ibv_send_wr w = {.sg_list = &s,                                             \
                            .num_sge = 1,                                              \
                            .opcode = IBV_WR_SEND,                                     \
                            .send_flags = IBV_SEND_SIGNALED | (flags)},                \
                       *bad;                                                           \
    if (ibv_post_send(qa, &w, &bad)) FAIL("post_send failed");                         \
    int got = 0;                                                                       \
    for (int spin = 0; spin < 20000000 && !got; ++spin) got = ibv_poll_cq(cqa, 1, wc); \
    if (got != 1 || wc[0].status != IBV_WC_SUCCESS) FAIL("send did not complete");     \
  } while (0)

  /* 1. Solicited-only arming ignores an unsolicited message. */
  if (ibv_req_notify_cq(cqb, 1)) FAIL("req_notify_cq(solicited) failed");
  SEND(0);
  if (poll(&pfd, 1, 300) != 0) FAIL("step 1: an unsolicited SEND raised an event");
  /* 2. A solicited one raises it. */
  SEND(IBV_SEND_SOLICITED);
  if (poll(&pfd, 1, 5000) != 1 || !(pfd.revents & POLLIN)) FAIL("step 2: no event");
  struct ibv_cq* evcq;
  void* evctx;
  if (ibv_get_cq_event(ch, &evcq, &evctx) || evcq != cqb || evctx != (void*)0x1234)
    FAIL("step 2: ibv_get_cq_event returned the wrong CQ or context");
  ++events;
  if (ibv_poll_cq(cqb, 8, wc) != 2) FAIL("step 2: expected two receive completions");
  /* 3. Re-armed for any completion: epoll reports the next SEND. */
  if (ibv_req_notify_cq(cqb, 0)) FAIL("req_notify_cq failed");
  SEND(0);
  if (epoll_wait(ep, &out, 1, 5000) != 1) FAIL("step 3: epoll saw no event");
  if (ibv_get_cq_event(ch, &evcq, &evctx) || evcq != cqb) FAIL("step 3: wrong CQ");
  ++events;
  if (ibv_poll_cq(cqb, 8, wc) != 1) FAIL("step 3: expected one receive completion");
  /* 4. Not re-armed: no event. */
  SEND(0);
  if (poll(&pfd, 1, 300) != 0) FAIL("step 4: an unarmed CQ raised an event");
  /* 5. Arming over step 4's unannounced completion raises the event at once. */
  if (ibv_req_notify_cq(cqb, 0)) FAIL("req_notify_cq failed");
  if (poll(&pfd, 1, 5000) != 1) FAIL("step 5: arming over an unannounced completion: no event");
  if (ibv_get_cq_event(ch, &evcq, &evctx) || evcq != cqb) FAIL("step 5: wrong CQ");
  ++events;
  /* 6. Re-armed before polling it: that completion was announced. */
  if (ibv_req_notify_cq(cqb, 0)) FAIL("req_notify_cq failed");
  if (poll(&pfd, 1, 300) != 0) FAIL("step 6: re-arming over an announced completion: an event");
  if (ibv_poll_cq(cqb, 8, wc) != 1) FAIL("step 5: expected step 4's receive completion");
  ibv_ack_cq_events(cqb, events);
  ibv_destroy_qp(qa);
  ibv_destroy_qp(qb);
  if (ibv_destroy_cq(cqb) || ibv_destroy_comp_channel(ch)) FAIL("teardown failed");
  printf("ok\n");
  return 0;
}
