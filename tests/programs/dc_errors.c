/*
 * dc_errors: how DC fails, and that it recovers.
 *
 *   dc_errors [-i DEV:PORT] [-t DEV:PORT] [CASE...]
 *
 * CASE is one of the names below, or "all" (the default): each runs in a
 * process of its own. DCIs are on -i (default ibemu1:1), DCTs on -t (default
 * ibemu0:1). A DCI "succeeds" when an RDMA WRITE of a pattern completes and
 * an RDMA READ of the same bytes brings the pattern back.
 *
 *   key        a WRITE with the wrong DC access key completes
 *              IBV_WC_REM_ACCESS_ERR and leaves the DCI in ERR; after RESET ->
 *              INIT -> RTR -> RTS the DCI succeeds with the right key
 *   nodct      a WRITE to a DCT number nobody has (DCI timeout 10, retry_cnt 2)
 *              completes IBV_WC_RETRY_EXC_ERR, DCI in ERR; recovered, it
 *              succeeds with a real DCT
 *   destroyed  a target process destroys its DCT while the DCI streams WRITEs
 *              to it: the WRs before complete, the first one left completes
 *              IBV_WC_RETRY_EXC_ERR and every one after it IBV_WC_WR_FLUSH_ERR
 *              (WRs posted after the error too); recovered, the DCI succeeds
 *              with the target's other DCT
 *   rkey       a WRITE with a wrong rkey completes IBV_WC_REM_ACCESS_ERR; the
 *              DCT goes on serving: a second DCI succeeds with it before and
 *              after, and so does the first once recovered
 *   dct_states the Linux mlx5 driver's rules for a DCT (drivers/infiniband/
 *              hw/mlx5/qp.c, mlx5_ib_modify_dct): exactly STATE|PKEY_INDEX|
 *              PORT|ACCESS_FLAGS for INIT, exactly STATE|AV|PATH_MTU|
 *              MIN_RNR_TIMER for RTR, RTS refused (each EINVAL);
 *              ibv_post_send and ibv_post_recv on a DCT fail and leave it RTR
 *   dct_stays_rtr
 *              mlx5_ib_modify_dct knows only RESET -> INIT and INIT -> RTR:
 *              a DCT in RTR refuses ERR and RESET (EINVAL) and stays RTR
 *   dci_states the driver's rules for a DCI (modify_dci_qp_is_ok): RESET ->
 *              INIT with ACCESS_FLAGS, INIT -> RTR without PATH_MTU and
 *              RTR -> RTS without MAX_QP_RD_ATOMIC are refused (EINVAL); the
 *              right masks are accepted
 *
 * Prints "ok CASE: ..." for every check that passed and "FAIL CASE: ..." for
 * one that did not, then "dc_errors: all N cases passed" and exits 0, or
 * "dc_errors: FAILED: CASE..." and exits 1 (2 for a bad command line).
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

#define KEY 0x00dce5500000beefull
#define SLOT 8192 /* of target memory per DCT */
#define LEN 3000  /* bytes a check moves */
#define NO_SUCH_DCT 0xfffff0
#define POLL_MS 20000

static const char* target_where = "ibemu0:1";
static const char* initiator_where = "ibemu1:1";
static const char* current = "dc_errors";

static void ok(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("ok %s: ", current);
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
}

/* Prints the failure; returns -1 for `return bad(...)`. */
static int bad(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", current);
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
  fflush(stdout);
  return -1;
}

/* ---- a target: DCTs on one SRQ, a memory region of SLOT bytes per DCT ---- */

struct target {
  struct dc_port port;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_srq* srq;
  struct ibv_qp* dct[2];
  struct ibv_mr* mr;
  uint8_t* buf;
};

/* Where a DCI sends to reach one DCT and its memory. */
struct remote {
  uint64_t addr;
  uint32_t rkey, dctn;
  uint16_t lid;
};

