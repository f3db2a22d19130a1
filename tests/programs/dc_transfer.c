/*
 * dc_transfer: the flow of Mellanox's gpu_direct_rdma_access example over
 * the Dynamically Connected transport, with every byte checked. The client
 * owns a buffer behind a DCT; for each iteration it tells the server over
 * TCP where the buffer is and which operation it wants, and the server's
 * DCI moves the data with an RDMA WRITE into it or an RDMA READ out of it,
 * then answers "done".
 *
 *   dc_transfer server -a IP [-P] [-p port] [-n iters] [-s size] [-l sges] [-T secs]
 *   dc_transfer client -a IP [-p port] [-n iters] [-s size] [-t 0|1] [-B] [-T secs] SERVER
 *
 * -a   the local port's IP address: rdma_bind_addr finds the device and port
 *      (ibemu gives every port one, `ibemu status` lists them)
 * -p   the TCP port (default 18515); -n iterations (default 1000; on the
 *      server, the number of requests each client must make, 0 = any);
 *      -s buffer size in bytes (default 4096)
 * -t   0 (default): the server RDMA WRITEs the client's buffer; 1: it
 *      RDMA READs it
 * -l   0 (default): one SGE per request; N: N SGEs of (size / N) & ~63
 *      bytes, at most 10 per WR (the reference's MAX_SEND_SGE), all WRs of a
 *      request posted in one ibv_wr_start..ibv_wr_complete and only the last
 *      signaled. Local SGE i covers the i-th portion from the END of the
 *      buffer, so an HCA that ignored an SGE's address would be caught.
 * -P   persistent server: serves one client after another until SIGINT or
 *      SIGTERM. A request whose completion fails is answered with an error
 *      and ends that client; the DCI is moved to ERR, a flush marker WR is
 *      posted and polled until it comes back, and the DCI goes RESET -> INIT
 *      -> RTR -> RTS for the next client (the reference's rdma_reset_device).
 * -B   (client) send a wrong rkey, so the server's request fails
 * -T   seconds without progress before the program gives up (default 60)
 *
 * Data: before each request the client fills its buffer with a pattern of
 * that iteration (for READ; the server checks what it read) or with the
 * pattern's complement (for WRITE; the server writes the pattern and the
 * client checks it, and that nothing past the written bytes changed), so
 * stale data from an earlier iteration cannot pass.
 *
 * Both sides print the reference's bandwidth lines. Exit status 0 on
 * success, 1 on a failure (with a line saying what failed), 2 for a bad
 * command line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "dc_common.h"
#include "rc_common.h"

#define DC_KEY 0x00dc0a1b2c3d4e5full
#define MAX_SGE_PER_WR 10 /* the reference's MAX_SEND_SGE */
#define MAX_SGES 512
#define SQ_DEPTH 64 /* >= MAX_SGES / MAX_SGE_PER_WR WRs and the flush marker */
#define AH_CACHE 16
#define REQ_LEN 128
#define REPLY_LEN 128
#define POLL_MS 30000
#define FLUSH_MARKER UINT64_MAX
#define OP_WRITE 0
#define OP_READ 1

static const char* role = "dc_transfer";
static volatile sig_atomic_t keep_running = 1;

struct options {
  const char* addr;
  const char* server;
  int persistent, tcp_port, iters, iters_given, sges, op, bad_rkey;
  unsigned timeout_s;
  size_t size;
};

/* One end's device, found by its IP address as the reference finds it. */
struct device {
  struct rdma_event_channel* channel;
  struct rdma_cm_id* id;
  struct dc_port port;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  uint8_t* buf;
  size_t size;
};

static void stop(int sig) {
  (void)sig;
  keep_running = 0;
}

static const char* op_name(int op) { return op == OP_READ ? "READ" : "WRITE"; }

