/*
 * UD multicast with the plain verbs API (IBA 10.5): a member attaches QPs to
 * a group and counts what each receives; a sender sends datagrams to the
 * group's MLID with a GRH naming its MGID and DestQP 0xFFFFFF.
 *
 *   mcast_ud DEVICE member NQPS EXPECT   prints "ready", then "got N N ..."
 *                                        once every QP has EXPECT datagrams
 *                                        (or after 10 s), one count per QP
 *   mcast_ud DEVICE send COUNT           prints "sent COUNT"
 *   mcast_ud DEVICE loopback COUNT [block]
 *                                        a member QP sends COUNT datagrams to
 *                                        its own group, another member QP of
 *                                        the process listens; prints "own N
 *                                        other M" (block: the sender made with
 *                                        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)
 *
 * The group is MGID ff12:401b::1234, MLID 0xc010, Q_Key 0x11111111.
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_QPS 8
#define SLOTS 64
#define SLOT 256
#define QKEY 0x11111111u
#define MLID 0xc010

static const uint8_t kMgid[16] = {0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34};

struct member {
  struct ibv_qp* qp;
  struct ibv_cq* cq;
  int received;
  struct ibv_mr* mr;
  char* buf;
};

static void die(const char* what) {
  perror(what);
  exit(1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static struct ibv_context* open_device(const char* name) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) {
      struct ibv_context* ctx = ibv_open_device(list[i]);
      ibv_free_device_list(list);
      if (!ctx) die("ibv_open_device");
      return ctx;
    }
  fprintf(stderr, "no device %s\n", name);
  exit(1);
}

/* A UD QP in RTS with its own CQ and a registered buffer. */
static void make_member(struct ibv_context* ctx, struct ibv_pd* pd, struct member* m,
                        uint32_t create_flags) {
  m->received = 0;
  m->cq = ibv_create_cq(ctx, SLOTS, NULL, NULL, 0);
  m->buf = calloc(SLOTS, SLOT);
  m->mr = ibv_reg_mr(pd, m->buf, SLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr_ex init = {
      .send_cq = m->cq,
      .recv_cq = m->cq,
      .qp_type = IBV_QPT_UD,
      .cap = {.max_send_wr = SLOTS, .max_recv_wr = SLOTS, .max_send_sge = 1, .max_recv_sge = 1},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
      .pd = pd,
      .create_flags = create_flags};
  if (!m->cq || !m->buf || !m->mr || !(m->qp = ibv_create_qp_ex(ctx, &init))) die("create");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY};
  if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    die("INIT");
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE)) die("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(m->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) die("RTS");
}

static void post_recv(struct member* m, int slot) {
  struct ibv_sge sge = {(uintptr_t)(m->buf + slot * SLOT), SLOT, m->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(m->qp, &wr, &bad)) die("ibv_post_recv");
}

static int run_member(struct ibv_context* ctx, struct ibv_pd* pd, int nqps, int expect) {
  struct member m[MAX_QPS];
  union ibv_gid mgid;
  int counts[MAX_QPS] = {0};
  memcpy(mgid.raw, kMgid, 16);
  for (int i = 0; i < nqps; ++i) {
    make_member(ctx, pd, &m[i], 0);
    for (int s = 0; s < SLOTS; ++s) post_recv(&m[i], s);
    int err = ibv_attach_mcast(m[i].qp, &mgid, MLID);
    if (err) {
      fprintf(stderr, "ibv_attach_mcast: %s\n", strerror(err));
      return 1;
    }
  }
  printf("ready\n");
  fflush(stdout);
  double deadline = now() + 10, quiet_until = 0;
  for (;;) {
    int all = 1;
    for (int i = 0; i < nqps; ++i) {
      struct ibv_wc wc;
      while (ibv_poll_cq(m[i].cq, 1, &wc) == 1) {
        if (wc.status != IBV_WC_SUCCESS || !(wc.wc_flags & IBV_WC_GRH) ||
            memcmp(m[i].buf + wc.wr_id * SLOT + 24, kMgid, 16)) {
          fprintf(stderr, "bad completion: status %d flags %#x\n", wc.status, wc.wc_flags);
          return 1;
        }
        ++counts[i];
        post_recv(&m[i], (int)wc.wr_id);
      }
      all &= counts[i] >= expect;
    }
    /* Once all arrived, keep polling a little: nothing more may come. */
    if (all && !quiet_until) quiet_until = now() + 0.2;
    if ((quiet_until && now() > quiet_until) || now() > deadline) break;
  }
  printf("got");
  for (int i = 0; i < nqps; ++i) {
    printf(" %d", counts[i]);
    if (ibv_detach_mcast(m[i].qp, &mgid, MLID)) die("ibv_detach_mcast");
  }
  printf("\n");
  return 0;
}