static int open_target(struct target* t, int ndct) {
  char dev[32];
  uint8_t port;
  memset(t, 0, sizeof(*t));
  if (dc_parse_port(target_where, dev, sizeof(dev), &port)) return bad("bad -t %s", target_where);
  int err = dc_open_port(dev, port, &t->port);
  if (err) return bad("%s: %s", target_where, strerror(err));
  t->pd = ibv_alloc_pd(t->port.ctx);
  t->cq = t->pd ? ibv_create_cq(t->port.ctx, 16, NULL, NULL, 0) : NULL;
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
  t->srq = t->cq ? ibv_create_srq(t->pd, &sa) : NULL;
  if (!t->srq || posix_memalign((void**)&t->buf, 4096, 2 * SLOT))
    return bad("target PD, CQ or SRQ: %s", strerror(errno));
  memset(t->buf, 0, 2 * SLOT);
  t->mr = ibv_reg_mr(t->pd, t->buf, 2 * SLOT,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!t->mr) return bad("target ibv_reg_mr: %s", strerror(errno));
  for (int j = 0; j < ndct; ++j) {
    t->dct[j] = dc_create_dct(t->port.ctx, t->pd, t->cq, t->srq, KEY);
    if (!t->dct[j]) return bad("mlx5dv_create_qp (DCT): %s", strerror(errno));
    err = dc_dct_ready(t->dct[j], &t->port, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (err) return bad("DCT RESET->INIT->RTR: %s", strerror(err));
  }
  return 0;
}

static struct remote remote_of(const struct target* t, int j) {
  return (struct remote){.addr = (uintptr_t)(t->buf + j * SLOT),
                         .rkey = t->mr->rkey,
                         .dctn = t->dct[j]->qp_num,
                         .lid = t->port.lid};
}

/* ---- an initiator: one DCI with its own context ---- */

struct initiator {
  struct dc_port port;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* dci;
  struct ibv_qp_ex* qpx;
  struct mlx5dv_qp_ex* mqpx;
  struct ibv_mr* mr;
  uint8_t* buf; /* 2 * LEN: what is written, then what is read back */
  struct ibv_ah* ah;
  uint16_t ah_lid;
  struct dc_dci_attr attr;
};

static int open_initiator(struct initiator* in, const struct dc_dci_attr* attr) {
  char dev[32];
  uint8_t port;
  memset(in, 0, sizeof(*in));
  if (dc_parse_port(initiator_where, dev, sizeof(dev), &port))
    return bad("bad -i %s", initiator_where);
  int err = dc_open_port(dev, port, &in->port);
  if (err) return bad("%s: %s", initiator_where, strerror(err));
  in->pd = ibv_alloc_pd(in->port.ctx);
  in->cq = in->pd ? ibv_create_cq(in->port.ctx, 64, NULL, NULL, 0) : NULL;
  if (!in->cq || posix_memalign((void**)&in->buf, 4096, 2 * LEN))
    return bad("initiator PD or CQ: %s", strerror(errno));
  in->mr = ibv_reg_mr(in->pd, in->buf, 2 * LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!in->mr) return bad("initiator ibv_reg_mr: %s", strerror(errno));
  in->dci = dc_create_dci(in->port.ctx, in->pd, in->cq, 32, 1,
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ);
  if (!in->dci) return bad("mlx5dv_create_qp (DCI): %s", strerror(errno));
  in->qpx = ibv_qp_to_qp_ex(in->dci);
  in->mqpx = in->qpx ? mlx5dv_qp_ex_from_ibv_qp_ex(in->qpx) : NULL;
  if (!in->mqpx) return bad("the DCI has no mlx5dv_qp_ex");
  in->attr = *attr;
  if ((err = dc_dci_ready(in->dci, &in->port, &in->attr)))
    return bad("DCI RESET->INIT->RTR->RTS: %s", strerror(err));
  return 0;
}

static struct ibv_ah* ah_toward(struct initiator* in, uint16_t lid) {
  if (in->ah && in->ah_lid == lid) return in->ah;
  if (in->ah) ibv_destroy_ah(in->ah);
  in->ah = dc_create_ah(in->pd, &in->port, lid);
  in->ah_lid = lid;
  return in->ah;
}

/* One signaled RDMA WRITE (or READ) of LEN bytes between the local buffer
 * at `local` and r->addr. ibv_wr_complete's result. */
static int post_rdma(struct initiator* in, int read, const struct remote* r, uint64_t key,
                     uint32_t rkey, size_t local, uint64_t wr_id) {
  struct ibv_ah* ah = ah_toward(in, r->lid);
  if (!ah) return errno ? errno : EINVAL;
  ibv_wr_start(in->qpx);
  in->qpx->wr_id = wr_id;
  in->qpx->wr_flags = IBV_SEND_SIGNALED;
  if (read)
    ibv_wr_rdma_read(in->qpx, rkey, r->addr);
  else
    ibv_wr_rdma_write(in->qpx, rkey, r->addr);
  ibv_wr_set_sge(in->qpx, in->mr->lkey, (uintptr_t)(in->buf + local), LEN);
  mlx5dv_wr_set_dc_addr(in->mqpx, ah, r->dctn, key);
  return ibv_wr_complete(in->qpx);
}

/* The next completion is `wr_id` with status `want`. */
static int expect_wc(struct initiator* in, uint64_t wr_id, enum ibv_wc_status want,
                     const char* what) {
  struct ibv_wc wc;
  int n = dc_poll_one(in->cq, &wc, POLL_MS);
  if (n < 0) return bad("%s: ibv_poll_cq failed", what);
  if (n == 0) return bad("%s: no completion within %d ms", what, POLL_MS);
  if (wc.wr_id != wr_id)
    return bad("%s: completion of wr_id %" PRIu64 ", want %" PRIu64, what, wc.wr_id, wr_id);
  if (wc.status != want)
    return bad("%s: completed with %s (%d), want %s (%d)", what, ibv_wc_status_str(wc.status),
               wc.status, ibv_wc_status_str(want), want);
  return 0;
}

static int expect_state(struct ibv_qp* qp, int want, const char* what) {
  const int s = dc_qp_state(qp);
  if (s != want)
    return bad("%s: ibv_query_qp says %s (%d), want %s", what,
               s < 0 ? strerror(errno) : dc_state_str(s), s, dc_state_str(want));
  ok("%s: %s", what, dc_state_str(s));
  return 0;
}

/* WRITE a pattern of `seed` to r, READ it back and compare. */
static int write_and_verify(struct initiator* in, const struct remote* r, uint64_t seed,
                            const char* what) {
  int err;
  dc_fill(in->buf, LEN, seed, 0, 0);
  dc_fill(in->buf + LEN, LEN, seed, 0, 1);
  if ((err = post_rdma(in, 0, r, KEY, r->rkey, 0, seed)))
    return bad("%s: posting the WRITE: %s", what, strerror(err));
  if (expect_wc(in, seed, IBV_WC_SUCCESS, what)) return -1;
  if ((err = post_rdma(in, 1, r, KEY, r->rkey, LEN, seed + 1)))
    return bad("%s: posting the READ: %s", what, strerror(err));
  if (expect_wc(in, seed + 1, IBV_WC_SUCCESS, what)) return -1;
  long off = dc_check(in->buf + LEN, LEN, seed, 0, 0);
  if (off >= 0) return bad("%s: the READ brought back a different byte %ld", what, off);
  ok("%s: DCI 0x%06x WRITE + READ of %d bytes to DCT 0x%06x verified", what, in->dci->qp_num, LEN,
     r->dctn);
  return 0;
}

static int recover(struct initiator* in, const char* what) {
  int err = dc_dci_recover(in->dci, &in->port, &in->attr);
  if (err) return bad("%s: RESET->INIT->RTR->RTS: %s", what, strerror(err));
  return expect_state(in->dci, IBV_QPS_RTS, what);
}

/* ---- the cases ---- */

static int case_key(void) {
  struct target t;
  struct initiator in;
  if (open_target(&t, 1) || open_initiator(&in, &dc_dci_defaults)) return -1;
  const struct remote r = remote_of(&t, 0);
  /* The first WR of a fresh DCI: it must not ride a connection that the
   * right key opened. */
  dc_fill(in.buf, LEN, 1, 0, 0);
  int err = post_rdma(&in, 0, &r, KEY ^ 0x1, r.rkey, 0, 100);
  if (err) return bad("posting: %s", strerror(err));
  if (expect_wc(&in, 100, IBV_WC_REM_ACCESS_ERR, "WRITE with the wrong DC key")) return -1;
  ok("WRITE with the wrong DC key: remote access error");
  if (dc_check(t.buf, LEN, 1, 0, 0) < 0) return bad("the wrong key's WRITE reached memory");
  if (expect_state(in.dci, IBV_QPS_ERR, "DCI after the wrong key")) return -1;
  if (recover(&in, "DCI recovered")) return -1;
  return write_and_verify(&in, &r, 0x1000, "right key after recovery");
}

static int case_nodct(void) {
  struct target t;
  struct initiator in;
  struct dc_dci_attr quick = dc_dci_defaults;
  quick.timeout = 10; /* 4.2 ms */
  quick.retry_cnt = 2;
  if (open_target(&t, 1) || open_initiator(&in, &quick)) return -1;
  const struct remote real = remote_of(&t, 0);
  struct remote none = real;
  none.dctn = NO_SUCH_DCT;
  if (none.dctn == real.dctn) none.dctn--;
  const uint64_t start = dc_now_ms();
  int err = post_rdma(&in, 0, &none, KEY, none.rkey, 0, 200);
  if (err) return bad("posting: %s", strerror(err));
  if (expect_wc(&in, 200, IBV_WC_RETRY_EXC_ERR, "WRITE to DCT 0xfffff0")) return -1;
  ok("WRITE to a DCT number nobody has: transport retry counter exceeded after %" PRIu64 " ms",
     dc_now_ms() - start);
  if (expect_state(in.dci, IBV_QPS_ERR, "DCI after the retries")) return -1;
  if (recover(&in, "DCI recovered")) return -1;
  return write_and_verify(&in, &real, 0x2000, "a real DCT after recovery");
}

/* The target process of case "destroyed": DCTs A and B; destroys A on 'D'
 * (answers 'd'), ends on 'Q'. */
static int destroyed_target(int sock) {
  struct target t;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (open_target(&t, 2)) return 1;
  struct remote r[2] = {remote_of(&t, 0), remote_of(&t, 1)};
  if (dc_write_full(sock, r, sizeof(r))) return 1;
  for (;;) {
    char c;
    if (dc_read_full(sock, &c, 1)) return 1;
    if (c == 'Q') return 0;
    if (c == 'D') {
      int err = ibv_destroy_qp(t.dct[0]);
      if (err) {
        bad("target: ibv_destroy_qp of DCT 0x%06x: %s", r[0].dctn, strerror(err));
        return 1;
      }
      ok("target destroyed DCT 0x%06x", r[0].dctn);
      fflush(stdout);
      if (dc_write_full(sock, "d", 1)) return 1;
    }
  }
}

static int case_destroyed(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return bad("socketpair: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return bad("fork: %s", strerror(errno));
  if (pid == 0) {
    close(sv[0]);
    _exit(destroyed_target(sv[1]));
  }
  close(sv[1]);
  const int sock = sv[0];
  int result = -1;
  struct remote r[2];
  struct initiator in;
  struct dc_dci_attr quick = dc_dci_defaults;
  quick.timeout = 10;
  quick.retry_cnt = 2;
  if (dc_read_full(sock, r, sizeof(r))) {
    bad("the target process did not set up");
    goto out;
  }
  if (open_initiator(&in, &quick)) goto out;

  /* Up to 8 WRITEs to A outstanding; after 32 have completed, the target is
   * told to destroy A, and the stream goes on until a WR fails. */
  enum { WINDOW = 8, BEFORE = 32, AFTER = 4, MAX_WRS = 1000000 };
  int posted = 0, completed = 0, succeeded = 0, flushed = 0, told = 0;
  long failed_wr = -1;
  dc_fill(in.buf, LEN, 3, 0, 0);
  while (failed_wr < 0 || completed < posted) {
    while (failed_wr < 0 && posted - completed < WINDOW && posted < MAX_WRS) {
      int err = post_rdma(&in, 0, &r[0], KEY, r[0].rkey, 0, (uint64_t)posted);
      if (err) {
        bad("posting WR %d: %s", posted, strerror(err));
        goto out;
      }
      posted++;
    }
    struct ibv_wc wc;
    int n = dc_poll_one(in.cq, &wc, POLL_MS);
    if (n <= 0) {
      bad("WR %d did not complete within %d ms", completed, POLL_MS);
      goto out;
    }
    if (wc.wr_id != (uint64_t)completed) {
      bad("completion of WR %" PRIu64 " where WR %d was next", wc.wr_id, completed);
      goto out;
    }
    completed++;
    if (failed_wr < 0 && wc.status == IBV_WC_SUCCESS) {
      if (++succeeded == BEFORE) {
        if (dc_write_full(sock, "D", 1)) {
          bad("the target process went away");
          goto out;
        }
        told = 1;
      }
      continue;
    }
    if (failed_wr < 0) {
      if (!told || wc.status != IBV_WC_RETRY_EXC_ERR) {
        bad("WR %" PRIu64 " completed with %s (%d)%s", wc.wr_id, ibv_wc_status_str(wc.status),
            wc.status, told ? ", want transport retry counter exceeded" : " before the destroy");
        goto out;
      }
      failed_wr = (long)wc.wr_id;
      ok("%d WRITEs succeeded, then WR %ld: transport retry counter exceeded", succeeded,
         failed_wr);
      /* These go to a DCI in ERR: flushed too. */
      for (int k = 0; k < AFTER; ++k, ++posted) {
        int err = post_rdma(&in, 0, &r[0], KEY, r[0].rkey, 0, (uint64_t)posted);
        if (err) {
          bad("posting WR %d after the error: %s", posted, strerror(err));
          goto out;
        }
      }
      continue;
    }
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      bad("WR %" PRIu64 " after the failed one completed with %s (%d), want flushed", wc.wr_id,
          ibv_wc_status_str(wc.status), wc.status);
      goto out;
    }
    flushed++;
  }
  if (failed_wr < 0) {
    bad("%d WRs to a destroyed DCT all succeeded", posted);
    goto out;
  }
  ok("the %d WRs after it were flushed (%d of them posted after the error)", flushed, AFTER);
  char c;
  if (dc_read_full(sock, &c, 1) || c != 'd') {
    bad("the target did not confirm the destroy");
    goto out;
  }
  if (expect_state(in.dci, IBV_QPS_ERR, "DCI after the destroyed DCT") ||
      recover(&in, "DCI recovered") ||
      write_and_verify(&in, &r[1], 0x3000, "the target's other DCT after recovery"))
    goto out;
  if (dc_write_full(sock, "Q", 1)) {
    bad("the target process went away");
    goto out;
  }
  result = 0;
out:
  close(sock);
  int status;
  if (result) kill(pid, SIGKILL);
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
    if (!result) result = bad("the target process ended with status 0x%x", status);
  }
  return result;
}