static int parse_ip(const char* text, struct sockaddr_storage* out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC}, *res;
  int err = getaddrinfo(text, NULL, &hints, &res);
  if (err) {
    fprintf(stderr, "%s: FAILURE: bad address %s: %s\n", role, text, gai_strerror(err));
    return -1;
  }
  memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

/* rdma_create_id + rdma_bind_addr on the local address: librdmacm names the
 * device (cm_id->verbs) and port (cm_id->port_num) that own it. */
static int open_device_by_addr(const char* ip, struct device* d) {
  struct sockaddr_storage addr;
  memset(d, 0, sizeof(*d));
  if (parse_ip(ip, &addr)) return -1;
  d->channel = rdma_create_event_channel();
  if (!d->channel) {
    fprintf(stderr, "%s: FAILURE: rdma_create_event_channel: %s\n", role, strerror(errno));
    return -1;
  }
  if (rdma_create_id(d->channel, &d->id, d, RDMA_PS_TCP)) {
    fprintf(stderr, "%s: FAILURE: rdma_create_id: %s\n", role, strerror(errno));
    return -1;
  }
  if (rdma_bind_addr(d->id, (struct sockaddr*)&addr)) {
    fprintf(stderr, "%s: FAILURE: rdma_bind_addr %s: %s\n", role, ip, strerror(errno));
    return -1;
  }
  if (!d->id->verbs) {
    fprintf(stderr, "%s: FAILURE: no RDMA device has address %s\n", role, ip);
    return -1;
  }
  d->port.ctx = d->id->verbs;
  d->port.port = d->id->port_num;
  int err = dc_query_port(&d->port);
  if (err) {
    fprintf(stderr, "%s: FAILURE: port %d of %s: %s\n", role, d->port.port,
            ibv_get_device_name(d->port.ctx->device), strerror(err));
    return -1;
  }
  printf("%s: %s is %s port %d, LID %u\n", role, ip, ibv_get_device_name(d->port.ctx->device),
         d->port.port, d->port.lid);
  d->pd = ibv_alloc_pd(d->port.ctx);
  d->cq = ibv_create_cq(d->port.ctx, 2 * SQ_DEPTH, NULL, NULL, 0);
  if (!d->pd || !d->cq) {
    fprintf(stderr, "%s: FAILURE: PD or CQ: %s\n", role, strerror(errno));
    return -1;
  }
  return 0;
}

static int register_buffer(struct device* d, size_t size) {
  d->size = size;
  if (posix_memalign((void**)&d->buf, 4096, size)) {
    fprintf(stderr, "%s: FAILURE: cannot allocate %zu bytes\n", role, size);
    return -1;
  }
  memset(d->buf, 0, size);
  d->mr = ibv_reg_mr(d->pd, d->buf, size,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!d->mr) {
    fprintf(stderr, "%s: FAILURE: ibv_reg_mr of %zu bytes: %s\n", role, size, strerror(errno));
    return -1;
  }
  return 0;
}

static void close_device(struct device* d) {
  if (d->mr) ibv_dereg_mr(d->mr);
  if (d->cq) ibv_destroy_cq(d->cq);
  if (d->pd) ibv_dealloc_pd(d->pd);
  if (d->id) rdma_destroy_id(d->id); /* the context is librdmacm's */
  if (d->channel) rdma_destroy_event_channel(d->channel);
  free(d->buf);
}

/* 0 when all n bytes moved; -1 on EOF or an error (errno 0 on EOF). */
static int read_full(int fd, void* p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char*)p + got, n - got);
    if (r == 0) {
      errno = 0;
      return -1;
    }
    if (r < 0 && (errno != EINTR || !keep_running)) return -1;
    if (r > 0) got += r;
  }
  return 0;
}

static int write_full(int fd, const void* p, size_t n) {
  for (size_t put = 0; put < n;) {
    ssize_t r = write(fd, (const char*)p + put, n - put);
    if (r < 0 && errno != EINTR) return -1;
    if (r > 0) put += r;
  }
  return 0;
}

