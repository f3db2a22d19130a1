/*
 * rc_bulk: moves MiB of data over an RC connection by RDMA WRITE and by
 * SEND, in 1 MiB work requests with a window outstanding, and checks that
 * every byte arrived and every work request completed exactly once with
 * success. Made for lossy links (ibemu fault): prints
 *   write N MiB ok
 *   send N MiB ok
 * and exits 0, or says what went wrong and exits 1 (2 for a bad command
 * line).
 *
 *   rc_bulk [-m MiB] [-t timeout] [-w]
 *   rc_bulk [-m MiB] [-t timeout] [-d dev] [-p tcp_port] -S
 *   rc_bulk [-m MiB] [-t timeout] [-d dev] [-p tcp_port] -C server_host
 *
 * Without -S or -C, one process holds both ends: a QP on ibemu0 sends to one
 * on ibemu1, the two HCAs' links in between. With -w it prints "qpn A B" (the
 * QP numbers on ibemu0 and ibemu1) once connected and waits for a line on
 * stdin before it starts.
 *
 * With -S (server, the receiving end) or -C (client, the sending end) the two
 * ends are two processes, on one host or two, each on its device -d (default
 * ibemu0). They meet on TCP port -p (default 19878; the server listens, the
 * client connects to server_host), exchange what connects their QPs and then
 * go in lockstep, one round at a time: the server readies its buffer and says
 * "ready", the client sends the round and says "done", the server checks
 * every byte and answers "ok" or "fail". Both must be given the same -m.
 *
 * -m is a multiple of 32 (default 1024); -t is the local ACK timeout
 * exponent (default 14).
 */
#include <getopt.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rc_common.h"

#define CHUNK (1u << 20)
#define ROUND_CHUNKS 32 /* a round moves 32 MiB, then checks it */
#define ROUND_BYTES ((size_t)ROUND_CHUNKS * CHUNK)
#define WINDOW 8
#define WORD 8 /* bytes of one lockstep message on the TCP connection */
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* buf;
  uint16_t lid;
};

/* What one process tells the other before they connect. */
struct peer {
  uint64_t addr;
  uint32_t rkey;
  uint32_t qpn;
  uint32_t mib; /* the rounds must match, or the lockstep would hang */
  uint16_t lid;
} __attribute__((packed));

static void die(const char* what) {
  fprintf(stderr, "rc_bulk: %s\n", what);
  exit(1);
}

static struct ibv_context* open_device(const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) return ibv_open_device(list[i]);
  die("no such device");
  return NULL;
}

static void make_side(struct side* s, const char* dev) {
  s->ctx = open_device(dev);
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 2 * WINDOW + ROUND_CHUNKS, NULL, NULL, 0);
  s->buf = malloc(ROUND_BYTES);
  if (!s->pd || !s->cq || !s->buf) die("resources");
  s->mr = ibv_reg_mr(s->pd, s->buf, ROUND_BYTES, ACCESS);
  struct ibv_qp_init_attr init = {.send_cq = s->cq,
                                  .recv_cq = s->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = WINDOW,
                                          .max_recv_wr = ROUND_CHUNKS,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1}};
  s->qp = ibv_create_qp(s->pd, &init);
  struct ibv_port_attr pa;
  if (!s->mr || !s->qp || ibv_query_port(s->ctx, 1, &pa)) die("QP");
  s->lid = pa.lid;
}

/* The byte at `offset` of the whole transfer: every MiB differs. */
static void fill(uint8_t* p, uint64_t offset, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = (offset + i) * 0x9e3779b97f4a7c15ull;
    memcpy(p + i, &v, 8);
  }
}

/* Waits for one completion on s; its wr_id must not have completed before. */
static void complete_one(struct side* s, uint8_t* done, enum ibv_wc_opcode op) {
  struct ibv_wc wc;
  while (ibv_poll_cq(s->cq, 1, &wc) == 0) {
  }
  if (wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "rc_bulk: %s for wr %llu\n", ibv_wc_status_str(wc.status),
            (unsigned long long)wc.wr_id);
    exit(1);
  }
  if (wc.opcode != op || wc.wr_id >= ROUND_CHUNKS || done[wc.wr_id]++) die("a WR completed twice");
}

static void post(struct side* s, enum ibv_wr_opcode op, uint32_t chunk, uint64_t raddr,
                 uint32_t rkey) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + (size_t)chunk * CHUNK), CHUNK, s->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = chunk,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(s->qp, &wr, &bad)) die("ibv_post_send");
}

