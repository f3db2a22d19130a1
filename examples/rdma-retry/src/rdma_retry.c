// rdma_retry: a small RC client/server over libibverbs.
//
//   server:  rdma_retry [options]
//   client:  rdma_retry [options] SERVER_HOST
//
// The two sides exchange their QP number, LID, PSN and buffer address over
// TCP, then the client writes COUNT messages of SIZE bytes into the server's
// buffer with RDMA WRITE and reads each one back with RDMA READ to verify
// it. The READ is posted on the same QP right after the WRITE, and an RC
// responder executes requests in order, so what comes back is what the
// WRITE left there.
//
// Lost packets are the HCA's business: RC retransmits them, and the program
// sees nothing but a slower transfer. Only when the peer stays silent for
// retry_cnt + 1 local ACK timeouts (a pulled cable, a dead host) does a work
// request complete with IBV_WC_RETRY_EXC_ERR; the client then says so, tears
// everything down and exits with its own code, so that a caller (or a test)
// can tell "the network failed" from "the program is wrong".
#define _DEFAULT_SOURCE  // POSIX and BSD functions (getaddrinfo, usleep, lrand48) under -std=c11
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

// Exit codes; documented in usage() and README.md.
enum {
  EXIT_OK = 0,
  EXIT_SETUP = 1,           // bad options, no device, TCP or verbs setup failed
  EXIT_MISMATCH = 2,        // a message read back differs from what was written
  EXIT_RETRY_EXCEEDED = 3,  // IBV_WC_RETRY_EXC_ERR: the peer stopped answering
  EXIT_WC_ERROR = 4,        // any other completion error
};

struct options {
  const char* device;  // NULL: the first device
  int ib_port;
  int tcp_port;
  long count;
  uint32_t size;
  int retry_cnt;  // 0..7: retransmissions before IBV_WC_RETRY_EXC_ERR
  int timeout;    // local ACK timeout exponent: 4.096 us * 2^timeout
  const char* server;
};

// What each side tells the other over TCP before any RDMA happens.
struct peer {
  uint16_t lid;
  uint32_t qpn;
  uint32_t psn;
  uint64_t addr;
  uint32_t rkey;
};

struct rdma {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  char* buf;  // client: [message to write | message read back]; server: the target
  uint16_t lid;
  enum ibv_mtu mtu;
};

static void usage(const char* argv0) {
  fprintf(stderr,
          "usage: %s [options] [SERVER_HOST]\n"
          "  -d DEVICE   IB device (default: the first one)\n"
          "  -i PORT     IB port (default 1)\n"
          "  -p PORT     TCP port of the connection exchange (default 18515)\n"
          "  -n COUNT    messages to write and verify (default 100)\n"
          "  -s SIZE     bytes per message (default 4096)\n"
          "  -r RETRY    retry_cnt, 0..7 (default 7)\n"
          "  -t TIMEOUT  local ACK timeout exponent, 1..31: 4.096 us * 2^TIMEOUT (default 14)\n"
          "exit status: 0 success, 1 setup error, 2 data mismatch,\n"
          "             3 IBV_WC_RETRY_EXC_ERR (peer unreachable), 4 other completion error\n",
          argv0);
}

static int parse_options(int argc, char** argv, struct options* o) {
  *o = (struct options){
      .ib_port = 1, .tcp_port = 18515, .count = 100, .size = 4096, .retry_cnt = 7, .timeout = 14};
  int c;
  while ((c = getopt(argc, argv, "d:i:p:n:s:r:t:h")) != -1) {
    switch (c) {
      case 'd':
        o->device = optarg;
        break;
      case 'i':
        o->ib_port = atoi(optarg);
        break;
      case 'p':
        o->tcp_port = atoi(optarg);
        break;
      case 'n':
        o->count = atol(optarg);
        break;
      case 's':
        o->size = (uint32_t)strtoul(optarg, NULL, 0);
        break;
      case 'r':
        o->retry_cnt = atoi(optarg);
        break;
      case 't':
        o->timeout = atoi(optarg);
        break;
      default:
        return -1;
    }
  }
  if (optind < argc) o->server = argv[optind++];
  if (optind != argc || o->count < 1 || o->size < 1 || o->retry_cnt < 0 || o->retry_cnt > 7 ||
      o->timeout < 1 || o->timeout > 31)
    return -1;
  return 0;
}

// ---- TCP: only for the connection exchange and the final "done" ----

static int tcp_connect(const char* host, int port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  char service[16];
  snprintf(service, sizeof(service), "%d", port);
  if (getaddrinfo(host, service, &hints, &res)) return -1;
  int fd = -1;
  // The server may not listen yet when both sides are started together:
  // try for about five seconds.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    fd = socket(res->ai_family, res->ai_socktype, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      usleep(50 * 1000);
    }
  }
  freeaddrinfo(res);
  return fd;
}

