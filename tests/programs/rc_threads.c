/*
 * rc_threads: several threads post and poll at once. One process opens two
 * HCAs (default ibemu0 and ibemu1), connects T pairs of RC QPs between them
 * whose completions all go to one CQ per side, and runs T threads; each
 * thread sends N messages on its own QP while every thread also polls both
 * shared CQs and reposts receives on whichever QP a completion names. At the
 * end each QP must have sent and received exactly N messages with the right
 * contents. Prints "ok T x N" and exits 0, or explains what went wrong.
 *
 *   rc_threads [-t threads] [-n messages] [-s size] [dev_a dev_b]
 */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rc_common.h"

#define MAX_THREADS 16
#define DEPTH 8

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp[MAX_THREADS];
  struct ibv_mr* mr;
  uint8_t* buf; /* per QP: DEPTH receive slots + 1 send slot */
  uint16_t lid;
};

static int threads = 4, count = 2000, size = 1024;
static struct side a, b;
static atomic_long sent[MAX_THREADS], received[MAX_THREADS], errors;
static atomic_int finished_senders;

static uint8_t* slot(struct side* s, int q, int i) {
  return s->buf + ((size_t)q * (DEPTH + 1) + i) * size;
}

static int qp_index(struct side* s, uint32_t qpn) {
  for (int q = 0; q < threads; ++q)
    if (s->qp[q]->qp_num == qpn) return q;
  return -1;
}

static void post_recv(struct side* s, int q, int i) {
  struct ibv_sge sge = {(uintptr_t)slot(s, q, i), size, s->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = (uint64_t)q << 32 | i, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s->qp[q], &wr, &bad)) atomic_fetch_add(&errors, 1);
}

static void poll_side(struct side* s) {
  struct ibv_wc wc[4];
  int n = ibv_poll_cq(s->cq, 4, wc);
  for (int k = 0; k < n; ++k) {
    if (wc[k].status != IBV_WC_SUCCESS) {
      fprintf(stderr, "completion error: %s\n", ibv_wc_status_str(wc[k].status));
      atomic_fetch_add(&errors, 1);
      continue;
    }
    int q = qp_index(s, wc[k].qp_num);
    if (q < 0) {
      atomic_fetch_add(&errors, 1);
      continue;
    }
    if (wc[k].opcode == IBV_WC_RECV) {
      int i = (int)(wc[k].wr_id & 0xffffffff);
      uint8_t* p = slot(s, q, i);
      /* Each message is filled with (qp index + its sequence) bytes. */
      if (wc[k].byte_len != (uint32_t)size || p[0] != p[size - 1] || p[0] == 0)
        atomic_fetch_add(&errors, 1);
      atomic_fetch_add(&received[q], 1);
      post_recv(s, q, i);
    } else {
      atomic_fetch_add(&sent[q], 1);
    }
  }
}

static void* worker(void* arg) {
  int q = (int)(intptr_t)arg;
  long posted = 0;
  uint8_t* src = slot(&a, q, DEPTH);
  for (;;) {
    if (posted < count && posted - atomic_load(&sent[q]) < DEPTH / 2 &&
        posted - atomic_load(&received[q]) < DEPTH / 2) {
      memset(src, (int)((q + posted) % 255) + 1, size);
      struct ibv_sge sge = {(uintptr_t)src, size, a.mr->lkey};
      struct ibv_send_wr wr = {.wr_id = posted,
                               .sg_list = &sge,
                               .num_sge = 1,
                               .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED},
                         *bad;
      /* The source slot is reused only after the previous send completed. */
      while (atomic_load(&sent[q]) < posted) {
        poll_side(&a);
        poll_side(&b);
      }
      if (ibv_post_send(a.qp[q], &wr, &bad)) {
        atomic_fetch_add(&errors, 1);
        break;
      }
      if (++posted == count) atomic_fetch_add(&finished_senders, 1);
    }
    poll_side(&a);
    poll_side(&b);
    if (atomic_load(&errors)) break;
    if (atomic_load(&finished_senders) == threads) {
      int all = 1;
      for (int i = 0; i < threads; ++i)
        all &= atomic_load(&received[i]) == count && atomic_load(&sent[i]) == count;
      if (all) break;
    }
  }
  return NULL;
}

static int open_side(struct side* s, const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  for (int i = 0; list && list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) s->ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  if (!s->ctx) return -1;
  struct ibv_port_attr pa;
  if (ibv_query_port(s->ctx, 1, &pa)) return -1;
  s->lid = pa.lid;
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, threads * (DEPTH + 2) * 2, NULL, NULL, 0);
  s->buf = calloc((size_t)threads * (DEPTH + 1), size);
  s->mr = ibv_reg_mr(s->pd, s->buf, (size_t)threads * (DEPTH + 1) * size, IBV_ACCESS_LOCAL_WRITE);
  if (!s->pd || !s->cq || !s->mr) return -1;
  for (int q = 0; q < threads; ++q) {
    struct ibv_qp_init_attr init = {
        .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC, .cap = {DEPTH, DEPTH, 1, 1, 0}};
    if (!(s->qp[q] = ibv_create_qp(s->pd, &init))) return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int c;
  while ((c = getopt(argc, argv, "t:n:s:")) != -1) {
    if (c == 't')
      threads = atoi(optarg);
    else if (c == 'n')
      count = atoi(optarg);
    else if (c == 's')
      size = atoi(optarg);
    else
      return 2;
  }
  if (threads < 1 || threads > MAX_THREADS || size < 1) return 2;
  const char* dev_a = optind < argc ? argv[optind] : "ibemu0";
  const char* dev_b = optind + 1 < argc ? argv[optind + 1] : "ibemu1";
  if (open_side(&a, dev_a) || open_side(&b, dev_b)) {
    perror("setup");
    return 2;
  }
  for (int q = 0; q < threads; ++q) {
    if (connect_rc_qp(a.qp[q], b.qp[q]->qp_num, b.lid, IBV_MTU_1024, 14, 7,
                      IBV_ACCESS_LOCAL_WRITE) ||
        connect_rc_qp(b.qp[q], a.qp[q]->qp_num, a.lid, IBV_MTU_1024, 14, 7,
                      IBV_ACCESS_LOCAL_WRITE)) {
      perror("connect");
      return 2;
    }
    for (int i = 0; i < DEPTH; ++i) post_recv(&b, q, i);
  }
  pthread_t tid[MAX_THREADS];
  for (int q = 0; q < threads; ++q) pthread_create(&tid[q], NULL, worker, (void*)(intptr_t)q);
  for (int q = 0; q < threads; ++q) pthread_join(tid[q], NULL);
  int bad = atomic_load(&errors) != 0;
  for (int q = 0; q < threads; ++q)
    if (atomic_load(&sent[q]) != count || atomic_load(&received[q]) != count) {
      fprintf(stderr, "QP %d: sent %ld received %ld of %d\n", q, atomic_load(&sent[q]),
              atomic_load(&received[q]), count);
      bad = 1;
    }
  if (bad) {
    fprintf(stderr, "FAILED (%ld errors)\n", atomic_load(&errors));
    return 1;
  }
  printf("ok %d x %d\n", threads, count);
  return 0;
}