static void post_recv(struct side* s, uint32_t chunk) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + (size_t)chunk * CHUNK), CHUNK, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = chunk, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s->qp, &wr, &bad)) die("ibv_post_recv");
}

/* A round is three steps, the same in one process and in two; between
 * processes the lockstep messages order them. */

/* Receiving end, before the round: a zeroed buffer, so that a byte that
 * never arrives shows, and for SEND a receive per chunk, posted before the
 * first SEND can arrive. */
static void receive_prepare(struct side* s, int use_send) {
  memset(s->buf, 0, ROUND_BYTES);
  if (use_send)
    for (uint32_t c = 0; c < ROUND_CHUNKS; ++c) post_recv(s, c);
}

/* Sending end: the round's ROUND_CHUNKS MiB from offset `base` of the
 * transfer into the buffer at (raddr, rkey), each WR completing exactly once
 * with success. */
static void send_round(struct side* s, int use_send, uint64_t base, uint64_t raddr, uint32_t rkey) {
  uint8_t sent[ROUND_CHUNKS] = {0};
  fill(s->buf, base, ROUND_BYTES);
  uint32_t posted = 0, completed = 0;
  while (completed < ROUND_CHUNKS) {
    while (posted < ROUND_CHUNKS && posted - completed < WINDOW) {
      post(s, use_send ? IBV_WR_SEND : IBV_WR_RDMA_WRITE, posted, raddr + (uint64_t)posted * CHUNK,
           rkey);
      ++posted;
    }
    complete_one(s, sent, use_send ? IBV_WC_SEND : IBV_WC_RDMA_WRITE);
    ++completed;
  }
}

/* Receiving end, once the sender has seen all its WRs complete: for SEND
 * each receive completes once, and every byte is what the sender filled in.
 * Returns -1, or the MiB of the transfer where the data first differ. */
static long receive_check(struct side* s, int use_send, uint64_t base) {
  uint8_t received[ROUND_CHUNKS] = {0};
  if (use_send)
    for (uint32_t c = 0; c < ROUND_CHUNKS; ++c) complete_one(s, received, IBV_WC_RECV);
  uint8_t* expect = malloc(CHUNK);
  long bad = -1;
  for (uint32_t c = 0; c < ROUND_CHUNKS && bad < 0; ++c) {
    fill(expect, base + (uint64_t)c * CHUNK, CHUNK);
    if (memcmp(expect, s->buf + (size_t)c * CHUNK, CHUNK)) bad = (long)(base / CHUNK) + c;
  }
  free(expect);
  return bad;
}

static void data_differ(long mib) {
  fprintf(stderr, "rc_bulk: data differ in MiB %ld\n", mib);
  exit(1);
}

/* One round in one process: from a to b. */
static void round_trip(struct side* a, struct side* b, int use_send, uint64_t base) {
  receive_prepare(b, use_send);
  send_round(a, use_send, base, (uintptr_t)b->buf, b->mr->rkey);
  long bad = receive_check(b, use_send, base);
  if (bad >= 0) data_differ(bad);
}

static void one_process(int mib, int timeout, int wait_for_go) {
  struct side a, b;
  make_side(&a, "ibemu0");
  make_side(&b, "ibemu1");
  if (connect_rc_qp(a.qp, b.qp->qp_num, b.lid, IBV_MTU_4096, timeout, 7, ACCESS) ||
      connect_rc_qp(b.qp, a.qp->qp_num, a.lid, IBV_MTU_4096, timeout, 7, ACCESS))
    die("connect");
  if (wait_for_go) {
    printf("qpn %#x %#x\n", a.qp->qp_num, b.qp->qp_num);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) die("stdin closed");
  }
  for (int use_send = 0; use_send < 2; ++use_send) {
    for (int r = 0; r < mib / ROUND_CHUNKS; ++r)
      round_trip(&a, &b, use_send, (uint64_t)r * ROUND_BYTES);
    printf("%s %d MiB ok\n", use_send ? "send" : "write", mib);
    fflush(stdout);
  }
}

/* Lockstep messages: NUL-padded words of WORD bytes. */
static void tell(int fd, const char* word) {
  char out[WORD] = {0};
  strncpy(out, word, WORD - 1);
  if (write(fd, out, WORD) != WORD) die("cannot write to the peer over TCP");
}

/* Reads the peer's next word into word[WORD]. The peer's end of the TCP
 * connection closing (it died) is an error, not a hang. */
