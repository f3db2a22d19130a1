/*
 * The ibv_wr_* API (struct ibv_qp_ex) of QPs created with
 * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS. Each function pointer reads wr_id and
 * wr_flags from the ibv_qp_ex when it is called (verbs.h) and hands the WR to
 * the core's builder (provider/core_api.h), which posts the region at
 * wr_complete. Only the operations asked for in send_ops_flags are installed,
 * as rxe does; wr_set_ud_addr is there for UD QPs only, wr_set_xrc_srqn for
 * XRC send QPs only.
 */
#include <errno.h>
#include <string.h>

#include "provider/verbs_objects.h"

static struct ibemu_core_wr_builder* wrb(struct ibv_qp_ex* qpx) { return to_qp_ex(qpx)->wr; }

static void wr_op(struct ibv_qp_ex* qpx, enum ibv_wr_opcode opcode, uint32_t rkey,
                  uint64_t remote_addr, uint32_t imm_or_rkey, uint64_t compare_add, uint64_t swap) {
  struct ibemu_core_wr wr = {
      .wr_id = qpx->wr_id,
      .flags = qpx->wr_flags,
      .opcode = opcode,
      .imm_or_rkey = imm_or_rkey,
      .rkey = rkey,
      .remote_addr = remote_addr,
      .compare_add = compare_add,
      .swap = swap,
  };
  ibemu_core_wr_op(wrb(qpx), &wr);
}

static void wr_send(struct ibv_qp_ex* qpx) { wr_op(qpx, IBV_WR_SEND, 0, 0, 0, 0, 0); }

static void wr_send_imm(struct ibv_qp_ex* qpx, __be32 imm_data) {
  wr_op(qpx, IBV_WR_SEND_WITH_IMM, 0, 0, imm_data, 0, 0);
}

static void wr_send_inv(struct ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  wr_op(qpx, IBV_WR_SEND_WITH_INV, 0, 0, invalidate_rkey, 0, 0);
}

