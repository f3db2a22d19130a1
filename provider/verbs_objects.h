/*
 * The provider's verbs objects as libibverbs sees them: each embeds the
 * libibverbs structure and points at its C++ counterpart in the core
 * (provider/core_api.h). Shared by the C glue files (verbs_provider.c and the
 * extended API in qp_ex.c and cq_ex.c); C, like provider/verbs_driver.h.
 */
#ifndef IBEMU_VERBS_OBJECTS_H
#define IBEMU_VERBS_OBJECTS_H

#include <infiniband/mlx5dv.h>
#include <pthread.h>
#include <stdatomic.h>

#include "provider/core_api.h"
#include "provider/verbs_driver.h"

struct ibemu_device {
  struct verbs_device vdev;
};

struct ibemu_context {
  struct verbs_context vctx;
  struct ibemu_core_context* core;
  /* One while the context is open, one per PD, CQ and XRC domain made on
   * it (which in turn keep the objects on them): see ibemu_hold_context. */
  atomic_int refs;
};

struct ibemu_pd {
  struct ibv_pd pd;
  uint32_t id;
  atomic_int users; /* MRs, MWs, AHs, SRQs and QPs on it */
};

struct ibemu_cq {
  struct verbs_cq vcq;
  struct ibemu_core_cq* core;
  /* Extended CQs only (cq_ex.c). */
  bool is_ex;
  bool single_threaded;      /* IBV_CREATE_CQ_ATTR_SINGLE_THREADED: no poll lock */
  pthread_mutex_t poll_lock; /* held from start_poll to end_poll */
  struct ibv_wc cur;         /* the completion start_poll/next_poll moved to */
};

struct ibemu_qp {
  struct verbs_qp vqp;
  struct ibemu_core_qp* core;
  /* QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS only (qp_ex.c). */
  struct ibemu_core_wr_builder* wr;
  /* DC QPs (mlx5dv_create_qp): enum ibemu_core_dc_type, 0 for others; a
   * DCI's mlx5dv_qp_ex (wr_set_dc_addr) for mlx5dv_qp_ex_from_ibv_qp_ex. */
  int dc_type;
  struct mlx5dv_qp_ex dv;
};

struct ibemu_srq {
  struct verbs_srq vsrq; /* first: an ibv_srq* points here */
  struct ibemu_core_srq* core;
};

struct ibemu_xrcd {
  struct verbs_xrcd vxrcd; /* first: an ibv_xrcd* points here */
  uint32_t id;             /* the daemon's number for the domain */
  atomic_int users;        /* XRC SRQs, receive QPs and QP handles on it */
};

static inline struct ibemu_context* to_ctx(struct ibv_context* c) {
  return IBEMU_CONTAINER_OF(c, struct ibemu_context, vctx.context);
}
static inline struct ibemu_pd* to_pd(struct ibv_pd* p) {
  return IBEMU_CONTAINER_OF(p, struct ibemu_pd, pd);
}
static inline struct ibemu_cq* to_cq(struct ibv_cq* c) {
  return IBEMU_CONTAINER_OF(c, struct ibemu_cq, vcq.cq);
}
static inline struct ibemu_cq* to_cq_ex(struct ibv_cq_ex* c) {
  return IBEMU_CONTAINER_OF(c, struct ibemu_cq, vcq.cq_ex);
}
static inline struct ibemu_qp* to_qp(struct ibv_qp* q) {
  return IBEMU_CONTAINER_OF(q, struct ibemu_qp, vqp.qp);
}
static inline struct ibemu_qp* to_qp_ex(struct ibv_qp_ex* q) {
  return IBEMU_CONTAINER_OF(q, struct ibemu_qp, vqp.qp_ex);
}

/* verbs_provider.c: whether `device` is one of ibemu's, and QP creation
 * with the DC attributes of mlx5dv_create_qp (dc NULL for other QPs). */
bool ibemu_owns_device(struct ibv_device* device);
struct ibv_qp* ibemu_create_qp_with(struct ibv_context* c, struct ibv_qp_init_attr_ex* attr,
                                    const struct ibemu_core_dc* dc);

/* verbs_provider.c: the context's verbs; verb_trace_ops.c: the same, each
 * traced (IBEMU_TRACE=verbs). */
extern const struct verbs_context_ops ibemu_ctx_ops;
extern const struct verbs_context_ops ibemu_traced_ctx_ops;

/* qp_ex.c: the ibv_wr_* API. ibemu_qp_ex_check refuses send_ops_flags the
 * device does not offer for the QP type (before anything is allocated);
 * ibemu_qp_ex_init gives a created QP its builder and function pointers
 * (attr->cap holds the granted capabilities). */
int ibemu_qp_ex_check(const struct ibv_qp_init_attr_ex* attr);
int ibemu_qp_ex_init(struct ibemu_qp* qp, const struct ibv_qp_init_attr_ex* attr);
void ibemu_qp_ex_fini(struct ibemu_qp* qp);

/* cq_ex.c: ibv_create_cq_ex and the ibv_cq_ex polling API. */
struct ibv_cq_ex* ibemu_create_cq_ex(struct ibv_context* c, struct ibv_cq_init_attr_ex* attr);
/* An object that needs the context was made on it / is gone. */
void ibemu_hold_context(struct ibv_context* c);
void ibemu_release_context(struct ibv_context* c);
void ibemu_cq_ex_fini(struct ibemu_cq* cq);

#endif