/* COUNT datagrams from s to the group, each completed before the next. */
static int send_to_group(struct ibv_pd* pd, struct member* s, int count) {
  struct ibv_ah_attr ah_attr = {.dlid = MLID, .port_num = 1, .is_global = 1};
  memcpy(ah_attr.grh.dgid.raw, kMgid, 16);
  struct ibv_ah* ah = ibv_create_ah(pd, &ah_attr);
  if (!ah) die("ibv_create_ah");
  for (int i = 0; i < count; ++i) {
    struct ibv_sge sge = {(uintptr_t)s->buf, 64, s->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 0xffffff;
    wr.wr.ud.remote_qkey = QKEY;
    if (ibv_post_send(s->qp, &wr, &bad)) die("ibv_post_send");
    struct ibv_wc wc;
    /* A member's own datagrams come back on the same CQ. */
    for (;;) {
      if (ibv_poll_cq(s->cq, 1, &wc) != 1) continue;
      if (wc.opcode == IBV_WC_SEND) break;
      ++s->received;
      post_recv(s, (int)wc.wr_id);
    }
    if (wc.status != IBV_WC_SUCCESS) {
      fprintf(stderr, "send failed: %d\n", wc.status);
      return 1;
    }
    usleep(1000);
  }
  return 0;
}

static int run_sender(struct ibv_context* ctx, struct ibv_pd* pd, int count) {
  struct member s;
  make_member(ctx, pd, &s, 0);
  if (send_to_group(pd, &s, count)) return 1;
  printf("sent %d\n", count);
  return 0;
}

/* Adds the receive completions that arrive within `seconds` to m->received. */
static void count_received(struct member* m, double seconds) {
  for (double until = now() + seconds; now() < until;) {
    struct ibv_wc wc;
    while (ibv_poll_cq(m->cq, 1, &wc) == 1)
      if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV) ++m->received;
  }
}

static int run_loopback(struct ibv_context* ctx, struct ibv_pd* pd, int count, int block) {
  struct member sender, other;
  union ibv_gid mgid;
  memcpy(mgid.raw, kMgid, 16);
  make_member(ctx, pd, &sender, block ? IBV_QP_CREATE_BLOCK_SELF_MCAST_LB : 0);
  make_member(ctx, pd, &other, 0);
  struct member* both[2] = {&sender, &other};
  for (int i = 0; i < 2; ++i) {
    for (int s = 0; s < SLOTS; ++s) post_recv(both[i], s);
    if (ibv_attach_mcast(both[i]->qp, &mgid, MLID)) die("ibv_attach_mcast");
  }
  if (send_to_group(pd, &sender, count)) return 1;
  count_received(&sender, 0.2);
  count_received(&other, 0.2);
  printf("own %d other %d\n", sender.received, other.received);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DEVICE member NQPS EXPECT | DEVICE send COUNT\n", argv[0]);
    return 2;
  }
  struct ibv_context* ctx = open_device(argv[1]);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd");
  if (!strcmp(argv[2], "member") && argc == 5) {
    int nqps = atoi(argv[3]);
    if (nqps < 1 || nqps > MAX_QPS) return 2;
    return run_member(ctx, pd, nqps, atoi(argv[4]));
  }
  if (!strcmp(argv[2], "send")) return run_sender(ctx, pd, atoi(argv[3]));
  if (!strcmp(argv[2], "loopback"))
    return run_loopback(ctx, pd, atoi(argv[3]), argc > 4 && !strcmp(argv[4], "block"));
  return 2;
}