static void hear(int fd, char* word) {
  size_t got = 0;
  while (got < WORD) {
    ssize_t r = read(fd, word + got, WORD - got);
    if (r <= 0) die("the peer closed the TCP connection");
    got += r;
  }
  word[WORD - 1] = 0;
}

static void expect(int fd, const char* want) {
  char word[WORD];
  hear(fd, word);
  if (strcmp(word, want)) {
    fprintf(stderr, "rc_bulk: the peer said \"%s\", not \"%s\"\n", word, want);
    exit(1);
  }
}

/* One end of the two-process mode: the server (server_host NULL) receives,
 * the client sends. */
static void two_process(const char* dev, const char* server_host, int tcp_port, int mib,
                        int timeout) {
  /* A write to the connection of a peer that died must fail, not kill us
   * without a word. */
  signal(SIGPIPE, SIG_IGN);
  struct side s;
  make_side(&s, dev);
  struct peer me = {(uintptr_t)s.buf, s.mr->rkey, s.qp->qp_num, (uint32_t)mib, s.lid}, them;
  int fd = tcp_connect(server_host, tcp_port);
  if (fd < 0) die("no TCP connection to the peer");
  if (exchange(fd, &me, &them, sizeof(me))) die("the peer closed the TCP connection");
  if (them.mib != (uint32_t)mib) die("the peers were given different -m");
  if (connect_rc_qp(s.qp, them.qpn, them.lid, IBV_MTU_4096, timeout, 7, ACCESS)) die("connect");
  /* The server's first "ready" also tells the client that the server's QP
   * is connected: no SEND or WRITE reaches a QP that is not yet in RTR. */
  for (int use_send = 0; use_send < 2; ++use_send) {
    for (int r = 0; r < mib / ROUND_CHUNKS; ++r) {
      uint64_t base = (uint64_t)r * ROUND_BYTES;
      if (!server_host) {
        receive_prepare(&s, use_send);
        tell(fd, "ready");
        /* Only the client knows when its WRITEs have landed; and waiting for
         * its word rather than for receive completions means a client that
         * dies mid-round ends the server too. */
        expect(fd, "done");
        long bad = receive_check(&s, use_send, base);
        tell(fd, bad < 0 ? "ok" : "fail");
        if (bad >= 0) data_differ(bad);
      } else {
        expect(fd, "ready");
        send_round(&s, use_send, base, them.addr, them.rkey);
        tell(fd, "done");
        char verdict[WORD];
        hear(fd, verdict);
        if (!strcmp(verdict, "fail")) die("the server found the data differ");
        if (strcmp(verdict, "ok")) die("the server said neither ok nor fail");
      }
    }
    printf("%s %d MiB ok\n", use_send ? "send" : "write", mib);
    fflush(stdout);
  }
  close(fd);
}

static int usage(void) {
  fprintf(stderr,
          "usage: rc_bulk [-m MiB] [-t timeout] [-w]\n"
          "       rc_bulk [-m MiB] [-t timeout] [-d dev] [-p tcp_port] -S\n"
          "       rc_bulk [-m MiB] [-t timeout] [-d dev] [-p tcp_port] -C server_host\n");
  return 2;
}

int main(int argc, char** argv) {
  int mib = 1024, timeout = 14, wait_for_go = 0, tcp_port = -1, server = 0, c;
  const char *dev = NULL, *server_host = NULL;
  while ((c = getopt(argc, argv, "m:t:wd:p:SC:")) != -1) {
    if (c == 'm')
      mib = atoi(optarg);
    else if (c == 't')
      timeout = atoi(optarg);
    else if (c == 'w')
      wait_for_go = 1;
    else if (c == 'd')
      dev = optarg;
    else if (c == 'p')
      tcp_port = atoi(optarg);
    else if (c == 'S')
      server = 1;
    else if (c == 'C')
      server_host = optarg;
    else
      return usage();
  }
  const int two = server || server_host;
  /* -d and -p mean nothing to one process, -w nothing to two: refuse them
   * rather than let a mistyped command line run the other mode. */
  if (optind < argc || (server && server_host) || (two && wait_for_go) ||
      (!two && (dev || tcp_port >= 0)))
    return usage();
  if (mib < ROUND_CHUNKS || mib % ROUND_CHUNKS) die("-m must be a multiple of 32");
  if (two)
    two_process(dev ? dev : "ibemu0", server_host, tcp_port < 0 ? 19878 : tcp_port, mib, timeout);
  else
    one_process(mib, timeout, wait_for_go);
  return 0;
}
