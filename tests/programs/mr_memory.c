/* The memory behind a memory region. ibv_reg_mr checks it as the kernel does
 * when it pins the pages: an address with nothing mapped, a PROT_NONE page,
 * or a read-only page registered for writing fail with EFAULT; read-only
 * access to a read-only page is fine. Memory that goes away after
 * registration (munmap, mprotect, a truncated file under MAP_SHARED) ends
 * the request that reaches it with an error completion and no signal: a
 * peer's RDMA WRITE, READ or atomic gets IBV_WC_REM_ACCESS_ERR, a SEND into
 * such a receive buffer IBV_WC_REM_OP_ERR (IBV_WC_LOC_PROT_ERR at the
 * receiver), and a local gather or scatter IBV_WC_LOC_PROT_ERR. Afterwards
 * both devices still serve a new QP pair. Both ends live in this process, so
 * a fault that killed the target would end the program. Prints one line per
 * check and "ok" at the end; exits 1 if a check failed.
 * Usage: mr_memory [-a DEVICE] [-b DEVICE] */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rc_common.h"

static const int kFullAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
static int failures;
static size_t page;

static void expect(const char* what, int ok, const char* got) {
  printf("%-60s %s (%s)\n", what, ok ? "ok" : "FAILED", got);
  if (!ok) failures++;
}

static void* must(void* object, const char* what) {
  if (!object || object == MAP_FAILED) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
  }
  return object;
}

static char* map_pages(size_t n, int prot) {
  return must(mmap(NULL, n * page, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), "mmap");
}

/* ibv_reg_mr that should fail with `want`, or succeed when it is 0. */
static void expect_reg(struct ibv_pd* pd, const char* what, void* addr, size_t len, int access,
                       int want) {
  errno = 0;
  struct ibv_mr* mr = ibv_reg_mr(pd, addr, len, access);
  const int got = mr ? 0 : errno;
  expect(what, got == want, got ? strerror(got) : "registered");
  if (mr) ibv_dereg_mr(mr);
}

static void registration(struct ibv_pd* pd) {
  expect_reg(pd, "reg_mr at address 0x1000", (void*)0x1000, page, IBV_ACCESS_LOCAL_WRITE, EFAULT);
  char* ro = map_pages(1, PROT_READ);
  expect_reg(pd, "reg_mr of a PROT_READ page, LOCAL_WRITE", ro, page, IBV_ACCESS_LOCAL_WRITE,
             EFAULT);
  expect_reg(pd, "reg_mr of a PROT_READ page, REMOTE_WRITE", ro, page,
             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, EFAULT);
  expect_reg(pd, "reg_mr of a PROT_READ page, REMOTE_ATOMIC", ro, page,
             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, EFAULT);
  expect_reg(pd, "reg_mr of a PROT_READ page, MW_BIND", ro, page, IBV_ACCESS_MW_BIND, EFAULT);
  expect_reg(pd, "reg_mr of a PROT_READ page, no access", ro, page, 0, 0);
  expect_reg(pd, "reg_mr of a PROT_READ page, REMOTE_READ", ro + 8, 64, IBV_ACCESS_REMOTE_READ, 0);
  char* none = map_pages(1, PROT_NONE);
  expect_reg(pd, "reg_mr of a PROT_NONE page, no access", none, page, 0, EFAULT);

  char* holed = map_pages(3, PROT_READ | PROT_WRITE);
  munmap(holed + page, page);
  expect_reg(pd, "reg_mr of three pages, the middle one unmapped", holed, 3 * page,
             IBV_ACCESS_LOCAL_WRITE, EFAULT);
  expect_reg(pd, "reg_mr ending where the hole starts", holed + 1, page - 1, IBV_ACCESS_LOCAL_WRITE,
             0);
  expect_reg(pd, "reg_mr one byte into the hole", holed + 1, page, IBV_ACCESS_LOCAL_WRITE, EFAULT);

  /* Two mappings side by side, read-write and read-only. */
  char* mixed = map_pages(2, PROT_READ | PROT_WRITE);
  mprotect(mixed + page, page, PROT_READ);
  expect_reg(pd, "reg_mr over read-write and read-only mappings, REMOTE_READ", mixed, 2 * page,
             IBV_ACCESS_REMOTE_READ, 0);
  expect_reg(pd, "reg_mr over them, LOCAL_WRITE", mixed, 2 * page, IBV_ACCESS_LOCAL_WRITE, EFAULT);

  /* ibv_rereg_mr pins again: a new range or access is checked the same way. */
  struct ibv_mr* mr = must(ibv_reg_mr(pd, mixed, page, IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
  int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro, page, 0);
  expect("rereg_mr onto a PROT_READ page, LOCAL_WRITE", rc != 0, rc ? "refused" : "accepted");
  rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ);
  expect("rereg_mr to REMOTE_READ", rc == 0, rc ? "refused" : "accepted");
  rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro, page, 0);
  expect("  then onto the PROT_READ page", rc == 0, rc ? "refused" : "accepted");
  expect("  deregisters", ibv_dereg_mr(mr) == 0, "0");
  munmap(ro, page);
  munmap(none, page);
  munmap(holed, page);
  munmap(holed + 2 * page, page);
  munmap(mixed, 2 * page);
}