static double seconds_since(const struct timeval* start) {
  struct timeval end;
  gettimeofday(&end, NULL);
  return (end.tv_sec - start->tv_sec) + (end.tv_usec - start->tv_usec) / 1e6;
}

/* The reference's two lines. */
static void print_run_time(const struct timeval* start, long long bytes, int iters) {
  double usec = seconds_since(start) * 1e6;
  if (usec <= 0) usec = 1;
  printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, bytes * 8. / usec);
  printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec / 1e6,
         iters ? usec / iters : 0.);
}

/* ------------------------------------------------------------------ server */

struct server {
  struct device d;
  const struct options* o;
  struct ibv_qp* dci;
  struct ibv_qp_ex* qpx;
  struct mlx5dv_qp_ex* mqpx;
  struct dc_dci_attr attr;
  struct {
    uint16_t lid;
    struct ibv_ah* ah;
  } ahs[AH_CACHE];
  int n_ahs;
  struct ibv_ah* last_ah; /* where the flush marker goes */
  uint32_t last_dctn;
};

/* What a client asks for: its buffer (the reference's addr:size:rkey:lid:dctn
 * descriptor), the operation, the iteration and the pattern's seed. */
struct request {
  unsigned long long addr, seed;
  unsigned long size;
  unsigned rkey, dctn, iter;
  unsigned short lid;
  int op;
};

/* One local SGE and where its bytes go in the remote buffer. */
struct segment {
  size_t local, remote;
  uint32_t len;
};

static struct ibv_ah* ah_for(struct server* s, uint16_t lid) {
  for (int i = 0; i < s->n_ahs; ++i)
    if (s->ahs[i].lid == lid) return s->ahs[i].ah;
  struct ibv_ah* ah = dc_create_ah(s->d.pd, &s->d.port, lid);
  if (!ah) {
    fprintf(stderr, "%s: FAILURE: ibv_create_ah toward LID %u: %s\n", role, lid, strerror(errno));
    return NULL;
  }
  if (s->n_ahs == AH_CACHE) { /* full: forget the oldest */
    ibv_destroy_ah(s->ahs[0].ah);
    memmove(&s->ahs[0], &s->ahs[1], sizeof(s->ahs[0]) * (AH_CACHE - 1));
    s->n_ahs--;
  }
  s->ahs[s->n_ahs].lid = lid;
  s->ahs[s->n_ahs++].ah = ah;
  return ah;
}

static int server_open(struct server* s, const struct options* o) {
  memset(s, 0, sizeof(*s));
  s->o = o;
  if (open_device_by_addr(o->addr, &s->d) || register_buffer(&s->d, o->size)) return -1;
  s->dci = dc_create_dci(s->d.port.ctx, s->d.pd, s->d.cq, SQ_DEPTH, MAX_SGE_PER_WR,
                         IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ);
  if (!s->dci) {
    fprintf(stderr, "%s: FAILURE: mlx5dv_create_qp (DCI): %s\n", role, strerror(errno));
    return -1;
  }
  s->qpx = ibv_qp_to_qp_ex(s->dci);
  s->mqpx = s->qpx ? mlx5dv_qp_ex_from_ibv_qp_ex(s->qpx) : NULL;
  if (!s->mqpx) {
    fprintf(stderr, "%s: FAILURE: the DCI has no ibv_qp_ex/mlx5dv_qp_ex\n", role);
    return -1;
  }
  s->attr = dc_dci_defaults;
  s->attr.timeout = 16;
  int err = dc_dci_ready(s->dci, &s->d.port, &s->attr);
  if (err) {
    fprintf(stderr, "%s: FAILURE: DCI RESET->INIT->RTR->RTS: %s\n", role, strerror(err));
    return -1;
  }
  printf("%s: DCI 0x%06x ready\n", role, s->dci->qp_num);
  return 0;
}