static int case_rkey(void) {
  struct target t;
  struct initiator one, two;
  if (open_target(&t, 1) || open_initiator(&one, &dc_dci_defaults) ||
      open_initiator(&two, &dc_dci_defaults))
    return -1;
  const struct remote r = remote_of(&t, 0);
  if (write_and_verify(&two, &r, 0x4000, "second DCI before")) return -1;
  dc_fill(one.buf, LEN, 0x4100, 0, 0);
  int err = post_rdma(&one, 0, &r, KEY, ~r.rkey, 0, 300);
  if (err) return bad("posting: %s", strerror(err));
  if (expect_wc(&one, 300, IBV_WC_REM_ACCESS_ERR, "WRITE with a wrong rkey")) return -1;
  ok("WRITE with a wrong rkey: remote access error");
  if (expect_state(one.dci, IBV_QPS_ERR, "first DCI after the wrong rkey")) return -1;
  if (write_and_verify(&two, &r, 0x4200, "second DCI after")) return -1;
  if (recover(&one, "first DCI recovered")) return -1;
  return write_and_verify(&one, &r, 0x4300, "first DCI after recovery");
}

/* ---- the state rules ---- */

/* Every attribute a DC QP's transition to `state` may use; the mask picks. */
static struct ibv_qp_attr attr_for(int state, const struct dc_port* p) {
  struct ibv_qp_attr a = {.qp_state = state,
                          .port_num = p->port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                          .path_mtu = p->mtu,
                          .min_rnr_timer = 12,
                          .timeout = 14,
                          .retry_cnt = 7,
                          .rnr_retry = 7,
                          .max_rd_atomic = 1};
  a.ah_attr.port_num = p->port;
  return a;
}

