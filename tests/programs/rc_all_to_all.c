/*
 * rc_all_to_all: every process talks RC to every other at once, checked
 * byte for byte. Forks -p processes; process k opens ibemu(k % 2) and
 * connects -q RC QPs to each other process. Every iteration each QP RDMA
 * WRITEs, RDMA READs and SENDs -s bytes to or from its peer, all processes
 * at the same time; then every process compares what arrived with what its
 * peers' sources held. -n iterations. Prints
 *   all_to_all procs=P qps=Q mtu=M size=S iterations=N ok MB/s=X
 * (X: bytes moved by all processes together per second of traffic) and
 * exits 0, or says what went wrong and exits 1 (2 for a bad command line).
 *
 *   rc_all_to_all [-p procs] [-q qps per peer] [-M 256..4096] [-s bytes] [-n iters]
 *
 * It is the traffic of a collective among the ranks of one node: every
 * inbox is written by every other process while its owner writes theirs.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rc_common.h"

#define MAX_PROCS 16
#define MAX_QPS 16 /* per peer */
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

enum region { SRC, DST_WRITE, DST_READ, DST_SEND, REGIONS };

/* What the processes tell each other, in memory shared before the fork. */
struct board {
  pthread_barrier_t barrier;
  uint16_t lid[MAX_PROCS];
  uint32_t rkey[MAX_PROCS];
  uint64_t base[MAX_PROCS];
  uint32_t qpn[MAX_PROCS][MAX_PROCS][MAX_QPS]; /* [owner][peer][lane] */
  pid_t pid[MAX_PROCS];
};

static int procs = 8, qps = 8, iterations = 3;
static size_t size = 65536;
static enum ibv_mtu mtu = IBV_MTU_1024;
static struct board* board;
static int me;

static void die(const char* what) {
  fprintf(stderr, "rc_all_to_all: process %d: %s\n", me, what);
  /* The others would wait at the next barrier for ever. */
  for (int k = 0; k < procs; ++k)
    if (k != me && board->pid[k] > 0) kill(board->pid[k], SIGKILL);
  exit(1);
}

/* Where region `r` of the QP toward `peer` on `lane` lies in a process's buffer. */
static size_t offset(int peer, int lane, enum region r) {
  return (((size_t)peer * MAX_QPS + (size_t)lane) * REGIONS + (size_t)r) * size;
}

static void barrier(void) { pthread_barrier_wait(&board->barrier); }

/* What process `from` sends to `to` on `lane` in iteration `it`. */
static void fill(uint8_t* p, int from, int to, int lane, int it) {
  uint64_t v =
      ((uint64_t)from << 56) ^ ((uint64_t)to << 48) ^ ((uint64_t)lane << 40) ^ ((uint64_t)it << 24);
  for (size_t i = 0; i < size; i += 8, ++v) {
    const uint64_t x = v * 0x9e3779b97f4a7c15ull;
    memcpy(p + i, &x, size - i < 8 ? size - i : 8);
  }
}

static void post(struct ibv_qp* qp, enum ibv_wr_opcode op, uint8_t* local, uint32_t lkey,
                 uint64_t remote, uint32_t rkey) {
  struct ibv_sge sge = {(uintptr_t)local, (uint32_t)size, lkey};
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED,
                           .wr.rdma = {remote, rkey}},
                     *bad;
  if (ibv_post_send(qp, &wr, &bad)) die("ibv_post_send");
}