/* Port 1 of a device with its PD; QPs come and go on it. */
struct end {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  uint16_t lid;
};

/* One RC QP of each end, connected to each other, each with its own CQ. */
struct pair {
  struct ibv_cq* cq[2];
  struct ibv_qp* qp[2];
};

static void open_end(const char* device, struct end* e) {
  struct rc_end rc;
  if (open_rc_end(device, 4, &rc)) {
    fprintf(stderr, "cannot open %s\n", device);
    exit(1);
  }
  ibv_destroy_qp(rc.qp);
  ibv_destroy_cq(rc.cq);
  e->ctx = rc.ctx;
  e->pd = rc.pd;
  e->lid = rc.lid;
}

static void connect_pair(struct end* ends, struct pair* p) {
  for (int i = 0; i < 2; ++i) {
    p->cq[i] = must(ibv_create_cq(ends[i].ctx, 16, NULL, NULL, 0), "ibv_create_cq");
    struct ibv_qp_init_attr qa = {
        .send_cq = p->cq[i],
        .recv_cq = p->cq[i],
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    p->qp[i] = must(ibv_create_qp(ends[i].pd, &qa), "ibv_create_qp");
  }
  for (int i = 0; i < 2; ++i)
    if (connect_rc_qp(p->qp[i], p->qp[!i]->qp_num, ends[!i].lid, IBV_MTU_1024, 14, 7,
                      kFullAccess)) {
      fprintf(stderr, "connect_rc_qp: %s\n", strerror(errno));
      exit(1);
    }
}

static void close_pair(struct pair* p) {
  for (int i = 0; i < 2; ++i) {
    ibv_destroy_qp(p->qp[i]);
    ibv_destroy_cq(p->cq[i]);
  }
}

/* The next completion of `cq`, or -1 after 5 s. */
static int wait_wc(struct ibv_cq* cq, struct ibv_wc* wc) {
  const time_t deadline = time(NULL) + 5;
  while (time(NULL) < deadline) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n) return n < 0 ? -1 : 0;
    usleep(100);
  }
  return -1;
}

static void expect_wc(const char* what, struct ibv_cq* cq, enum ibv_wc_status want) {
  struct ibv_wc wc;
  if (wait_wc(cq, &wc)) {
    expect(what, 0, "no completion");
    return;
  }
  expect(what, wc.status == want, ibv_wc_status_str(wc.status));
}

static void post(struct ibv_qp* qp, enum ibv_wr_opcode op, struct ibv_mr* mr, void* addr,
                 uint32_t len, uint64_t remote, uint32_t rkey) {
  struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = 1;
  } else {
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  }
  if (ibv_post_send(qp, &wr, &bad)) {
    fprintf(stderr, "ibv_post_send: %s\n", strerror(errno));
    exit(1);
  }
}

/* How the target's memory goes away after registration. */
enum vanish { kUnmap, kProtect, kTruncate };