#define RC_RTS_MASK                                                                      \
  (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | \
   IBV_QP_MAX_QP_RD_ATOMIC)

/* The mask the Linux mlx5 driver wants for a DCT's (or DCI's) move to
 * `state`: exactly these attributes, no more, no fewer. */
static int right_mask(int is_dct, int state) {
  switch (state) {
    case IBV_QPS_INIT:
      return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (is_dct ? IBV_QP_ACCESS_FLAGS : 0);
    case IBV_QPS_RTR:
      return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | (is_dct ? IBV_QP_MIN_RNR_TIMER : 0);
    default:
      return RC_RTS_MASK;
  }
}

/* ibv_modify_qp from state `from` to `state` with `mask` must answer `want`
 * (0 or an errno). A refusal that did not happen moved the QP: it is put
 * back in `from`, so the next check starts where it should. */
static int step(struct ibv_qp* qp, int is_dct, const struct dc_port* p, int from, int state,
                int mask, int want, const char* what) {
  struct ibv_qp_attr a = attr_for(state, p);
  const int got = ibv_modify_qp(qp, &a, mask);
  if (got == want) {
    ok("%s: %s", what, want ? strerror(want) : "accepted");
    return 0;
  }
  bad("%s: ibv_modify_qp returned %d (%s), want %d (%s)", what, got, strerror(got), want,
      strerror(want));
  if (want && !got) {
    a = attr_for(IBV_QPS_RESET, p);
    ibv_modify_qp(qp, &a, IBV_QP_STATE);
    for (int s = IBV_QPS_INIT; s <= from; ++s) {
      a = attr_for(s, p);
      ibv_modify_qp(qp, &a, right_mask(is_dct, s));
    }
  }
  return -1;
}

