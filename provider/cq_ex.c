/*
 * ibv_create_cq_ex and the polling API of struct ibv_cq_ex. The CQ is the
 * same core CQ a classic one is (so ibv_poll_cq works on it too); start_poll
 * and next_poll move one completion at a time out of it through
 * ibemu_core_poll_cq, which also drives progress and yields after many empty
 * polls. Only the read_* functions for the wc_flags asked for are installed,
 * as rxe and mlx5 do.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "provider/verb_trace.h"
#include "provider/verbs_objects.h"

/* wc_flags ibemu can report: everything of struct ibv_wc. Completion
 * timestamps, CVLAN, flow tags and tag matching are not offered. */
#define IBEMU_CQ_WC_FLAGS                                                                         \
  (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
   IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

/* Moves to the next completion; the poll lock (if any) is held. */
static int cq_advance(struct ibemu_cq* cq) {
  int n = ibemu_core_poll_cq(cq->core, 1, &cq->cur);
  if (n < 0) return -n;
  if (n == 0) return ENOENT;
  cq->vcq.cq_ex.status = cq->cur.status;
  cq->vcq.cq_ex.wr_id = cq->cur.wr_id;
  return 0;
}

static int cq_start_poll(struct ibv_cq_ex* ibcq, struct ibv_poll_cq_attr* attr) {
  struct ibemu_cq* cq = to_cq_ex(ibcq);
  int err;
  if (attr && attr->comp_mask) return EINVAL;
  if (!cq->single_threaded) pthread_mutex_lock(&cq->poll_lock);
  err = cq_advance(cq);
  /* After a failed start_poll the caller does not call end_poll. */
  if (err && !cq->single_threaded) pthread_mutex_unlock(&cq->poll_lock);
  return err;
}

static int cq_next_poll(struct ibv_cq_ex* ibcq) { return cq_advance(to_cq_ex(ibcq)); }

/* IBEMU_TRACE=verbs: installed instead of the two above while verbs are traced. */
static int traced_start_poll(struct ibv_cq_ex* ibcq, struct ibv_poll_cq_attr* attr) {
  int err = cq_start_poll(ibcq, attr);
  ibemu_trace_poll_cq_ex("ibv_start_poll", ibcq, &to_cq_ex(ibcq)->cur, err);
  return err;
}

static int traced_next_poll(struct ibv_cq_ex* ibcq) {
  int err = cq_next_poll(ibcq);
  ibemu_trace_poll_cq_ex("ibv_next_poll", ibcq, &to_cq_ex(ibcq)->cur, err);
  return err;
}

static void cq_end_poll(struct ibv_cq_ex* ibcq) {
  struct ibemu_cq* cq = to_cq_ex(ibcq);
  if (!cq->single_threaded) pthread_mutex_unlock(&cq->poll_lock);
}

static enum ibv_wc_opcode cq_read_opcode(struct ibv_cq_ex* ibcq) {
  return to_cq_ex(ibcq)->cur.opcode;
}

static uint32_t cq_read_vendor_err(struct ibv_cq_ex* ibcq) {
  return to_cq_ex(ibcq)->cur.vendor_err;
}

static uint32_t cq_read_byte_len(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.byte_len; }

/* Also ibv_wc_read_invalidated_rkey: ibv_wc keeps both in one union. */
static __be32 cq_read_imm_data(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.imm_data; }

static uint32_t cq_read_qp_num(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.qp_num; }

static uint32_t cq_read_src_qp(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.src_qp; }

static unsigned int cq_read_wc_flags(struct ibv_cq_ex* ibcq) {
  return to_cq_ex(ibcq)->cur.wc_flags;
}

static uint32_t cq_read_slid(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.slid; }

static uint8_t cq_read_sl(struct ibv_cq_ex* ibcq) { return to_cq_ex(ibcq)->cur.sl; }

static uint8_t cq_read_dlid_path_bits(struct ibv_cq_ex* ibcq) {
  return to_cq_ex(ibcq)->cur.dlid_path_bits;
}

/* The errno for attributes this provider does not accept: unknown bits are
 * EINVAL, known features it does not offer EOPNOTSUPP (as mlx5 does). */
static int check_cq_attr(struct ibv_context* c, const struct ibv_cq_init_attr_ex* attr) {
  const uint32_t known_masks = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  const uint32_t known_flags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if (attr->comp_mask & ~known_masks) return EINVAL;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) return EOPNOTSUPP; /* no parent domains */
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    if (attr->flags & ~known_flags) return EINVAL;
    if (attr->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) return EOPNOTSUPP;
  }
  if (attr->wc_flags & ~(uint64_t)IBEMU_CQ_WC_FLAGS) return EOPNOTSUPP;
  if (attr->comp_vector >= (uint32_t)c->num_comp_vectors) return EINVAL;
  if (attr->cqe > INT_MAX) return EINVAL;
  return 0;
}

struct ibv_cq_ex* ibemu_create_cq_ex(struct ibv_context* c, struct ibv_cq_init_attr_ex* attr) {
  struct ibemu_cq* cq;
  struct ibv_cq_ex* cqx;
  int err = check_cq_attr(c, attr);
  if (err) {
    errno = err;
    return NULL;
  }
  cq = calloc(1, sizeof(*cq));
  if (!cq) {
    errno = ENOMEM;
    return NULL;
  }
  cqx = &cq->vcq.cq_ex;
  cq->core = ibemu_core_create_cq(to_ctx(c)->core, (int)attr->cqe, ibv_cq_ex_to_cq(cqx),
                                  attr->channel ? attr->channel->fd : -1, &err);
  if (!cq->core) {
    free(cq);
    errno = err;
    return NULL;
  }
  cq->is_ex = true;
  cq->single_threaded = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                        (attr->flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
  pthread_mutex_init(&cq->poll_lock, NULL);
  /* context, channel (and its reference count), cq_context, the event
   * counters, mutex and cond are libibverbs' to set: its create_cq_ex wrapper
   * calls verbs_init_cq after this returns, as it does for create_cq. Calling
   * it here too would count the channel twice and keep it busy forever. */
  cqx->cqe = (int)attr->cqe;
  const bool traced = ibemu_trace_verbs_on();
  cqx->start_poll = traced ? traced_start_poll : cq_start_poll;
  cqx->next_poll = traced ? traced_next_poll : cq_next_poll;
  cqx->end_poll = cq_end_poll;
  cqx->read_opcode = cq_read_opcode;
  cqx->read_vendor_err = cq_read_vendor_err;
  cqx->read_wc_flags = cq_read_wc_flags;
  if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN) cqx->read_byte_len = cq_read_byte_len;
  if (attr->wc_flags & IBV_WC_EX_WITH_IMM) cqx->read_imm_data = cq_read_imm_data;
  if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM) cqx->read_qp_num = cq_read_qp_num;
  if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP) cqx->read_src_qp = cq_read_src_qp;
  if (attr->wc_flags & IBV_WC_EX_WITH_SLID) cqx->read_slid = cq_read_slid;
  if (attr->wc_flags & IBV_WC_EX_WITH_SL) cqx->read_sl = cq_read_sl;
  if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
    cqx->read_dlid_path_bits = cq_read_dlid_path_bits;
  ibemu_hold_context(c);
  return cqx;
}

void ibemu_cq_ex_fini(struct ibemu_cq* cq) {
  if (cq->is_ex) pthread_mutex_destroy(&cq->poll_lock);
}
