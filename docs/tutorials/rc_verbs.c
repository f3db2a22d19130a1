/*
 * rc_verbs: the RC flow of the RDMA Aware Programming manual, step by step
 * (docs/tutorials/02-rc-step-by-step.md explains each step).
 *
 *   rc_verbs -d DEVICE [-p TCP_PORT]              the server: SENDs a message
 *   rc_verbs -d DEVICE [-p TCP_PORT] SERVER       the client: receives it, then
 *                                                 RDMA READs and RDMA WRITEs the
 *                                                 server's buffer
 *
 *   cc -o rc_verbs rc_verbs.c -libverbs
 */
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SIZE 32

/* What each side tells the other out of band (here over TCP). */
struct conn_info {
  uint64_t addr; /* the buffer's virtual address, for RDMA READ/WRITE */
  uint32_t rkey; /* the key that lets the peer's HCA touch it */
  uint32_t qp_num;
  uint16_t lid;
} __attribute__((packed));

static void die(const char* what) {
  perror(what);
  exit(1);
}

/* Server: listen and accept one connection; client: connect (retrying until
 * the server listens). */
static int tcp_connect(const char* server, const char* port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  int fd, one = 1;
  if (!server) hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(server, port, &hints, &res)) die("getaddrinfo");
  fd = socket(res->ai_family, res->ai_socktype, 0);
  if (server) {
    for (int i = 0; connect(fd, res->ai_addr, res->ai_addrlen); ++i) {
      if (i == 100) die("connect");
      usleep(100000);
    }
  } else {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 1)) die("bind/listen");
    int conn = accept(fd, NULL, NULL);
    close(fd);
    fd = conn;
  }
  freeaddrinfo(res);
  return fd;
}

static void exchange(int fd, const void* out, void* in, size_t n) {
  if (write(fd, out, n) != (ssize_t)n) die("write");
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char*)in + got, n - got);
    if (r <= 0) die("read");
    got += r;
  }
}

/* Wait for one completion and check its status. */
static void wait_completion(struct ibv_cq* cq, const char* what) {
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (n < 0 || wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "%s: completion with status %s\n", what,
            n < 0 ? "(poll failed)" : ibv_wc_status_str(wc.status));
    exit(1);
  }
  printf("%s completed\n", what);
}

static void post(struct ibv_qp* qp, struct ibv_mr* mr, enum ibv_wr_opcode op,
                 const struct conn_info* remote) {
  struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = SIZE, .lkey = mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  if (remote) {
    wr.wr.rdma.remote_addr = remote->addr;
    wr.wr.rdma.rkey = remote->rkey;
  }
  if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

int main(int argc, char** argv) {
  const char *dev_name = NULL, *port = "18702", *server = NULL;
  for (int c; (c = getopt(argc, argv, "d:p:")) != -1;) {
    if (c == 'd') dev_name = optarg;
    else if (c == 'p') port = optarg;
    else return 2;
  }
  if (optind < argc) server = argv[optind];

  /* Step 1: find the device and open it. */
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && list[i] && !ctx; ++i)
    if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name))
      ctx = ibv_open_device(list[i]);
  if (!ctx) die("no such device");
  ibv_free_device_list(list);

  /* Step 2: our port's LID, which the subnet manager assigned. */
  struct ibv_port_attr port_attr;
  if (ibv_query_port(ctx, 1, &port_attr)) die("ibv_query_port");

  /* Step 3: a protection domain, a completion queue, a registered buffer. */
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
  char* buf = calloc(1, SIZE);
  if (!server) strcpy(buf, "hello from the server");
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                                    IBV_ACCESS_REMOTE_WRITE);
  if (!pd || !cq || !mr) die("PD/CQ/MR");

  /* Step 4: the queue pair, in state RESET. */
  struct ibv_qp_init_attr init = {
      .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 2, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!qp) die("ibv_create_qp");

  /* Step 5: exchange QP number, LID, buffer address and rkey over TCP. */
  struct conn_info local = {.addr = (uintptr_t)buf, .rkey = mr->rkey,
                            .qp_num = qp->qp_num, .lid = port_attr.lid}, remote;
  int sock = tcp_connect(server, port);
  exchange(sock, &local, &remote, sizeof(local));
  printf("local  QPN 0x%06x LID %u rkey 0x%x\nremote QPN 0x%06x LID %u rkey 0x%x\n",
         local.qp_num, local.lid, local.rkey, remote.qp_num, remote.lid, remote.rkey);

  /* Step 6: RESET -> INIT: which port, what the peer may do to our memory. */
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify QP to INIT");

  /* Step 7: the client posts its receive before anybody sends to it. */
  if (server) {
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey};
    struct ibv_recv_wr rr = {.sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &rr, &bad)) die("ibv_post_recv");
  }

  /* Step 8: INIT -> RTR (Ready To Receive): where the peer is (its LID and
   * QP number), the path MTU, the PSN we expect first. */
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote.qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify QP to RTR");

  /* Step 9: RTR -> RTS (Ready To Send): our first PSN, and how long and how
   * often to retry when no ACK comes. */
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify QP to RTS");

  char sync = 'x', peer_sync;
  exchange(sock, &sync, &peer_sync, 1); /* both QPs are in RTS now */

  /* Step 10: the transfers. */
  if (!server) {
    post(qp, mr, IBV_WR_SEND, NULL);
    wait_completion(cq, "SEND");
  } else {
    wait_completion(cq, "RECV");
    printf("received: '%s'\n", buf);
    memset(buf, 0, SIZE);
    post(qp, mr, IBV_WR_RDMA_READ, &remote);
    wait_completion(cq, "RDMA READ");
    printf("read from the server's buffer: '%s'\n", buf);
    strcpy(buf, "written by the client");
    post(qp, mr, IBV_WR_RDMA_WRITE, &remote);
    wait_completion(cq, "RDMA WRITE");
  }
  exchange(sock, &sync, &peer_sync, 1); /* the client is done */
  if (!server) printf("the server's buffer now holds: '%s'\n", buf);

  /* Step 11: tear down, in reverse order. */
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(buf);
  close(sock);
  return 0;
}