struct bench {
  struct dc_port p;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_srq* srq;
};

static int open_bench(struct bench* b) {
  char dev[32];
  uint8_t port_num;
  if (dc_parse_port(target_where, dev, sizeof(dev), &port_num)) return bad("bad -t");
  int err = dc_open_port(dev, port_num, &b->p);
  if (err) return bad("%s: %s", target_where, strerror(err));
  b->pd = ibv_alloc_pd(b->p.ctx);
  b->cq = b->pd ? ibv_create_cq(b->p.ctx, 16, NULL, NULL, 0) : NULL;
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
  b->srq = b->cq ? ibv_create_srq(b->pd, &sa) : NULL;
  return b->srq ? 0 : bad("PD, CQ or SRQ: %s", strerror(errno));
}

static int case_dct_states(void) {
  struct bench b;
  int failures = 0;
  if (open_bench(&b)) return -1;
  const struct dc_port* p = &b.p;
  struct ibv_qp* dct = dc_create_dct(p->ctx, b.pd, b.cq, b.srq, KEY);
  if (!dct) return bad("mlx5dv_create_qp (DCT): %s", strerror(errno));
  const int init = right_mask(1, IBV_QPS_INIT), rtr = right_mask(1, IBV_QPS_RTR);
  failures += !!step(dct, 1, p, IBV_QPS_RESET, IBV_QPS_INIT, init & ~IBV_QP_ACCESS_FLAGS, EINVAL,
                     "DCT RESET->INIT without ACCESS_FLAGS");
  failures += !!step(dct, 1, p, IBV_QPS_RESET, IBV_QPS_INIT, init, 0, "DCT RESET->INIT");
  failures += !!step(dct, 1, p, IBV_QPS_INIT, IBV_QPS_RTR, rtr & ~IBV_QP_MIN_RNR_TIMER, EINVAL,
                     "DCT INIT->RTR without MIN_RNR_TIMER");
  failures += !!step(dct, 1, p, IBV_QPS_INIT, IBV_QPS_RTR, rtr, 0, "DCT INIT->RTR");
  failures += !!step(dct, 1, p, IBV_QPS_RTR, IBV_QPS_RTS, RC_RTS_MASK, EINVAL,
                     "DCT RTR->RTS with an RC requester's attributes");
  failures += !!step(dct, 1, p, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_STATE, EINVAL, "DCT RTR->RTS");

  /* A DCT has no send queue and receives through its SRQ. */
  uint64_t word = 0;
  struct ibv_mr* mr = ibv_reg_mr(b.pd, &word, sizeof(word), IBV_ACCESS_LOCAL_WRITE);
  if (!mr) return bad("ibv_reg_mr: %s", strerror(errno));
  struct ibv_sge sge = {(uintptr_t)&word, sizeof(word), mr->lkey};
  struct ibv_send_wr swr = {.wr_id = 1,
                            .sg_list = &sge,
                            .num_sge = 1,
                            .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = IBV_SEND_SIGNALED,
                            .wr.rdma = {.remote_addr = (uintptr_t)&word, .rkey = mr->rkey}};
  struct ibv_send_wr* bad_swr = NULL;
  int err = ibv_post_send(dct, &swr, &bad_swr);
  if (err == 0)
    failures += !!bad("ibv_post_send on the DCT was accepted");
  else
    ok("ibv_post_send on the DCT: %s", strerror(err));
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad_rwr = NULL;
  err = ibv_post_recv(dct, &rwr, &bad_rwr);
  if (err == 0)
    failures += !!bad("ibv_post_recv on the DCT was accepted");
  else
    ok("ibv_post_recv on the DCT: %s", strerror(err));
  usleep(100000);
  struct ibv_wc wc;
  if (ibv_poll_cq(b.cq, 1, &wc) != 0)
    failures += !!bad("a completion (%s) appeared on the DCT's CQ", ibv_wc_status_str(wc.status));
  failures += !!expect_state(dct, IBV_QPS_RTR, "DCT after all that");
  ibv_destroy_qp(dct);
  ibv_dereg_mr(mr);
  return failures ? -1 : 0;
}