static void server_close(struct server* s) {
  if (s->dci) ibv_destroy_qp(s->dci);
  for (int i = 0; i < s->n_ahs; ++i) ibv_destroy_ah(s->ahs[i].ah);
  close_device(&s->d);
}

static int parse_request(const char* text, struct request* r) {
  memset(r, 0, sizeof(*r));
  return sscanf(text, "%llx:%lx:%x:%hx:%x %d %u %llx", &r->addr, &r->size, &r->rkey, &r->lid,
                &r->dctn, &r->op, &r->iter, &r->seed) == 8 &&
                 (r->op == OP_WRITE || r->op == OP_READ)
             ? 0
             : -1;
}

/* The request's SGEs: one, or o->sges portions of (size / sges) & ~63. */
static int plan(const struct server* s, const struct request* r, struct segment* seg, char* why,
                size_t why_len) {
  const size_t total = r->size < s->d.size ? r->size : s->d.size;
  if (!s->o->sges) {
    if (!total || total > UINT32_MAX) {
      snprintf(why, why_len, "cannot move %zu bytes in one SGE", total);
      return -1;
    }
    seg[0] = (struct segment){.local = 0, .remote = 0, .len = (uint32_t)total};
    return 1;
  }
  const size_t portion = (total / s->o->sges) & ~(size_t)63;
  if (!portion || portion > UINT32_MAX) {
    snprintf(why, why_len, "%zu bytes do not make %d SGEs of 64-byte multiples", total, s->o->sges);
    return -1;
  }
  for (int i = 0; i < s->o->sges; ++i)
    seg[i] = (struct segment){
        .local = (s->o->sges - 1 - i) * portion, .remote = i * portion, .len = (uint32_t)portion};
  return s->o->sges;
}

/* Posts the request's WRs in one ibv_wr_start..ibv_wr_complete region, only
 * the last one signaled. Returns ibv_wr_complete's result. */
static int post_request(struct server* s, const struct request* r, const struct segment* seg,
                        int nseg, struct ibv_ah* ah) {
  struct ibv_sge sge[MAX_SGE_PER_WR];
  const int nwr = (nseg + MAX_SGE_PER_WR - 1) / MAX_SGE_PER_WR;
  ibv_wr_start(s->qpx);
  for (int w = 0; w < nwr; ++w) {
    const int first = w * MAX_SGE_PER_WR;
    const int n = nseg - first < MAX_SGE_PER_WR ? nseg - first : MAX_SGE_PER_WR;
    s->qpx->wr_id = ((uint64_t)r->iter << 16) | (uint64_t)w;
    s->qpx->wr_flags = w == nwr - 1 ? IBV_SEND_SIGNALED : 0;
    const uint64_t raddr = r->addr + seg[first].remote;
    if (r->op == OP_READ)
      ibv_wr_rdma_read(s->qpx, r->rkey, raddr);
    else
      ibv_wr_rdma_write(s->qpx, r->rkey, raddr);
    for (int i = 0; i < n; ++i)
      sge[i] = (struct ibv_sge){.addr = (uintptr_t)(s->d.buf + seg[first + i].local),
                                .length = seg[first + i].len,
                                .lkey = s->d.mr->lkey};
    if (n == 1)
      ibv_wr_set_sge(s->qpx, sge[0].lkey, sge[0].addr, sge[0].length);
    else
      ibv_wr_set_sge_list(s->qpx, n, sge);
    mlx5dv_wr_set_dc_addr(s->mqpx, ah, r->dctn, DC_KEY);
  }
  s->last_ah = ah;
  s->last_dctn = r->dctn;
  return ibv_wr_complete(s->qpx);
}

/* After a failed completion, the reference's rdma_reset_device: ERR, a
 * flush marker polled until it comes back, RESET -> INIT -> RTR -> RTS. */
