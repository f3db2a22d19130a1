/*
 * dc_fanout: one DCI reaches 8 DCTs in 4 target processes, a different
 * target with every work request, and every byte and value is checked.
 *
 *   dc_fanout [-n wrs] [-w window] [-i DEV:PORT] [-t DEV:PORT,DEV:PORT,DEV:PORT,DEV:PORT]
 *
 * The parent forks the 4 targets, then makes the DCI on -i (default
 * ibemu0:1); target k hosts DCTs 2k and 2k+1 on the k-th port of -t
 * (default ibemu1:1,ibemu0:1,ibemu1:2,ibemu0:2: other HCAs, the DCI's own
 * HCA, other ports). Targets 0 and 2 give their two DCTs one SRQ, targets 1
 * and 3 give each DCT its own. Every DCT has its own access key and its own
 * memory region. The targets tell the parent their LID, DCT numbers,
 * addresses and rkeys over socketpairs, and learn the DCI's number.
 *
 * WR i (default 400 of them, -w of them outstanding, default 32, posted
 * 1 to 4 per ibv_wr_start..ibv_wr_complete) goes to DCT i % 8; the
 * operations rotate so that every DCT gets each of them: RDMA WRITE (into a
 * slot of its own, 1 to 8192 bytes), RDMA READ (of a region that holds a
 * known pattern), SEND (the target checks the data, byte_len, src_qp = the
 * DCI, slid and which DCT took it), atomic fetch-and-add and
 * compare-and-swap (every third with a compare value that must not match).
 * The parent checks each completion (in order, its opcode, what a READ or an
 * atomic returned); at the end every target checks its memory: each WRITE
 * slot, the untouched READ region, the counters' final values.
 *
 * Prints "dc_fanout: N WRs to 8 DCTs in 4 processes verified" and exits 0,
 * or says what failed and exits 1 (2 for a bad command line).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dc_common.h"

#define TARGETS 4
#define DCTS (2 * TARGETS)
#define MAX_LEN 8192 /* of a WRITE, READ or SEND */
#define ATOMIC_OFF 0 /* the fetch-and-add counter; the compare-and-swap word at +8 */
#define READ_OFF 64
#define READ_SIZE (2 * MAX_LEN)
#define WRITE_OFF (READ_OFF + READ_SIZE)
#define MAX_WINDOW 64
#define POLL_MS 20000

enum op { OP_WRITE, OP_READ, OP_SEND, OP_FADD, OP_CSWAP, N_OPS };
static const char* const op_names[] = {"RDMA WRITE", "RDMA READ", "SEND", "FETCH_ADD", "CMP_SWP"};

static const char* role = "dc_fanout";

/* The parent's target processes; a failing parent takes them down with it
 * (targets never do: they are forked before the list is complete). */
static pid_t children[TARGETS];
static bool is_parent;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: FAILURE: ", role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (is_parent)
    for (int k = 0; k < TARGETS; ++k)
      if (children[k] > 0) kill(children[k], SIGKILL);
  exit(1);
}

/* ---- the schedule, which the parent and every target compute alike ---- */

struct wr_plan {
  int dct, op;
  uint32_t len;
  int slot;         /* the k-th WRITE (or SEND) to this DCT */
  uint32_t roff;    /* READ: offset in the READ region */
  uint64_t add;     /* FETCH_ADD */
  uint64_t compare; /* CMP_SWP */
  uint64_t swap;    /* CMP_SWP */
  uint64_t expect;  /* what the atomic returns */
};

static uint64_t dct_key(int t) { return 0x00dc000000000001ull + (uint64_t)t * 0x1111; }
static uint64_t read_seed(int t) { return 0xdead0000ull + t; }
static uint64_t wr_seed(int i) { return 0xfa0000000ull + i; }
static uint64_t counter_start(int t) { return 0x1000000000ull * (t + 1); }
static uint64_t cswap_start(int t) { return 0xc5c5000000000000ull + t; }