static char* target_buffer(enum vanish how, int* fd) {
  *fd = -1;
  if (how != kTruncate) return map_pages(1, PROT_READ | PROT_WRITE);
  *fd = memfd_create("mr_memory", 0);
  if (*fd < 0 || ftruncate(*fd, (off_t)page)) must(NULL, "memfd");
  return must(mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0), "mmap");
}

static void make_vanish(enum vanish how, char* buf, int fd) {
  if (how == kUnmap) munmap(buf, page);
  if (how == kProtect) mprotect(buf, page, PROT_NONE);
  if (how == kTruncate) ftruncate(fd, 0); /* the mapping stays: SIGBUS */
}

static void undo_vanish(enum vanish how, char* buf, int fd) {
  if (how == kProtect) munmap(buf, page);
  if (how == kTruncate) {
    munmap(buf, page);
    close(fd);
  }
}

/* The responder's access error: its QP goes to the error state and reports
 * IBV_EVENT_QP_ACCESS_ERR, as for an R_Key that does not fit. */
static void expect_responder_error(struct end* target, struct ibv_qp* qp) {
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
  expect("  the target's QP is in the error state", attr.qp_state == IBV_QPS_ERR,
         attr.qp_state == IBV_QPS_ERR ? "ERR" : "not ERR");
  struct pollfd pfd = {.fd = target->ctx->async_fd, .events = POLLIN};
  struct ibv_async_event ev;
  if (poll(&pfd, 1, 5000) != 1 || ibv_get_async_event(target->ctx, &ev)) {
    expect("  the target gets an async event", 0, "none");
    return;
  }
  expect("  the target gets IBV_EVENT_QP_ACCESS_ERR",
         ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == qp,
         ibv_event_type_str(ev.event_type));
  ibv_ack_async_event(&ev);
}

/* A connected QP pair with a registered page on each side: `local` at the
 * requester (the first end), `buf` at the target (the second). */
struct scene {
  struct pair p;
  char* local;
  char* buf;
  struct ibv_mr* lmr;
  struct ibv_mr* tmr;
};

static void open_scene(struct end* ends, char* buf, struct scene* s) {
  connect_pair(ends, &s->p);
  s->local = map_pages(1, PROT_READ | PROT_WRITE);
  s->lmr = must(ibv_reg_mr(ends[0].pd, s->local, page, kFullAccess), "ibv_reg_mr");
  s->buf = buf;
  s->tmr = must(ibv_reg_mr(ends[1].pd, buf, page, kFullAccess), "ibv_reg_mr");
}

/* Tears a scene down; pages already gone are named. */
static void close_scene(struct scene* s, int local_gone, int buf_gone) {
  close_pair(&s->p);
  if (s->tmr) ibv_dereg_mr(s->tmr);
  ibv_dereg_mr(s->lmr);
  if (!local_gone) munmap(s->local, page);
  if (!buf_gone) munmap(s->buf, page);
}

/* A peer's RDMA WRITE, READ or atomic on target memory that went away. */
static void remote_access(struct end* ends, const char* what, enum ibv_wr_opcode op,
                          enum vanish how) {
  int fd;
  struct scene s;
  open_scene(ends, target_buffer(how, &fd), &s);
  make_vanish(how, s.buf, fd);
  post(s.p.qp[0], op, s.lmr, s.local, op == IBV_WR_ATOMIC_FETCH_AND_ADD ? 8 : 64,
       (uintptr_t)s.buf + 64, s.tmr->rkey);
  expect_wc(what, s.p.cq[0], IBV_WC_REM_ACCESS_ERR);
  expect_responder_error(&ends[1], s.p.qp[1]);
  expect("  the region still deregisters", ibv_dereg_mr(s.tmr) == 0, "0");
  s.tmr = NULL;
  undo_vanish(how, s.buf, fd);
  close_scene(&s, 0, 1);
}

/* A SEND whose receive buffer went away: the receive WQE fails with a local
 * protection error, the sender learns of a remote operational error (as for
 * a receive WQE whose L_Key does not fit). */