static int reset_dci(struct server* s) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  int err = ibv_modify_qp(s->dci, &a, IBV_QP_STATE);
  if (err) {
    fprintf(stderr, "%s: FAILURE: DCI to ERR: %s\n", role, strerror(err));
    return -1;
  }
  if (s->last_ah) {
    ibv_wr_start(s->qpx);
    s->qpx->wr_id = FLUSH_MARKER;
    s->qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(s->qpx, 0, 0);
    ibv_wr_set_sge(s->qpx, s->d.mr->lkey, (uintptr_t)s->d.buf, 0);
    mlx5dv_wr_set_dc_addr(s->mqpx, s->last_ah, s->last_dctn, DC_KEY);
    if ((err = ibv_wr_complete(s->qpx))) {
      fprintf(stderr, "%s: FAILURE: posting the flush marker: %s\n", role, strerror(err));
      return -1;
    }
    int flushed = 0;
    for (;;) {
      struct ibv_wc wc;
      int n = dc_poll_one(s->d.cq, &wc, POLL_MS);
      if (n <= 0) {
        fprintf(stderr, "%s: FAILURE: the flush marker did not come back\n", role);
        return -1;
      }
      if (wc.wr_id != FLUSH_MARKER) {
        flushed++;
        continue;
      }
      if (wc.status != IBV_WC_WR_FLUSH_ERR) {
        fprintf(stderr, "%s: FAILURE: the flush marker completed with %s, not flushed\n", role,
                ibv_wc_status_str(wc.status));
        return -1;
      }
      break;
    }
    printf("%s: flush marker came back flushed (%d more completions before it)\n", role, flushed);
  }
  err = dc_dci_recover(s->dci, &s->d.port, &s->attr);
  if (err) {
    fprintf(stderr, "%s: FAILURE: DCI RESET->INIT->RTR->RTS: %s\n", role, strerror(err));
    return -1;
  }
  printf("%s: DCI reset to RTS\n", role);
  return 0;
}

/* One request. 0 done; 1 its completion failed (the DCI needs a reset);
 * -1 any other failure. `why` says what happened. */
static int execute(struct server* s, const struct request* r, size_t* moved, char* why,
                   size_t why_len) {
  struct segment seg[MAX_SGES];
  const int nseg = plan(s, r, seg, why, why_len);
  if (nseg < 0) return -1;
  const int nwr = (nseg + MAX_SGE_PER_WR - 1) / MAX_SGE_PER_WR;
  *moved = 0;
  /* The pattern (WRITE) or its complement (READ), each byte at the
   * position its remote byte has. */
  for (int i = 0; i < nseg; ++i) {
    dc_fill(s->d.buf + seg[i].local, seg[i].len, r->seed, seg[i].remote, r->op == OP_READ);
    *moved += seg[i].len;
  }
  struct ibv_ah* ah = ah_for(s, r->lid);
  if (!ah) {
    snprintf(why, why_len, "no address handle toward LID %u", r->lid);
    return -1;
  }
  int err = post_request(s, r, seg, nseg, ah);
  if (err) {
    snprintf(why, why_len, "ibv_wr_complete: %s", strerror(err));
    return -1;
  }
  const uint64_t last = ((uint64_t)r->iter << 16) | (uint64_t)(nwr - 1);
  for (;;) {
    struct ibv_wc wc;
    int n = dc_poll_one(s->d.cq, &wc, POLL_MS);
    if (n < 0) {
      snprintf(why, why_len, "ibv_poll_cq failed");
      return -1;
    }
    if (n == 0) {
      snprintf(why, why_len, "no completion within %d ms", POLL_MS);
      return -1;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      snprintf(why, why_len, "RDMA %s failed: %s (%d), wr_id 0x%" PRIx64, op_name(r->op),
               ibv_wc_status_str(wc.status), wc.status, wc.wr_id);
      return 1;
    }
    if (wc.wr_id == last) break;
    snprintf(why, why_len,
             "unexpected completion of wr_id 0x%" PRIx64 " (waiting for 0x%" PRIx64 ")", wc.wr_id,
             last);
    return -1;
  }
  if (r->op == OP_READ)
    for (int i = 0; i < nseg; ++i) {
      long bad = dc_check(s->d.buf + seg[i].local, seg[i].len, r->seed, seg[i].remote, 0);
      if (bad >= 0) {
        snprintf(why, why_len, "data read is wrong at remote offset %zu (SGE %d)",
                 seg[i].remote + bad, i);
        return -1;
      }
    }
  return 0;
}