/* Final values of each DCT's two atomic words, and how many WRITEs and
 * SENDs it gets, come out of the walk too. */
struct dct_totals {
  uint64_t counter, cswap;
  int writes, sends;
};

static void plan_all(struct wr_plan* p, int n, struct dct_totals* tot) {
  int cswaps[DCTS] = {0};
  for (int t = 0; t < DCTS; ++t)
    tot[t] = (struct dct_totals){.counter = counter_start(t), .cswap = cswap_start(t)};
  for (int i = 0; i < n; ++i) {
    struct wr_plan* w = &p[i];
    memset(w, 0, sizeof(*w));
    w->dct = i % DCTS;
    w->op = (i + i / DCTS) % N_OPS;
    struct dct_totals* d = &tot[w->dct];
    switch (w->op) {
      case OP_WRITE:
        w->len = 1 + (uint32_t)(i * 2654435761u % MAX_LEN);
        w->slot = d->writes++;
        break;
      case OP_READ:
        w->len = 1 + (uint32_t)(i * 40503u % MAX_LEN);
        w->roff = (uint32_t)(i * 97u % (READ_SIZE - w->len + 1));
        break;
      case OP_SEND:
        w->len = 1 + (uint32_t)(i * 7919u % MAX_LEN);
        w->slot = d->sends++;
        break;
      case OP_FADD:
        w->len = 8;
        w->add = (uint64_t)i * 0x10001 + 1;
        w->expect = d->counter;
        d->counter += w->add;
        break;
      case OP_CSWAP:
        w->len = 8;
        w->expect = d->cswap;
        w->swap = 0x5a5a000000000000ull ^ ((uint64_t)i << 20) ^ (uint64_t)i;
        if (cswaps[w->dct]++ % 3 == 2) {
          w->compare = d->cswap ^ 0x10; /* must not match: no swap */
        } else {
          w->compare = d->cswap;
          d->cswap = w->swap;
        }
        break;
    }
  }
}

/* ---- what the processes tell each other ---- */

struct dct_info {
  uint64_t addr;
  uint32_t rkey, dctn;
  uint16_t lid;
};

struct dci_info {
  uint32_t qpn;
  uint16_t lid;
};

static void parse_port(const char* text, char* dev, size_t dev_len, uint8_t* port) {
  if (dc_parse_port(text, dev, dev_len, port)) fail("bad DEV:PORT '%s'", text);
}

/* What both roles start with: the schedule of all n WRs and the port named
 * by `where` ("DEV:PORT"), opened. */
static struct wr_plan* plan_and_open(int n, struct dct_totals* tot, const char* where,
                                     struct dc_port* port) {
  struct wr_plan* plan = calloc(n, sizeof(*plan));
  if (!plan) fail("out of memory");
  plan_all(plan, n, tot);
  char dev[32];
  uint8_t port_num;
  parse_port(where, dev, sizeof(dev), &port_num);
  int err = dc_open_port(dev, port_num, port);
  if (err) fail("%s port %d: %s", dev, port_num, strerror(err));
  return plan;
}

/* ---- a target process ---- */