static void wr_rdma_write(struct ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  wr_op(qpx, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0, 0, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                              __be32 imm_data) {
  wr_op(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm_data, 0, 0);
}

static void wr_rdma_read(struct ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  wr_op(qpx, IBV_WR_RDMA_READ, rkey, remote_addr, 0, 0, 0);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                              uint64_t compare, uint64_t swap) {
  wr_op(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr, 0, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                                uint64_t add) {
  wr_op(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, 0, add, 0);
}

static void wr_local_inv(struct ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  wr_op(qpx, IBV_WR_LOCAL_INV, 0, 0, invalidate_rkey, 0, 0);
}

static void wr_bind_mw(struct ibv_qp_ex* qpx, struct ibv_mw* mw, uint32_t rkey,
                       const struct ibv_mw_bind_info* info) {
  struct ibemu_core_wr wr = {
      .wr_id = qpx->wr_id,
      .flags = qpx->wr_flags,
      .opcode = IBV_WR_BIND_MW,
      .rkey = rkey,
      .bind = {.mw_rkey = mw ? mw->rkey : 0,
               .mr_lkey = info->mr ? info->mr->lkey : 0,
               .access = info->mw_access_flags,
               .addr = info->addr,
               .length = info->length},
  };
  ibemu_core_wr_op(wrb(qpx), &wr);
}

static void wr_set_ud_addr(struct ibv_qp_ex* qpx, struct ibv_ah* ah, uint32_t remote_qpn,
                           uint32_t remote_qkey) {
  ibemu_core_wr_set_ud_addr(wrb(qpx), (const struct ibemu_ah*)ah, remote_qpn, remote_qkey);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex* qpx, uint32_t remote_srqn) {
  ibemu_core_wr_set_xrc_srqn(wrb(qpx), remote_srqn);
}

/* DCI: the WR's target DCT. DCI streams are a ConnectX scheduling hint;
 * ibemu runs every stream in order on the one DCI, which they allow. */
static void wr_set_dc_addr(struct mlx5dv_qp_ex* mqp, struct ibv_ah* ah, uint32_t remote_dctn,
                           uint64_t remote_dc_key) {
  struct ibemu_qp* qp = IBEMU_CONTAINER_OF(mqp, struct ibemu_qp, dv);
  ibemu_core_wr_set_dc_addr(qp->wr, (const struct ibemu_ah*)ah, remote_dctn, remote_dc_key);
}

static void wr_set_dc_addr_stream(struct mlx5dv_qp_ex* mqp, struct ibv_ah* ah, uint32_t remote_dctn,
                                  uint64_t remote_dc_key, uint16_t stream_id) {
  (void)stream_id;
  wr_set_dc_addr(mqp, ah, remote_dctn, remote_dc_key);
}

static void wr_set_sge(struct ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
  ibemu_core_wr_set_sges(wrb(qpx), &sge, 1);
}

static void wr_set_sge_list(struct ibv_qp_ex* qpx, size_t num_sge, const struct ibv_sge* sg_list) {
  ibemu_core_wr_set_sges(wrb(qpx), sg_list, num_sge);
}

static void wr_set_inline_data(struct ibv_qp_ex* qpx, void* addr, size_t length) {
  struct ibv_data_buf buf = {.addr = addr, .length = length};
  ibemu_core_wr_set_inline(wrb(qpx), &buf, 1);
}

static void wr_set_inline_data_list(struct ibv_qp_ex* qpx, size_t num_buf,
                                    const struct ibv_data_buf* buf_list) {
  ibemu_core_wr_set_inline(wrb(qpx), buf_list, num_buf);
}

static void wr_start(struct ibv_qp_ex* qpx) { ibemu_core_wr_start(wrb(qpx)); }

static int wr_complete(struct ibv_qp_ex* qpx) { return ibemu_core_wr_complete(wrb(qpx)); }

static void wr_abort(struct ibv_qp_ex* qpx) { ibemu_core_wr_abort(wrb(qpx)); }

int ibemu_qp_ex_check(const struct ibv_qp_init_attr_ex* attr) {
  if (attr->send_ops_flags & ~ibemu_core_wr_ops_supported(attr->qp_type)) return EOPNOTSUPP;
  return 0;
}

int ibemu_qp_ex_init(struct ibemu_qp* qp, const struct ibv_qp_init_attr_ex* attr) {
  struct ibv_qp_ex* qpx = &qp->vqp.qp_ex;
  uint64_t ops = attr->send_ops_flags;
  int err;

  qp->wr = ibemu_core_wr_builder_create(qp->core, &attr->cap, &err);
  if (!qp->wr) return err;
  if (ops & IBV_QP_EX_WITH_SEND) qpx->wr_send = wr_send;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM) qpx->wr_send_imm = wr_send_imm;
  if (ops & IBV_QP_EX_WITH_SEND_WITH_INV) qpx->wr_send_inv = wr_send_inv;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE) qpx->wr_rdma_write = wr_rdma_write;
  if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) qpx->wr_rdma_write_imm = wr_rdma_write_imm;
  if (ops & IBV_QP_EX_WITH_RDMA_READ) qpx->wr_rdma_read = wr_rdma_read;
  if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) qpx->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) qpx->wr_atomic_fetch_add = wr_atomic_fetch_add;
  if (ops & IBV_QP_EX_WITH_LOCAL_INV) qpx->wr_local_inv = wr_local_inv;
  if (ops & IBV_QP_EX_WITH_BIND_MW) qpx->wr_bind_mw = wr_bind_mw;
  if (attr->qp_type == IBV_QPT_UD) qpx->wr_set_ud_addr = wr_set_ud_addr;
  if (attr->qp_type == IBV_QPT_XRC_SEND) qpx->wr_set_xrc_srqn = wr_set_xrc_srqn;
  if (qp->dc_type == IBEMU_CORE_DCI) {
    qp->dv.wr_set_dc_addr = wr_set_dc_addr;
    qp->dv.wr_set_dc_addr_stream = wr_set_dc_addr_stream;
  }
  qpx->wr_set_sge = wr_set_sge;
  qpx->wr_set_sge_list = wr_set_sge_list;
  qpx->wr_set_inline_data = wr_set_inline_data;
  qpx->wr_set_inline_data_list = wr_set_inline_data_list;
  qpx->wr_start = wr_start;
  qpx->wr_complete = wr_complete;
  qpx->wr_abort = wr_abort;
  qp->vqp.comp_mask |= VERBS_QP_EX;
  return 0;
}

void ibemu_qp_ex_fini(struct ibemu_qp* qp) {
  if (qp->wr) ibemu_core_wr_builder_destroy(qp->wr);
  qp->wr = NULL;
}