/* mlx5_ib_modify_dct knows two transitions, RESET -> INIT and INIT -> RTR,
 * and answers EINVAL to every other one: a DCT cannot be moved to ERR or
 * back to RESET (it is destroyed instead). */
static int case_dct_stays_rtr(void) {
  struct bench b;
  int failures = 0;
  if (open_bench(&b)) return -1;
  const struct dc_port* p = &b.p;
  struct ibv_qp* dct = dc_create_dct(p->ctx, b.pd, b.cq, b.srq, KEY);
  if (!dct) return bad("mlx5dv_create_qp (DCT): %s", strerror(errno));
  int err = dc_dct_ready(dct, p, IBV_ACCESS_REMOTE_WRITE);
  if (err) return bad("DCT RESET->INIT->RTR: %s", strerror(err));
  failures += !!step(dct, 1, p, IBV_QPS_RTR, IBV_QPS_ERR, IBV_QP_STATE, EINVAL, "DCT RTR->ERR");
  failures += !!step(dct, 1, p, IBV_QPS_RTR, IBV_QPS_RESET, IBV_QP_STATE, EINVAL, "DCT RTR->RESET");
  failures += !!expect_state(dct, IBV_QPS_RTR, "DCT");
  err = ibv_destroy_qp(dct);
  if (err)
    failures += !!bad("ibv_destroy_qp of the DCT: %s", strerror(err));
  else
    ok("DCT destroyed from RTR");
  return failures ? -1 : 0;
}