static int tcp_accept(int port) {
  struct addrinfo hints = {
      .ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  struct addrinfo* res;
  char service[16];
  snprintf(service, sizeof(service), "%d", port);
  if (getaddrinfo(NULL, service, &hints, &res)) return -1;
  int one = 1, fd = -1, lfd = socket(res->ai_family, res->ai_socktype, 0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (lfd >= 0 && bind(lfd, res->ai_addr, res->ai_addrlen) == 0 && listen(lfd, 1) == 0)
    fd = accept(lfd, NULL, NULL);
  freeaddrinfo(res);
  if (lfd >= 0) close(lfd);
  return fd;
}

static int read_full(int fd, void* buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char*)buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

// Text, so that the two sides need not agree on byte order or padding.
static int exchange(int fd, const struct peer* mine, struct peer* theirs) {
  char msg[64];
  snprintf(msg, sizeof(msg), "%04x:%06x:%06x:%016llx:%08x", mine->lid, mine->qpn, mine->psn,
           (unsigned long long)mine->addr, mine->rkey);
  if (write(fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg) || read_full(fd, msg, sizeof(msg)))
    return -1;
  unsigned lid, qpn, psn, rkey;
  unsigned long long addr;
  if (sscanf(msg, "%x:%x:%x:%llx:%x", &lid, &qpn, &psn, &addr, &rkey) != 5) return -1;
  *theirs = (struct peer){.lid = lid, .qpn = qpn, .psn = psn, .addr = addr, .rkey = rkey};
  return 0;
}

// ---- verbs ----

static int open_rdma(const struct options* o, size_t buf_size, struct rdma* r) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !r->ctx; ++i)
    if (!o->device || strcmp(ibv_get_device_name(list[i]), o->device) == 0)
      r->ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!r->ctx) {
    fprintf(stderr, "rdma_retry: no IB device %s\n", o->device ? o->device : "at all");
    return -1;
  }
  struct ibv_port_attr port;
  if (ibv_query_port(r->ctx, o->ib_port, &port) || port.state != IBV_PORT_ACTIVE) {
    fprintf(stderr, "rdma_retry: port %d is not ACTIVE\n", o->ib_port);
    return -1;
  }
  r->lid = port.lid;
  r->mtu = port.active_mtu;
  // The server's buffer is read and written by the client: remote access.
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  struct ibv_qp_init_attr qp_attr = {
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 2, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
  };
  if (!(r->buf = calloc(1, buf_size)) || !(r->pd = ibv_alloc_pd(r->ctx)) ||
      !(r->mr = ibv_reg_mr(r->pd, r->buf, buf_size, access)) ||
      !(r->cq = ibv_create_cq(r->ctx, 4, NULL, NULL, 0))) {
    perror("rdma_retry: buffer, PD, MR or CQ");
    return -1;
  }
  qp_attr.send_cq = qp_attr.recv_cq = r->cq;
  if (!(r->qp = ibv_create_qp(r->pd, &qp_attr))) {
    perror("rdma_retry: ibv_create_qp");
    return -1;
  }
  return 0;
}