/* Serves one client until it closes. 0 when all went well, 1 when a
 * request's completion failed, -1 on any other failure. */
static int serve_client(struct server* s, int fd, int client) {
  struct timeval start;
  long long bytes = 0;
  int served = 0;
  gettimeofday(&start, NULL);
  for (;;) {
    char req[REQ_LEN + 1] = {0}, reply[REPLY_LEN] = {0}, why[160] = "";
    dc_watchdog("server: waiting for a client's request", s->o->timeout_s);
    if (read_full(fd, req, REQ_LEN)) {
      if (errno == 0) break; /* the client is done */
      fprintf(stderr, "%s: FAILURE: client %d: reading a request: %s\n", role, client,
              strerror(errno));
      return -1;
    }
    struct request r;
    if (parse_request(req, &r)) {
      fprintf(stderr, "%s: FAILURE: client %d: bad request '%.*s'\n", role, client, REQ_LEN, req);
      return -1;
    }
    dc_watchdog("server: executing a request", s->o->timeout_s);
    size_t moved = 0;
    int rc = execute(s, &r, &moved, why, sizeof(why));
    if (rc) {
      fprintf(stderr, "%s: client %d iteration %u: %s\n", role, client, r.iter, why);
      snprintf(reply, sizeof(reply), "error %s", why);
      write_full(fd, reply, REPLY_LEN);
      return rc;
    }
    snprintf(reply, sizeof(reply), "done %zu", moved);
    if (write_full(fd, reply, REPLY_LEN)) {
      fprintf(stderr, "%s: FAILURE: client %d: answering: %s\n", role, client, strerror(errno));
      return -1;
    }
    bytes += moved;
    served++;
  }
  if (s->o->iters_given && s->o->iters && served != s->o->iters) {
    fprintf(stderr, "%s: FAILURE: client %d made %d requests, not %d\n", role, client, served,
            s->o->iters);
    return -1;
  }
  printf("%s: client %d: %d requests served\n", role, client, served);
  print_run_time(&start, bytes, served);
  return 0;
}

/* Listens on every IPv4 address (tcp_connect, the client's, speaks IPv4)
 * for the server's whole life, so no client finds the port closed. */
static int listen_on(int port) {
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY)};
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr*)&a, sizeof(a)) || listen(fd, 4)) {
    close(fd);
    return -1;
  }
  return fd;
}

static int run_server(const struct options* o) {
  struct server s;
  role = "dc_transfer server";
  if (server_open(&s, o)) return 1;
  int lfd = listen_on(o->tcp_port);
  if (lfd < 0) {
    fprintf(stderr, "%s: FAILURE: cannot listen on TCP port %d: %s\n", role, o->tcp_port,
            strerror(errno));
    server_close(&s);
    return 1;
  }
  printf("%s: listening on TCP port %d%s\n", role, o->tcp_port,
         o->persistent ? " (persistent)" : "");
  int status = 0, clients = 0, failed = 0;
  while (keep_running) {
    dc_watchdog("", 0); /* waiting for a client is no hang */
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "%s: FAILURE: accept: %s\n", role, strerror(errno));
      status = 1;
      break;
    }
    const int rc = serve_client(&s, fd, ++clients);
    close(fd);
    if (rc == 0 && !o->persistent) break;
    if (rc) {
      failed++;
      if (!o->persistent) {
        fprintf(stderr, "%s: FAILURE: client %d's requests failed\n", role, clients);
        status = 1;
        break;
      }
      if (rc < 0) status = 1; /* not a failed completion: remember it */
      dc_watchdog("server: resetting the DCI", o->timeout_s);
      if (reset_dci(&s)) {
        status = 1;
        break;
      }
      printf("%s: client %d failed; waiting for the next client\n", role, clients);
    }
  }
  dc_watchdog("", 0);
  close(lfd);
  if (!o->persistent && !keep_running) {
    fprintf(stderr, "%s: FAILURE: interrupted before a client was served\n", role);
    status = 1;
  }
  if (o->persistent) printf("%s: served %d clients, %d failed\n", role, clients, failed);
  server_close(&s);
  return status;
}

