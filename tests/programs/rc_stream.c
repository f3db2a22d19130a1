/*
 * rc_stream: keeps an RC connection busy so tests can break it. The server
 * keeps receives posted and counts messages; the client SENDs continuously
 * (a window of outstanding WRs) until an error completion arrives, then
 * drains its CQ and prints one line per completion status, e.g.
 *   status transport retry counter exceeded (12): 1
 *   status Work Request Flushed Error (5): 15
 * and exits 1; a run that ends by count prints "done N" and exits 0.
 *
 * With -w SECONDS the receiver makes no verbs call for that long after
 * connecting: its QP must still take every message (passive target).
 *
 *   rc_stream [-d dev] [-p tcp_port] [-s size] [-n count] [-t timeout] [-w secs] [server]
 */
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rc_common.h"

#define WINDOW 16

struct peer {
  uint32_t qpn;
  uint16_t lid;
} __attribute__((packed));

int main(int argc, char** argv) {
  const char *dev_name = "ibemu0", *server = NULL;
  int tcp_port = 19876, size = 4096, timeout = 14, wait_s = 0, c;
  long count = -1;
  while ((c = getopt(argc, argv, "d:p:s:n:t:w:")) != -1) {
    if (c == 'd')
      dev_name = optarg;
    else if (c == 'p')
      tcp_port = atoi(optarg);
    else if (c == 's')
      size = atoi(optarg);
    else if (c == 'n')
      count = atol(optarg);
    else if (c == 't')
      timeout = atoi(optarg);
    else if (c == 'w')
      wait_s = atoi(optarg);
    else
      return 2;
  }
  if (optind < argc) server = argv[optind];
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), dev_name)) ctx = ibv_open_device(list[i]);
  if (!ctx) {
    fprintf(stderr, "cannot open %s\n", dev_name);
    return 2;
  }
  struct ibv_port_attr pa;
  ibv_query_port(ctx, 1, &pa);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 4 * WINDOW, NULL, NULL, 0);
  char* buf = calloc(1, size);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr init = {
      .send_cq = cq,
      .recv_cq = cq,
      .qp_type = IBV_QPT_RC,
      .cap = {
          .max_send_wr = WINDOW, .max_recv_wr = 2 * WINDOW, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!pd || !cq || !mr || !qp) {
    perror("setup");
    return 2;
  }
  struct peer me = {qp->qp_num, pa.lid}, them;
  int sock = tcp_connect(server, tcp_port);
  if (sock < 0 || exchange(sock, &me, &them, sizeof(me))) return 2;
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey};
  struct ibv_recv_wr rr = {.sg_list = &sge, .num_sge = 1}, *bad_rr;
  struct ibv_send_wr sr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad_sr;
  int err =
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  for (int i = 0; !server && !err && i < 2 * WINDOW; ++i) err = ibv_post_recv(qp, &rr, &bad_rr);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = them.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = them.lid;
  a.ah_attr.port_num = 1;
  err = err
            ?: ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  err = err
            ?: ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  char sync = 'S';
  if (err || exchange(sock, &sync, &sync, 1)) {
    fprintf(stderr, "connect failed\n");
    return 2;
  }
  printf("connected\n");
  fflush(stdout);
  if (!server && wait_s) sleep(wait_s);
  long done = 0, posted = 0, failed = 0;
  long per_status[32] = {0};
  int outstanding = 0;
  while (count < 0 || done < count) {
    while (server && !failed && outstanding < WINDOW && (count < 0 || posted < count)) {
      if (ibv_post_send(qp, &sr, &bad_sr)) break;
      ++outstanding;
      ++posted;
    }
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(cq, 8, wc);
    for (int i = 0; i < n; ++i) {
      per_status[wc[i].status & 31]++;
      if (wc[i].status != IBV_WC_SUCCESS) failed = 1;
      if (wc[i].opcode == IBV_WC_RECV && wc[i].status == IBV_WC_SUCCESS)
        ibv_post_recv(qp, &rr, &bad_rr);
      if (!(wc[i].opcode & IBV_WC_RECV)) --outstanding;
      ++done;
    }
    if (failed && outstanding == 0) break;
  }
  for (int s = 0; s < 32; ++s)
    if (per_status[s]) printf("status %s (%d): %ld\n", ibv_wc_status_str(s), s, per_status[s]);
  if (failed) return 1;
  printf("done %ld\n", done);
  return 0;
}