static void receive_buffer_gone(struct end* ends) {
  struct scene s;
  open_scene(ends, map_pages(1, PROT_READ | PROT_WRITE), &s);
  struct ibv_sge sge = {.addr = (uintptr_t)s.buf, .length = 64, .lkey = s.tmr->lkey};
  struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s.p.qp[1], &rwr, &bad)) must(NULL, "ibv_post_recv");
  munmap(s.buf, page);
  post(s.p.qp[0], IBV_WR_SEND, s.lmr, s.local, 64, 0, 0);
  expect_wc("SEND into a receive buffer unmapped after registration", s.p.cq[0], IBV_WC_REM_OP_ERR);
  expect_wc("  the receive WQE fails", s.p.cq[1], IBV_WC_LOC_PROT_ERR);
  close_scene(&s, 0, 1);
}

/* Local memory that went away: the gather of an RDMA WRITE, the scatter of
 * an RDMA READ's response. */
static void local_access(struct end* ends, const char* what, enum ibv_wr_opcode op) {
  struct scene s;
  open_scene(ends, map_pages(1, PROT_READ | PROT_WRITE), &s);
  munmap(s.local, page);
  post(s.p.qp[0], op, s.lmr, s.local, 64, (uintptr_t)s.buf, s.tmr->rkey);
  expect_wc(what, s.p.cq[0], IBV_WC_LOC_PROT_ERR);
  close_scene(&s, 1, 0);
}

/* After all that, both devices still carry an RDMA WRITE and a READ. */
static void still_serving(struct end* ends) {
  struct scene s;
  open_scene(ends, map_pages(1, PROT_READ | PROT_WRITE), &s);
  memset(s.local, 0x5a, 64);
  post(s.p.qp[0], IBV_WR_RDMA_WRITE, s.lmr, s.local, 64, (uintptr_t)s.buf, s.tmr->rkey);
  expect_wc("a new QP pair: RDMA WRITE", s.p.cq[0], IBV_WC_SUCCESS);
  expect("  the bytes arrived", s.buf[0] == 0x5a && s.buf[63] == 0x5a, "compared");
  post(s.p.qp[0], IBV_WR_RDMA_READ, s.lmr, s.local + 128, 64, (uintptr_t)s.buf, s.tmr->rkey);
  expect_wc("  RDMA READ", s.p.cq[0], IBV_WC_SUCCESS);
  expect("  the bytes came back", memcmp(s.local, s.local + 128, 64) == 0, "compared");
  close_scene(&s, 0, 0);
}

int main(int argc, char** argv) {
  const char* devices[2] = {"ibemu0", "ibemu1"};
  for (int c; (c = getopt(argc, argv, "a:b:")) != -1;) {
    if (c == 'a')
      devices[0] = optarg;
    else if (c == 'b')
      devices[1] = optarg;
    else {
      fprintf(stderr, "usage: %s [-a DEVICE] [-b DEVICE]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  page = (size_t)sysconf(_SC_PAGESIZE);
  struct end ends[2];
  open_end(devices[0], &ends[0]);
  open_end(devices[1], &ends[1]);
  registration(ends[0].pd);
  remote_access(ends, "RDMA WRITE into a region unmapped after registration", IBV_WR_RDMA_WRITE,
                kUnmap);
  remote_access(ends, "RDMA WRITE into a region made PROT_NONE", IBV_WR_RDMA_WRITE, kProtect);
  remote_access(ends, "RDMA WRITE into a MAP_SHARED file truncated to 0", IBV_WR_RDMA_WRITE,
                kTruncate);
  remote_access(ends, "RDMA READ of a region unmapped after registration", IBV_WR_RDMA_READ,
                kUnmap);
  remote_access(ends, "RDMA READ of a truncated file", IBV_WR_RDMA_READ, kTruncate);
  remote_access(ends, "fetch-and-add on a region unmapped after registration",
                IBV_WR_ATOMIC_FETCH_AND_ADD, kUnmap);
  receive_buffer_gone(ends);
  local_access(ends, "RDMA WRITE gathered from an unmapped local buffer", IBV_WR_RDMA_WRITE);
  local_access(ends, "RDMA READ scattered into an unmapped local buffer", IBV_WR_RDMA_READ);
  still_serving(ends);
  if (failures) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