static int run(void) {
  char name[16];
  snprintf(name, sizeof(name), "ibemu%d", me % 2);
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && list[i] && !ctx; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) ctx = ibv_open_device(list[i]);
  if (!ctx) die("no such device");
  ibv_free_device_list(list);
  const int lanes = (procs - 1) * qps;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 4 * lanes, NULL, NULL, 0);
  const size_t bytes = offset(procs, 0, SRC);
  uint8_t* buf = malloc(bytes);
  if (!pd || !cq || !buf) die("resources");
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, bytes, ACCESS);
  struct ibv_port_attr pa;
  if (!mr || ibv_query_port(ctx, 1, &pa)) die("MR or port");
  static struct ibv_qp* qp[MAX_PROCS][MAX_QPS];
  for (int peer = 0; peer < procs; ++peer)
    for (int l = 0; peer != me && l < qps; ++l) {
      struct ibv_qp_init_attr init = {
          .send_cq = cq,
          .recv_cq = cq,
          .qp_type = IBV_QPT_RC,
          .cap = {.max_send_wr = 3, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
      if (!(qp[peer][l] = ibv_create_qp(pd, &init))) die("ibv_create_qp");
      board->qpn[me][peer][l] = qp[peer][l]->qp_num;
    }
  board->lid[me] = pa.lid;
  board->rkey[me] = mr->rkey;
  board->base[me] = (uintptr_t)buf;
  barrier();
  for (int peer = 0; peer < procs; ++peer)
    for (int l = 0; peer != me && l < qps; ++l)
      if (connect_rc_qp(qp[peer][l], board->qpn[peer][me][l], board->lid[peer], mtu, 14, 7, ACCESS))
        die("connecting a QP");
  barrier();

  uint8_t* expect = malloc(size);
  if (!expect) die("memory");
  struct timespec t0, t1;
  double seconds = 0;
  for (int it = 0; it < iterations; ++it) {
    for (int peer = 0; peer < procs; ++peer)
      for (int l = 0; peer != me && l < qps; ++l) {
        fill(buf + offset(peer, l, SRC), me, peer, l, it);
        memset(buf + offset(peer, l, DST_WRITE), 0, 3 * size);
        struct ibv_sge sge = {(uintptr_t)(buf + offset(peer, l, DST_SEND)), (uint32_t)size,
                              mr->lkey};
        struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad;
        if (ibv_post_recv(qp[peer][l], &rwr, &rbad)) die("ibv_post_recv");
      }
    barrier(); /* every source filled, every receive posted */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int peer = 0; peer < procs; ++peer)
      for (int l = 0; peer != me && l < qps; ++l) {
        const uint64_t theirs = board->base[peer];
        post(qp[peer][l], IBV_WR_RDMA_WRITE, buf + offset(peer, l, SRC), mr->lkey,
             theirs + offset(me, l, DST_WRITE), board->rkey[peer]);
        post(qp[peer][l], IBV_WR_RDMA_READ, buf + offset(peer, l, DST_READ), mr->lkey,
             theirs + offset(me, l, SRC), board->rkey[peer]);
        post(qp[peer][l], IBV_WR_SEND, buf + offset(peer, l, SRC), mr->lkey, 0, 0);
      }
    struct ibv_wc wc[32];
    for (int left = 4 * lanes; left > 0;) {
      const int got = ibv_poll_cq(cq, 32, wc);
      if (got < 0) die("ibv_poll_cq");
      for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) {
          fprintf(stderr, "rc_all_to_all: process %d: %s on QP %u\n", me,
                  ibv_wc_status_str(wc[i].status), wc[i].qp_num);
          die("completion error");
        }
      left -= got;
    }
    barrier(); /* every WRITE placed, every READ of a source done */
    clock_gettime(CLOCK_MONOTONIC, &t1);
    seconds += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    for (int peer = 0; peer < procs; ++peer)
      for (int l = 0; peer != me && l < qps; ++l) {
        /* What the peer wrote, was read from and sent here: its source toward me. */
        fill(expect, peer, me, l, it);
        for (enum region r = DST_WRITE; r < REGIONS; ++r)
          if (memcmp(expect, buf + offset(peer, l, r), size)) {
            fprintf(stderr,
                    "rc_all_to_all: process %d: data from %d (lane %d, %s) differ in "
                    "iteration %d\n",
                    me, peer, l,
                    r == DST_WRITE  ? "WRITE"
                    : r == DST_READ ? "READ"
                                    : "SEND",
                    it);
            die("data differ");
          }
      }
  }
  if (me == 0) {
    const double moved = 3.0 * (double)size * procs * lanes * iterations;
    printf("all_to_all procs=%d qps=%d mtu=%d size=%zu iterations=%d ok MB/s=%.1f\n", procs, qps,
           128 << mtu, size, iterations, moved / seconds / 1e6);
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: rc_all_to_all [-p procs] [-q qps per peer] [-M 256..4096] [-s bytes] "
          "[-n iterations]\n");
  exit(2);
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "p:q:M:s:n:")) != -1) {
    switch (c) {
      case 'p':
        procs = atoi(optarg);
        if (procs < 2 || procs > MAX_PROCS) usage();
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
        if (size < 1 || size > (64u << 20)) usage();
        break;
      case 'n':
        iterations = atoi(optarg);
        if (iterations < 1) usage();
        break;
      default:
        usage();
    }
  }
  board = mmap(NULL, sizeof(*board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (board == MAP_FAILED) return 1;
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&board->barrier, &attr, (unsigned)procs);
  board->pid[0] = getpid();
  for (me = 1; me < procs; ++me) {
    const pid_t pid = fork();
    if (pid == 0) {
      board->pid[me] = getpid();
      return run();
    }
    board->pid[me] = pid;
  }
  me = 0;
  int status = run();
  for (int k = 1; k < procs; ++k) {
    int st;
    if (waitpid(board->pid[k], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) status = 1;
  }
  return status;
}