// RESET -> INIT -> RTR -> RTS. retry_cnt and timeout, set on the way to
// RTS, decide how long this QP keeps resending to a silent peer.
static int connect_qp(const struct options* o, struct rdma* r, uint32_t my_psn,
                      const struct peer* p) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .port_num = o->ib_port,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
  };
  if (ibv_modify_qp(r->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  a = (struct ibv_qp_attr){
      .qp_state = IBV_QPS_RTR,
      .path_mtu = r->mtu,
      .dest_qp_num = p->qpn,
      .rq_psn = p->psn,
      .max_dest_rd_atomic = 1,  // the client reads back one message at a time
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = p->lid, .port_num = o->ib_port},
  };
  if (ibv_modify_qp(r->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  a = (struct ibv_qp_attr){
      .qp_state = IBV_QPS_RTS,
      .timeout = o->timeout,
      .retry_cnt = o->retry_cnt,
      .rnr_retry = 7,
      .sq_psn = my_psn,
      .max_rd_atomic = 1,
  };
  return ibv_modify_qp(r->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void close_rdma(struct rdma* r) {
  // Reverse order of creation; a QP in the error state is destroyed like any other.
  if (r->qp) ibv_destroy_qp(r->qp);
  if (r->mr) ibv_dereg_mr(r->mr);
  if (r->cq) ibv_destroy_cq(r->cq);
  if (r->pd) ibv_dealloc_pd(r->pd);
  if (r->ctx) ibv_close_device(r->ctx);
  free(r->buf);
}

// A pattern that differs for every message, so a stale buffer is caught.
static void fill(char* buf, uint32_t size, long message) {
  for (uint32_t i = 0; i < size; ++i) buf[i] = (char)(message * 31 + i * 7);
}

// Writes message `i` to the server and reads it back: two work requests,
// only the READ signaled. A failed WRITE still completes (errors always do)
// and the READ behind it is flushed, so the first completion tells all.
static int write_and_read_back(const struct options* o, struct rdma* r, const struct peer* p,
                               long i) {
  char* out = r->buf;
  char* back = r->buf + o->size;
  fill(out, o->size, i);
  memset(back, 0, o->size);
  struct ibv_sge out_sge = {(uintptr_t)out, o->size, r->mr->lkey};
  struct ibv_sge back_sge = {(uintptr_t)back, o->size, r->mr->lkey};
  struct ibv_send_wr read_wr = {
      .wr_id = 2 * i + 1,
      .sg_list = &back_sge,
      .num_sge = 1,
      .opcode = IBV_WR_RDMA_READ,
      .send_flags = IBV_SEND_SIGNALED,
      .wr.rdma = {.remote_addr = p->addr, .rkey = p->rkey},
  };
  struct ibv_send_wr write_wr = {
      .wr_id = 2 * i,
      .next = &read_wr,
      .sg_list = &out_sge,
      .num_sge = 1,
      .opcode = IBV_WR_RDMA_WRITE,
      .wr.rdma = {.remote_addr = p->addr, .rkey = p->rkey},
  };
  struct ibv_send_wr* bad;
  if (ibv_post_send(r->qp, &write_wr, &bad)) {
    perror("rdma_retry: ibv_post_send");
    return EXIT_SETUP;
  }
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0) {
  }
  if (n < 0) {
    fprintf(stderr, "rdma_retry: ibv_poll_cq failed\n");
    return EXIT_SETUP;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "rdma_retry: %s of message %ld failed: %s (status %d)\n",
            wc.wr_id % 2 ? "RDMA READ" : "RDMA WRITE", i, ibv_wc_status_str(wc.status), wc.status);
    return wc.status == IBV_WC_RETRY_EXC_ERR ? EXIT_RETRY_EXCEEDED : EXIT_WC_ERROR;
  }
  if (memcmp(out, back, o->size) != 0) {
    fprintf(stderr, "rdma_retry: message %ld read back differs from what was written\n", i);
    return EXIT_MISMATCH;
  }
  return EXIT_OK;
}

int main(int argc, char** argv) {
  struct options o;
  if (parse_options(argc, argv, &o)) {
    usage(argv[0]);
    return EXIT_SETUP;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);  // progress lines reach a pipe at once
  const int client = o.server != NULL;

  struct rdma r = {0};
  int fd = -1, rc = EXIT_SETUP;
  if (open_rdma(&o, client ? 2 * (size_t)o.size : o.size, &r)) goto out;

  fd = client ? tcp_connect(o.server, o.tcp_port) : tcp_accept(o.tcp_port);
  if (fd < 0) {
    fprintf(stderr, "rdma_retry: no TCP connection on port %d\n", o.tcp_port);
    goto out;
  }
  srand48(getpid());
  const struct peer mine = {.lid = r.lid,
                            .qpn = r.qp->qp_num,
                            .psn = lrand48() & 0xffffff,
                            .addr = (uintptr_t)r.buf,
                            .rkey = r.mr->rkey};
  struct peer theirs;
  if (exchange(fd, &mine, &theirs) || connect_qp(&o, &r, mine.psn, &theirs)) {
    fprintf(stderr, "rdma_retry: connecting the QPs failed\n");
    goto out;
  }
  printf("connected: local lid %u qpn %#x, remote lid %u qpn %#x\n", mine.lid, mine.qpn, theirs.lid,
         theirs.qpn);

  if (client) {
    rc = EXIT_OK;
    for (long i = 0; i < o.count && rc == EXIT_OK; ++i)
      rc = write_and_read_back(&o, &r, &theirs, i);
    if (rc == EXIT_OK) {
      printf("%ld messages of %u bytes written and verified\n", o.count, o.size);
      // Only now may the server take its buffer away.
      if (write(fd, "done", 4) != 4) rc = EXIT_SETUP;
    }
  } else {
    // The server's HCA does all the work; the server waits for the client's
    // word that it is finished, or for its connection to go away.
    char word[4];
    if (read_full(fd, word, sizeof(word)) == 0 && memcmp(word, "done", 4) == 0) {
      printf("client finished\n");
      rc = EXIT_OK;
    } else {
      fprintf(stderr, "rdma_retry: the client went away before it finished\n");
    }
  }
out:
  if (fd >= 0) close(fd);
  close_rdma(&r);
  return rc;
}
