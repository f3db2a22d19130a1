/*
 * rc_example: the flow of the RC example in the RDMA Aware Programming
 * manual, written for ibemu's tests. Server and client exchange QP number,
 * LID, GID, rkey and buffer address over TCP, move their QPs
 * RESET -> INIT -> RTR -> RTS, the client posts a receive, the server SENDs
 * its buffer, the client checks it, RDMA READs the server's buffer and RDMA
 * WRITEs a new message into it, the server (which made no verbs call for
 * those) checks that, and both print "test result is 0".
 *
 *   rc_example [-d dev] [-i port] [-g gid_idx] [-p tcp_port] [-s size] [server]
 *
 * Like the manual's program it uses a small malloc'ed buffer (byte-granular
 * MR), rnr_retry 0, and fails when a completion does not arrive in 2 s.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "rc_common.h"

#define MSG "SEND operation "
#define RDMAMSGW "RDMA write operation"
#define POLL_TIMEOUT_MS 2000

struct peer_info {
  uint64_t addr;
  uint32_t rkey;
  uint32_t qp_num;
  uint16_t lid;
  uint8_t gid[16];
} __attribute__((packed));

struct config {
  const char* dev_name;
  const char* server_name;
  int ib_port;
  int gid_idx;
  int tcp_port;
  int size;
};

static void fill_pattern(char* buf, int size, const char* text) {
  for (int i = 0; i < size; ++i) buf[i] = text[i % strlen(text)];
}

static int check_pattern(const char* buf, int size, const char* text) {
  for (int i = 0; i < size; ++i)
    if (buf[i] != text[i % strlen(text)]) {
      fprintf(stderr, "data mismatch at byte %d\n", i);
      return -1;
    }
  return 0;
}

static int post_rdma(struct ibv_qp* qp, struct ibv_mr* mr, char* buf, int size,
                     enum ibv_wr_opcode opcode, const struct peer_info* remote) {
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey};
  struct ibv_send_wr sr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = opcode,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  sr.wr.rdma.remote_addr = remote->addr;
  sr.wr.rdma.rkey = remote->rkey;
  if (ibv_post_send(qp, &sr, &bad)) {
    fprintf(stderr, "failed to post SR\n");
    return -1;
  }
  return 0;
}

static int poll_completion(struct ibv_cq* cq, const char* what) {
  struct ibv_wc wc;
  struct timeval start, now;
  int n;
  gettimeofday(&start, NULL);
  do {
    n = ibv_poll_cq(cq, 1, &wc);
    gettimeofday(&now, NULL);
  } while (n == 0 && (now.tv_sec - start.tv_sec) * 1000 + (now.tv_usec - start.tv_usec) / 1000 <
                         POLL_TIMEOUT_MS);
  if (n < 0) {
    fprintf(stderr, "poll CQ failed\n");
    return -1;
  }
  if (n == 0) {
    fprintf(stderr, "completion wasn't found in the CQ after timeout (%s)\n", what);
    return -1;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "%s: bad completion status 0x%x (%s), vendor syndrome 0x%x\n", what, wc.status,
            ibv_wc_status_str(wc.status), wc.vendor_err);
    return -1;
  }
  printf("completion found in CQ with status 0x%x (%s)\n", wc.status, what);
  return 0;
}

static int run(const struct config* cfg) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_device* dev = NULL;
  int rc = 1;
  if (!list) {
    perror("ibv_get_device_list");
    return 1;
  }
  for (int i = 0; list[i]; ++i)
    if (!cfg->dev_name || !strcmp(ibv_get_device_name(list[i]), cfg->dev_name)) dev = list[i];
  if (!dev) {
    fprintf(stderr, "IB device %s wasn't found\n", cfg->dev_name ? cfg->dev_name : "(any)");
    return 1;
  }
  struct ibv_context* ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!ctx) {
    perror("ibv_open_device");
    return 1;
  }
  struct ibv_port_attr port_attr;
  if (ibv_query_port(ctx, cfg->ib_port, &port_attr)) {
    fprintf(stderr, "ibv_query_port on port %d failed\n", cfg->ib_port);
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
  char* buf = malloc(cfg->size);
  if (!pd || !cq || !buf) {
    fprintf(stderr, "failed to allocate PD/CQ/buffer\n");
    return 1;
  }
  memset(buf, 0, cfg->size);
  if (!cfg->server_name) {
    fill_pattern(buf, cfg->size, MSG);
  }
  struct ibv_mr* mr =
      ibv_reg_mr(pd, buf, cfg->size,
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) {
    perror("ibv_reg_mr");
    return 1;
  }
  struct ibv_qp_init_attr qp_init = {
      .send_cq = cq,
      .recv_cq = cq,
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = 1,
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qp_init);
  if (!qp) {
    perror("ibv_create_qp");
    return 1;
  }
  printf("QP was created, QP number=0x%x\n", qp->qp_num);

  struct peer_info local = {.addr = (uintptr_t)buf,
                            .rkey = mr->rkey,
                            .qp_num = qp->qp_num,
                            .lid = port_attr.lid},
                   remote;
  if (cfg->gid_idx >= 0) {
    union ibv_gid gid;
    if (ibv_query_gid(ctx, cfg->ib_port, cfg->gid_idx, &gid)) {
      fprintf(stderr, "could not get gid for port %d, index %d\n", cfg->ib_port, cfg->gid_idx);
      return 1;
    }
    memcpy(local.gid, gid.raw, 16);
  }
  int sock = tcp_connect(cfg->server_name, cfg->tcp_port);
  if (sock < 0 || exchange(sock, &local, &remote, sizeof(local))) {
    fprintf(stderr, "failed to exchange connection data over TCP\n");
    return 1;
  }
  printf("Remote QP number = 0x%x, LID = 0x%x, rkey = 0x%x\n", remote.qp_num, remote.lid,
         remote.rkey);

  struct ibv_qp_attr attr = {
      .qp_state = IBV_QPS_INIT,
      .port_num = cfg->ib_port,
      .pkey_index = 0,
      .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    fprintf(stderr, "failed to modify QP state to INIT\n");
    return 1;
  }
  if (cfg->server_name) {
    /* The client's receive must be posted before the server sends: rnr_retry is 0. */
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = cfg->size, .lkey = mr->lkey};
    struct ibv_recv_wr rr = {.wr_id = 0, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &rr, &bad)) {
      fprintf(stderr, "failed to post RR\n");
      return 1;
    }
  }
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_256;
  attr.dest_qp_num = remote.qp_num;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 0x12;
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.port_num = cfg->ib_port;
  if (cfg->gid_idx >= 0) {
    attr.ah_attr.is_global = 1;
    memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    attr.ah_attr.grh.hop_limit = 1;
    attr.ah_attr.grh.sgid_index = cfg->gid_idx;
  }
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    fprintf(stderr, "failed to modify QP state to RTR\n");
    return 1;
  }
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 0x12;
  attr.retry_cnt = 6;
  attr.rnr_retry = 0;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    fprintf(stderr, "failed to modify QP state to RTS\n");
    return 1;
  }
  char sync_out = 'Q', sync_in;
  if (exchange(sock, &sync_out, &sync_in, 1)) { /* both QPs are ready */
    fprintf(stderr, "sync error before RDMA ops\n");
    return 1;
  }
  if (!cfg->server_name) {
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = cfg->size, .lkey = mr->lkey};
    struct ibv_send_wr sr = {.wr_id = 0,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(qp, &sr, &bad)) {
      fprintf(stderr, "failed to post SR\n");
      return 1;
    }
    if (poll_completion(cq, "send")) goto out;
  } else {
    if (poll_completion(cq, "receive")) goto out;
    if (check_pattern(buf, cfg->size, MSG)) goto out;
    printf("Message is: '%.*s'\n", cfg->size < 64 ? cfg->size : 64, buf);
    /* As the manual's client: RDMA READ the server's buffer, then RDMA WRITE
     * a new message into it. */
    memset(buf, 0, cfg->size);
    if (post_rdma(qp, mr, buf, cfg->size, IBV_WR_RDMA_READ, &remote) ||
        poll_completion(cq, "RDMA read"))
      goto out;
    if (check_pattern(buf, cfg->size, MSG)) goto out;
    printf("Contents of server's buffer: '%.*s'\n", cfg->size < 64 ? cfg->size : 64, buf);
    fill_pattern(buf, cfg->size, RDMAMSGW);
    if (post_rdma(qp, mr, buf, cfg->size, IBV_WR_RDMA_WRITE, &remote) ||
        poll_completion(cq, "RDMA write"))
      goto out;
    printf("Now replacing it with: '%.*s'\n", cfg->size < 64 ? cfg->size : 64, buf);
  }
  if (exchange(sock, &sync_out, &sync_in, 1)) {
    fprintf(stderr, "sync error after RDMA ops\n");
    goto out;
  }
  if (!cfg->server_name) {
    /* The client's RDMA WRITE landed here without any call of ours. */
    if (check_pattern(buf, cfg->size, RDMAMSGW)) goto out;
    printf("Contents of server buffer: '%.*s'\n", cfg->size < 64 ? cfg->size : 64, buf);
  }
  rc = 0;
out:
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  free(buf);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  close(sock);
  return rc;
}

int main(int argc, char** argv) {
  struct config cfg = {.ib_port = 1, .gid_idx = -1, .tcp_port = 19875, .size = 15};
  int c;
  while ((c = getopt(argc, argv, "d:i:g:p:s:")) != -1) {
    switch (c) {
      case 'd':
        cfg.dev_name = optarg;
        break;
      case 'i':
        cfg.ib_port = atoi(optarg);
        break;
      case 'g':
        cfg.gid_idx = atoi(optarg);
        break;
      case 'p':
        cfg.tcp_port = atoi(optarg);
        break;
      case 's':
        cfg.size = atoi(optarg);
        break;
      default:
        fprintf(stderr,
                "usage: %s [-d dev] [-i port] [-g gid_idx] [-p tcp_port] [-s size] [server]\n",
                argv[0]);
        return 1;
    }
  }
  /* As in the manual: the client names the server; without a name we serve.
   * Here the server SENDs and the client receives. */
  if (optind < argc) cfg.server_name = argv[optind];
  if (cfg.size < 1) cfg.size = 1;
  int rc = run(&cfg);
  printf("\ntest result is %d\n", rc);
  return rc;
}