static int run_target(int k, int sock, const char* where, int n) {
  static char name[32];
  snprintf(name, sizeof(name), "dc_fanout target %d", k);
  role = name;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dc_watchdog("target: waiting for the DCI", 60);

  struct dct_totals tot[DCTS];
  struct dc_port port;
  struct wr_plan* plan = plan_and_open(n, tot, where, &port);
  struct ibv_pd* pd = ibv_alloc_pd(port.ctx);
  struct ibv_cq* cq = pd ? ibv_create_cq(port.ctx, 4 * n / DCTS + 64, NULL, NULL, 0) : NULL;
  if (!cq) fail("PD or CQ: %s", strerror(errno));

  const int shared = k % 2 == 0;
  struct ibv_srq* srq[2] = {NULL, NULL};
  struct ibv_qp* dct[2];
  struct ibv_mr* mr[2];
  uint8_t* mem[2];
  size_t mem_len[2];
  int recvs = 0;
  for (int j = 0; j < 2; ++j) recvs += tot[2 * k + j].sends;
  uint8_t* rbuf = calloc(recvs ? recvs : 1, MAX_LEN);
  struct ibv_mr* rmr =
      rbuf ? ibv_reg_mr(pd, rbuf, (recvs ? recvs : 1) * (size_t)MAX_LEN, IBV_ACCESS_LOCAL_WRITE)
           : NULL;
  if (!rmr) fail("receive buffers: %s", strerror(errno));

  for (int j = 0; j < 2; ++j) {
    const int t = 2 * k + j;
    if (j == 0 || !shared) {
      struct ibv_srq_init_attr sa = {.attr = {.max_wr = recvs + 1, .max_sge = 1}};
      srq[j] = ibv_create_srq(pd, &sa);
      if (!srq[j]) fail("ibv_create_srq: %s", strerror(errno));
    } else {
      srq[j] = srq[0];
    }
    mem_len[j] = WRITE_OFF + (size_t)(tot[t].writes ? tot[t].writes : 1) * MAX_LEN;
    if (posix_memalign((void**)&mem[j], 4096, mem_len[j])) fail("out of memory");
    uint64_t* words = (uint64_t*)(mem[j] + ATOMIC_OFF);
    memset(mem[j], 0, READ_OFF);
    words[0] = counter_start(t);
    words[1] = cswap_start(t);
    dc_fill(mem[j] + READ_OFF, READ_SIZE, read_seed(t), 0, 0);
    /* Each WRITE slot starts as the complement of what will land in it. */
    for (int i = 0; i < n; ++i)
      if (plan[i].dct == t && plan[i].op == OP_WRITE)
        dc_fill(mem[j] + WRITE_OFF + (size_t)plan[i].slot * MAX_LEN, MAX_LEN, wr_seed(i), 0, 1);
    mr[j] = ibv_reg_mr(pd, mem[j], mem_len[j],
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr[j]) fail("ibv_reg_mr: %s", strerror(errno));
    dct[j] = dc_create_dct(port.ctx, pd, cq, srq[j], dct_key(t));
    if (!dct[j]) fail("mlx5dv_create_qp (DCT %d): %s", t, strerror(errno));
    int err = dc_dct_ready(
        dct[j], &port, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    if (err) fail("DCT %d RESET->INIT->RTR: %s", t, strerror(err));
  }
  /* Every receive the schedule needs, posted before anyone sends. */
  for (int r = 0; r < recvs; ++r) {
    const int j = shared ? 0 : r >= tot[2 * k].sends;
    struct ibv_sge sge = {(uintptr_t)(rbuf + (size_t)r * MAX_LEN), MAX_LEN, rmr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)r, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_srq_recv(srq[j], &wr, &bad)) fail("ibv_post_srq_recv");
  }

  struct dct_info info[2];
  for (int j = 0; j < 2; ++j)
    info[j] = (struct dct_info){
        .addr = (uintptr_t)mem[j], .rkey = mr[j]->rkey, .dctn = dct[j]->qp_num, .lid = port.lid};
  struct dci_info dci;
  if (dc_write_full(sock, info, sizeof(info)) || dc_read_full(sock, &dci, sizeof(dci)))
    fail("talking to the parent");
  printf("%s: DCTs 0x%06x 0x%06x on %s, LID %u, %s SRQ%s\n", role, dct[0]->qp_num, dct[1]->qp_num,
         where, port.lid, shared ? "one shared" : "one", shared ? "" : " each");

  /* The SENDs: the k-th receive on DCT t is the k-th SEND the schedule sends
   * it, whichever SRQ WQE took it. */
  int next_send[2] = {0, 0}, received = 0, failures = 0;
  int* send_wr[2];
  for (int j = 0; j < 2; ++j) {
    send_wr[j] = calloc(tot[2 * k + j].sends + 1, sizeof(int));
    for (int i = 0, s = 0; i < n; ++i)
      if (plan[i].dct == 2 * k + j && plan[i].op == OP_SEND) send_wr[j][s++] = i;
  }
  uint32_t done;
  dc_watchdog("target: receiving SENDs", 60);
  while (received < recvs) {
    struct ibv_wc wc;
    int got = dc_poll_one(cq, &wc, POLL_MS);
    if (got <= 0) fail("%d of %d receives completed", received, recvs);
    received++;
    const int j = wc.qp_num == dct[0]->qp_num ? 0 : wc.qp_num == dct[1]->qp_num ? 1 : -1;
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || j < 0) {
      fprintf(stderr, "%s: FAILURE: receive: %s, opcode %d, qp_num 0x%x\n", role,
              ibv_wc_status_str(wc.status), wc.opcode, wc.qp_num);
      failures++;
      continue;
    }
    if (next_send[j] >= tot[2 * k + j].sends) {
      fprintf(stderr, "%s: FAILURE: DCT 0x%x received more SENDs than were sent to it\n", role,
              wc.qp_num);
      failures++;
      continue;
    }
    const int i = send_wr[j][next_send[j]++];
    const uint8_t* data = rbuf + wc.wr_id * MAX_LEN;
    long bad;
    if (wc.src_qp != dci.qpn || wc.slid != dci.lid) {
      fprintf(stderr, "%s: FAILURE: SEND of WR %d: src_qp 0x%x slid %u, want the DCI 0x%x LID %u\n",
              role, i, wc.src_qp, wc.slid, dci.qpn, dci.lid);
      failures++;
    } else if (wc.byte_len != plan[i].len) {
      fprintf(stderr, "%s: FAILURE: SEND of WR %d: %u bytes, want %u\n", role, i, wc.byte_len,
              plan[i].len);
      failures++;
    } else if ((bad = dc_check(data, plan[i].len, wr_seed(i), 0, 0)) >= 0) {
      fprintf(stderr, "%s: FAILURE: SEND of WR %d: byte %ld wrong\n", role, i, bad);
      failures++;
    }
  }
  /* The parent says when its last WR completed; then the memory is final. */
  dc_watchdog("target: waiting for the parent's end", 60);
  if (dc_read_full(sock, &done, sizeof(done))) fail("the parent went away");
  for (int j = 0; j < 2; ++j) {
    const int t = 2 * k + j;
    const uint64_t* words = (const uint64_t*)(mem[j] + ATOMIC_OFF);
    long bad;
    if (words[0] != tot[t].counter || words[1] != tot[t].cswap) {
      fprintf(stderr,
              "%s: FAILURE: DCT %d: counter 0x%" PRIx64 " (want 0x%" PRIx64
              "), compare-and-swap "
              "word 0x%" PRIx64 " (want 0x%" PRIx64 ")\n",
              role, t, words[0], tot[t].counter, words[1], tot[t].cswap);
      failures++;
    }
    if ((bad = dc_check(mem[j] + READ_OFF, READ_SIZE, read_seed(t), 0, 0)) >= 0) {
      fprintf(stderr, "%s: FAILURE: DCT %d: READ region changed at %ld\n", role, t, bad);
      failures++;
    }
    for (int i = 0; i < n; ++i) {
      if (plan[i].dct != t || plan[i].op != OP_WRITE) continue;
      const uint8_t* slot = mem[j] + WRITE_OFF + (size_t)plan[i].slot * MAX_LEN;
      if ((bad = dc_check(slot, plan[i].len, wr_seed(i), 0, 0)) >= 0 ||
          (bad = dc_check(slot + plan[i].len, MAX_LEN - plan[i].len, wr_seed(i), plan[i].len, 1)) >=
              0) {
        fprintf(stderr, "%s: FAILURE: DCT %d: WRITE of WR %d (%u bytes) wrong in its slot\n", role,
                t, i, plan[i].len);
        failures++;
      }
    }
  }
  for (int j = 0; j < 2; ++j) {
    ibv_destroy_qp(dct[j]);
    if (j == 0 || !shared) ibv_destroy_srq(srq[j]);
    ibv_dereg_mr(mr[j]);
  }
  ibv_dereg_mr(rmr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(port.ctx);
  const uint32_t result = failures;
  dc_write_full(sock, &result, sizeof(result));
  if (!failures)
    printf("%s: %d SENDs and every WRITE, READ region and atomic word verified\n", role, recvs);
  return failures ? 1 : 0;
}