/* ------------------------------------------------------------------ client */

static int run_client(const struct options* o) {
  struct device d;
  role = "dc_transfer client";
  dc_watchdog("client: opening the device", o->timeout_s);
  int status = 1;
  struct ibv_srq* srq = NULL;
  struct ibv_qp* dct = NULL;
  int fd = -1;
  if (open_device_by_addr(o->addr, &d) || register_buffer(&d, o->size)) goto out;
  struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 2, .max_sge = 1}};
  srq = ibv_create_srq(d.pd, &srq_attr);
  if (!srq) {
    fprintf(stderr, "%s: FAILURE: ibv_create_srq: %s\n", role, strerror(errno));
    goto out;
  }
  dct = dc_create_dct(d.port.ctx, d.pd, d.cq, srq, DC_KEY);
  if (!dct) {
    fprintf(stderr, "%s: FAILURE: mlx5dv_create_qp (DCT): %s\n", role, strerror(errno));
    goto out;
  }
  int err = dc_dct_ready(dct, &d.port,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (err) {
    fprintf(stderr, "%s: FAILURE: DCT RESET->INIT->RTR: %s\n", role, strerror(err));
    goto out;
  }
  printf("%s: DCT 0x%06x ready, LID %u\n", role, dct->qp_num, d.port.lid);

  dc_watchdog("client: connecting to the server", o->timeout_s);
  fd = tcp_connect(o->server, o->tcp_port);
  if (fd < 0) {
    fprintf(stderr, "%s: FAILURE: cannot connect to %s:%d\n", role, o->server, o->tcp_port);
    goto out;
  }
  const uint32_t rkey = o->bad_rkey ? ~d.mr->rkey : d.mr->rkey;
  const unsigned long long salt = (unsigned long long)getpid() << 24;
  printf("Starting data transfer (%d iters, RDMA %s%s)\n", o->iters, op_name(o->op),
         o->bad_rkey ? ", wrong rkey" : "");
  struct timeval start;
  gettimeofday(&start, NULL);
  long long bytes = 0;
  for (int it = 0; it < o->iters; ++it) {
    dc_watchdog("client: waiting for the server's answer", o->timeout_s);
    const unsigned long long seed = salt + (unsigned long long)it * 2 + o->op;
    /* READ: the data to be read. WRITE: the complement of what must come. */
    dc_fill(d.buf, d.size, seed, 0, o->op == OP_WRITE);
    char req[REQ_LEN] = {0}, reply[REPLY_LEN + 1] = {0};
    snprintf(req, sizeof(req), "%016llx:%08lx:%08x:%04x:%06x %d %u %llx",
             (unsigned long long)(uintptr_t)d.buf, (unsigned long)d.size, rkey, d.port.lid,
             dct->qp_num, o->op, it, seed);
    if (write_full(fd, req, REQ_LEN) || read_full(fd, reply, REPLY_LEN)) {
      fprintf(stderr, "%s: FAILURE: iteration %d: the connection to the server broke (%s)\n", role,
              it, errno ? strerror(errno) : "closed");
      goto out;
    }
    size_t moved;
    if (sscanf(reply, "done %zu", &moved) != 1) {
      fprintf(stderr, "%s: FAILURE: iteration %d: the server answered: %s\n", role, it, reply);
      goto out;
    }
    if (!moved || moved > d.size) {
      fprintf(stderr, "%s: FAILURE: iteration %d: the server moved %zu bytes of %zu\n", role, it,
              moved, d.size);
      goto out;
    }
    long bad;
    if (o->op == OP_WRITE) {
      if ((bad = dc_check(d.buf, moved, seed, 0, 0)) >= 0) {
        fprintf(stderr, "%s: FAILURE: iteration %d: written data wrong at offset %ld of %zu\n",
                role, it, bad, moved);
        goto out;
      }
      if ((bad = dc_check(d.buf + moved, d.size - moved, seed, moved, 1)) >= 0) {
        fprintf(stderr, "%s: FAILURE: iteration %d: byte %zu, past the %zu written, changed\n",
                role, it, moved + bad, moved);
        goto out;
      }
    } else if ((bad = dc_check(d.buf, d.size, seed, 0, 0)) >= 0) {
      fprintf(stderr, "%s: FAILURE: iteration %d: an RDMA READ changed byte %ld\n", role, it, bad);
      goto out;
    }
    bytes += moved;
  }
  dc_watchdog("", 0);
  print_run_time(&start, bytes, o->iters);
  printf("%s: %d iterations of RDMA %s verified\n", role, o->iters, op_name(o->op));
  status = 0;
out:
  dc_watchdog("client: cleaning up", o->timeout_s);
  if (fd >= 0) close(fd);
  if (dct) ibv_destroy_qp(dct);
  if (srq) ibv_destroy_srq(srq);
  close_device(&d);
  dc_watchdog("", 0);
  return status;
}