static int case_dci_states(void) {
  struct bench b;
  int failures = 0;
  if (open_bench(&b)) return -1;
  const struct dc_port* p = &b.p;
  struct ibv_qp* dci = dc_create_dci(p->ctx, b.pd, b.cq, 8, 1, IBV_QP_EX_WITH_RDMA_WRITE);
  if (!dci) return bad("mlx5dv_create_qp (DCI): %s", strerror(errno));
  const int init = right_mask(0, IBV_QPS_INIT), rtr = right_mask(0, IBV_QPS_RTR),
            rts = right_mask(0, IBV_QPS_RTS);
  failures += !!step(dci, 0, p, IBV_QPS_RESET, IBV_QPS_INIT, init | IBV_QP_ACCESS_FLAGS, EINVAL,
                     "DCI RESET->INIT with ACCESS_FLAGS");
  failures += !!step(dci, 0, p, IBV_QPS_RESET, IBV_QPS_INIT, init, 0, "DCI RESET->INIT");
  failures += !!step(dci, 0, p, IBV_QPS_INIT, IBV_QPS_RTR, rtr & ~IBV_QP_PATH_MTU, EINVAL,
                     "DCI INIT->RTR without PATH_MTU");
  failures += !!step(dci, 0, p, IBV_QPS_INIT, IBV_QPS_RTR, rtr, 0, "DCI INIT->RTR");
  failures += !!step(dci, 0, p, IBV_QPS_RTR, IBV_QPS_RTS, rts & ~IBV_QP_MAX_QP_RD_ATOMIC, EINVAL,
                     "DCI RTR->RTS without MAX_QP_RD_ATOMIC");
  failures += !!step(dci, 0, p, IBV_QPS_RTR, IBV_QPS_RTS, rts, 0, "DCI RTR->RTS");
  failures += !!expect_state(dci, IBV_QPS_RTS, "DCI");
  ibv_destroy_qp(dci);
  return failures ? -1 : 0;
}