/* ---- the DCI (the parent) ---- */

static const enum ibv_wc_opcode wc_opcode[N_OPS] = {
    IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_SEND, IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP};

int main(int argc, char** argv) {
  int n = 400, window = 32, c;
  const char* dci_where = "ibemu0:1";
  char targets_arg[256] = "ibemu1:1,ibemu0:1,ibemu1:2,ibemu0:2";
  while ((c = getopt(argc, argv, "n:w:i:t:")) != -1) {
    switch (c) {
      case 'n':
        n = atoi(optarg);
        break;
      case 'w':
        window = atoi(optarg);
        break;
      case 'i':
        dci_where = optarg;
        break;
      case 't':
        snprintf(targets_arg, sizeof(targets_arg), "%s", optarg);
        break;
      default:
        fprintf(stderr, "usage: %s [-n wrs] [-w window] [-i DEV:PORT] [-t DEV:PORT x4]\n", argv[0]);
        return 2;
    }
  }
  const char* where[TARGETS];
  char* save = NULL;
  for (int k = 0; k < TARGETS; ++k) {
    where[k] = strtok_r(k ? NULL : targets_arg, ",", &save);
    if (!where[k]) {
      fprintf(stderr, "dc_fanout: -t needs %d DEV:PORT, comma-separated\n", TARGETS);
      return 2;
    }
  }
  char dev_check[32];
  uint8_t port_check;
  for (int k = 0; k <= TARGETS; ++k) {
    const char* w = k < TARGETS ? where[k] : dci_where;
    if (dc_parse_port(w, dev_check, sizeof(dev_check), &port_check)) {
      fprintf(stderr, "dc_fanout: bad DEV:PORT '%s'\n", w);
      return 2;
    }
  }
  if (n < 5 * DCTS || window < 1 || window > MAX_WINDOW) {
    fprintf(stderr, "dc_fanout: -n must be at least %d, -w 1 to %d\n", 5 * DCTS, MAX_WINDOW);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  /* The targets first, before this process opens anything. */
  int socks[TARGETS];
  is_parent = true;
  for (int k = 0; k < TARGETS; ++k) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) fail("socketpair");
    fflush(NULL);
    children[k] = fork();
    if (children[k] < 0) fail("fork");
    if (children[k] == 0) {
      is_parent = false;
      close(sv[0]);
      for (int j = 0; j < k; ++j) close(socks[j]);
      _exit(run_target(k, sv[1], where[k], n));
    }
    close(sv[1]);
    socks[k] = sv[0];
  }
  role = "dc_fanout DCI";
  dc_watchdog("DCI: setting up", 60);

  struct dct_totals tot[DCTS];
  struct dc_port port;
  struct wr_plan* plan = plan_and_open(n, tot, dci_where, &port);
  struct ibv_device_attr dattr;
  if (ibv_query_device(port.ctx, &dattr)) fail("ibv_query_device");
  struct ibv_pd* pd = ibv_alloc_pd(port.ctx);
  struct ibv_cq* cq = pd ? ibv_create_cq(port.ctx, 2 * MAX_WINDOW, NULL, NULL, 0) : NULL;
  uint8_t* local = NULL;
  if (posix_memalign((void**)&local, 4096, (size_t)window * MAX_LEN)) fail("memory");
  struct ibv_mr* mr =
      cq ? ibv_reg_mr(pd, local, (size_t)window * MAX_LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (!mr) fail("PD, CQ or MR: %s", strerror(errno));
  struct ibv_qp* dci =
      dc_create_dci(port.ctx, pd, cq, MAX_WINDOW, 1,
                    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
  if (!dci) fail("mlx5dv_create_qp (DCI): %s", strerror(errno));
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(dci);
  struct mlx5dv_qp_ex* mqpx = qpx ? mlx5dv_qp_ex_from_ibv_qp_ex(qpx) : NULL;
  if (!mqpx) fail("the DCI has no mlx5dv_qp_ex");
  struct dc_dci_attr attr = dc_dci_defaults;
  attr.max_rd_atomic =
      dattr.max_qp_rd_atom < 16 ? (dattr.max_qp_rd_atom ? dattr.max_qp_rd_atom : 1) : 16;
  int err = dc_dci_ready(dci, &port, &attr);
  if (err) fail("DCI RESET->INIT->RTR->RTS: %s", strerror(err));

  struct dct_info info[DCTS];
  struct ibv_ah* ah[DCTS];
  const struct dci_info me = {.qpn = dci->qp_num, .lid = port.lid};
  for (int k = 0; k < TARGETS; ++k) {
    if (dc_read_full(socks[k], &info[2 * k], 2 * sizeof(info[0])))
      fail("target %d did not set up (see its message)", k);
    if (dc_write_full(socks[k], &me, sizeof(me))) fail("talking to target %d", k);
  }
  for (int t = 0; t < DCTS; ++t) {
    ah[t] = dc_create_ah(pd, &port, info[t].lid);
    if (!ah[t]) fail("ibv_create_ah toward LID %u: %s", info[t].lid, strerror(errno));
  }
  printf("%s: DCI 0x%06x on %s, LID %u: %d WRs over 8 DCTs, %d outstanding\n", role, dci->qp_num,
         dci_where, port.lid, n, window);

  int posted = 0, completed = 0, regions = 0;
  int per_op[N_OPS] = {0};
  while (completed < n) {
    dc_watchdog("DCI: posting and polling", 60);
    /* 1 to 4 WRs per region, as long as the window has room. */
    int batch = 1 + regions % 4;
    if (batch > window - (posted - completed)) batch = window - (posted - completed);
    if (batch > n - posted) batch = n - posted;
    if (batch > 0) {
      ibv_wr_start(qpx);
      for (int b = 0; b < batch; ++b) {
        const int i = posted + b;
        const struct wr_plan* w = &plan[i];
        const struct dct_info* d = &info[w->dct];
        uint8_t* buf = local + (size_t)(i % window) * MAX_LEN;
        qpx->wr_id = (uint64_t)i;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        switch (w->op) {
          case OP_WRITE:
            dc_fill(buf, w->len, wr_seed(i), 0, 0);
            ibv_wr_rdma_write(qpx, d->rkey, d->addr + WRITE_OFF + (uint64_t)w->slot * MAX_LEN);
            break;
          case OP_READ:
            dc_fill(buf, w->len, read_seed(w->dct), w->roff, 1);
            ibv_wr_rdma_read(qpx, d->rkey, d->addr + READ_OFF + w->roff);
            break;
          case OP_SEND:
            dc_fill(buf, w->len, wr_seed(i), 0, 0);
            ibv_wr_send(qpx);
            break;
          case OP_FADD:
            memset(buf, 0xee, 8);
            ibv_wr_atomic_fetch_add(qpx, d->rkey, d->addr + ATOMIC_OFF, w->add);
            break;
          case OP_CSWAP:
            memset(buf, 0xee, 8);
            ibv_wr_atomic_cmp_swp(qpx, d->rkey, d->addr + ATOMIC_OFF + 8, w->compare, w->swap);
            break;
        }
        ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf, w->len);
        mlx5dv_wr_set_dc_addr(mqpx, ah[w->dct], d->dctn, dct_key(w->dct));
      }
      if ((err = ibv_wr_complete(qpx)))
        fail("ibv_wr_complete of WRs %d..%d: %s", posted, posted + batch - 1, strerror(err));
      posted += batch;
      regions++;
    }
    /* Take what has completed; wait only when the window is full or all
     * WRs are posted. */
    const int must_wait = posted - completed == window || posted == n;
    struct ibv_wc wc;
    int got = must_wait ? dc_poll_one(cq, &wc, POLL_MS) : ibv_poll_cq(cq, 1, &wc);
    if (got < 0) fail("ibv_poll_cq");
    if (got == 0) {
      if (must_wait) fail("WR %d did not complete within %d ms", completed, POLL_MS);
      continue;
    }
    const int i = completed++;
    const struct wr_plan* w = &plan[i];
    const uint8_t* buf = local + (size_t)(i % window) * MAX_LEN;
    if (wc.status != IBV_WC_SUCCESS)
      fail("WR %d (%s to DCT %d) completed with %s (%d)", i, op_names[w->op], w->dct,
           ibv_wc_status_str(wc.status), wc.status);
    if (wc.wr_id != (uint64_t)i)
      fail("completion of WR %" PRIu64 " where WR %d was next", wc.wr_id, i);
    if (wc.opcode != wc_opcode[w->op])
      fail("WR %d (%s) completed as opcode %d", i, op_names[w->op], wc.opcode);
    long bad;
    uint64_t value;
    switch (w->op) {
      case OP_READ:
        if ((bad = dc_check(buf, w->len, read_seed(w->dct), w->roff, 0)) >= 0)
          fail("WR %d: READ of %u bytes at %u from DCT %d wrong at byte %ld", i, w->len, w->roff,
               w->dct, bad);
        break;
      case OP_FADD:
      case OP_CSWAP:
        memcpy(&value, buf, 8);
        if (value != w->expect)
          fail("WR %d: %s on DCT %d returned 0x%" PRIx64 ", want 0x%" PRIx64, i, op_names[w->op],
               w->dct, value, w->expect);
        break;
    }
    per_op[w->op]++;
  }
  const int state = dc_qp_state(dci);
  if (state != IBV_QPS_RTS) fail("the DCI is in %s after the run", dc_state_str(state));
  printf(
      "%s: all %d WRs completed in order: %d WRITE, %d READ, %d SEND, %d FETCH_ADD, "
      "%d CMP_SWP\n",
      role, n, per_op[OP_WRITE], per_op[OP_READ], per_op[OP_SEND], per_op[OP_FADD],
      per_op[OP_CSWAP]);

  /* The targets check their memory and report. */
  int failed = 0;
  for (int k = 0; k < TARGETS; ++k) {
    const uint32_t done = 1;
    uint32_t result = 1;
    dc_watchdog("DCI: waiting for the targets' checks", 60);
    if (dc_write_full(socks[k], &done, sizeof(done)) ||
        dc_read_full(socks[k], &result, sizeof(result))) {
      fprintf(stderr, "%s: FAILURE: target %d did not report\n", role, k);
      failed = 1;
    } else if (result) {
      fprintf(stderr, "%s: FAILURE: target %d found %u errors\n", role, k, result);
      failed = 1;
    }
  }
  for (int k = 0; k < TARGETS; ++k) {
    int status;
    if (waitpid(children[k], &status, 0) != children[k] || !WIFEXITED(status) ||
        WEXITSTATUS(status)) {
      fprintf(stderr, "%s: FAILURE: target %d ended with status 0x%x\n", role, k, status);
      failed = 1;
    }
    children[k] = 0;
  }
  dc_watchdog("", 0);
  for (int t = 0; t < DCTS; ++t) ibv_destroy_ah(ah[t]);
  ibv_destroy_qp(dci);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(port.ctx);
  if (failed) return 1;
  printf("dc_fanout: %d WRs to 8 DCTs in 4 processes verified\n", n);
  return 0;
}