/* ------------------------------------------------------------------ main */

static void usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s server -a IP [-P] [-p port] [-n iters] [-s size] [-l sges] [-T secs]\n"
          "       %s client -a IP [-p port] [-n iters] [-s size] [-t 0|1] [-B] [-T secs] "
          "SERVER\n",
          argv0, argv0);
  exit(2);
}

int main(int argc, char** argv) {
  struct options o = {.tcp_port = 18515, .iters = 1000, .size = 4096, .timeout_s = 60};
  if (argc < 2) usage(argv[0]);
  const int server = !strcmp(argv[1], "server");
  if (!server && strcmp(argv[1], "client")) usage(argv[0]);
  int c;
  optind = 2;
  while ((c = getopt(argc, argv, "a:Pp:n:s:l:t:BT:")) != -1) {
    switch (c) {
      case 'a':
        o.addr = optarg;
        break;
      case 'P':
        o.persistent = 1;
        break;
      case 'p':
        o.tcp_port = atoi(optarg);
        break;
      case 'n':
        o.iters = atoi(optarg);
        o.iters_given = 1;
        break;
      case 's':
        o.size = strtoull(optarg, NULL, 0);
        break;
      case 'l':
        o.sges = atoi(optarg);
        break;
      case 't':
        o.op = atoi(optarg) & 1;
        break;
      case 'B':
        o.bad_rkey = 1;
        break;
      case 'T':
        o.timeout_s = (unsigned)atoi(optarg);
        break;
      default:
        usage(argv[0]);
    }
  }
  if (!o.addr || o.size == 0 || o.iters < 0 || o.sges < 0 || o.sges > MAX_SGES || o.tcp_port <= 0 ||
      o.tcp_port > 65535 || !o.timeout_s)
    usage(argv[0]);
  if (server ? optind != argc : optind != argc - 1) usage(argv[0]);
  if (!server) o.server = argv[optind];
  if (!server && (o.persistent || o.sges)) usage(argv[0]);
  if (server && (o.bad_rkey || o.op)) usage(argv[0]);

  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = stop}; /* no SA_RESTART: accept() returns */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  return server ? run_server(&o) : run_client(&o);
}