static const struct {
  const char* name;
  int (*run)(void);
} cases[] = {
    {"key", case_key},
    {"nodct", case_nodct},
    {"destroyed", case_destroyed},
    {"rkey", case_rkey},
    {"dct_states", case_dct_states},
    {"dct_stays_rtr", case_dct_stays_rtr},
    {"dci_states", case_dci_states},
};
#define N_CASES (int)(sizeof(cases) / sizeof(cases[0]))

/* Runs case c in a process of its own; 0 when it passed. */
static int run_case(int c) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return -1;
  }
  if (pid == 0) {
    current = cases[c].name;
    static char what[64];
    snprintf(what, sizeof(what), "dc_errors case %s", current);
    dc_watchdog(what, 60);
    int rc = cases[c].run();
    fflush(stdout);
    _exit(rc ? 1 : 0);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
    printf("FAIL %s: the case's process ended with status 0x%x\n", cases[c].name, status);
  return -1;
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "i:t:")) != -1) {
    switch (c) {
      case 'i':
        initiator_where = optarg;
        break;
      case 't':
        target_where = optarg;
        break;
      default:
        fprintf(stderr,
                "usage: %s [-i DEV:PORT] [-t DEV:PORT] [all|key|nodct|destroyed|rkey|"
                "dct_states|dct_stays_rtr|dci_states]...\n",
                argv[0]);
        return 2;
    }
  }
  int want[N_CASES] = {0}, any = 0;
  for (int i = optind; i < argc; ++i) {
    int found = 0;
    for (int k = 0; k < N_CASES; ++k)
      if (!strcmp(argv[i], cases[k].name) || !strcmp(argv[i], "all")) want[k] = found = 1;
    if (!found) {
      fprintf(stderr, "dc_errors: no case '%s'\n", argv[i]);
      return 2;
    }
    any = 1;
  }
  if (!any)
    for (int k = 0; k < N_CASES; ++k) want[k] = 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int ran = 0;
  char failed[128] = "";
  for (int k = 0; k < N_CASES; ++k) {
    if (!want[k]) continue;
    ran++;
    if (run_case(k)) {
      strncat(failed, " ", sizeof(failed) - strlen(failed) - 1);
      strncat(failed, cases[k].name, sizeof(failed) - strlen(failed) - 1);
    }
  }
  if (failed[0]) {
    printf("dc_errors: FAILED:%s\n", failed);
    return 1;
  }
  printf("dc_errors: all %d cases passed\n", ran);
  return 0;
}
