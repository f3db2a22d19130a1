/*
 * The mlx5dv calls ibemu answers for its own devices (provider/dv_entry.h):
 * the compat libmlx5.so.1 finds this table in the loaded provider. DC QPs
 * are the point — mlx5dv_create_qp with MLX5DV_QP_INIT_ATTR_MASK_DC makes a
 * DCI or a DCT of the engine (docs/dc.md) — and what a DC program asks of
 * the device around them; besides, dma-buf regions registered through
 * mlx5dv_reg_dmabuf_mr (NCCL probes it for dma-buf support on mlx5 devices).
 */
#include <errno.h>
#include <string.h>

#include "provider/dv_entry.h"
#include "provider/verb_trace.h"
#include "provider/verbs_objects.h"

static bool dv_is_supported(struct ibv_device* device) { return ibemu_owns_device(device); }

/* What mlx5dv_create_qp checks before the QP exists (the errno values are
 * the Linux mlx5 provider's). Returns 0 and fills *dc for a DC QP, sets
 * *is_dc false for the plain QP types. */
static int check_dv_attr(const struct ibv_qp_init_attr_ex* attr,
                         const struct mlx5dv_qp_init_attr* dv, struct ibemu_core_dc* dc,
                         bool* is_dc) {
  const uint64_t dv_mask = dv ? dv->comp_mask : 0;
  const uint64_t known = MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS |
                         MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
  if (dv_mask & ~known) return EOPNOTSUPP;
  /* Scatter-to-CQE is a ConnectX shortcut for small messages ibemu does not
   * take, so disabling it changes nothing; no other creation flag is offered. */
  if ((dv_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
      (dv->create_flags & ~(uint32_t)MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE))
    return EOPNOTSUPP;
  *is_dc = dv_mask & MLX5DV_QP_INIT_ATTR_MASK_DC;
  if (!*is_dc) return attr->qp_type == IBV_QPT_DRIVER ? EINVAL : 0;
  if (attr->qp_type != IBV_QPT_DRIVER) return EINVAL;
  memset(dc, 0, sizeof(*dc));
  switch (dv->dc_init_attr.dc_type) {
    case MLX5DV_DCTYPE_DCT:
      /* A DCT has no send queue: no send operations, no streams. */
      if ((attr->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) ||
          (dv_mask & MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS))
        return EINVAL;
      dc->type = IBEMU_CORE_DCT;
      dc->dct_access_key = dv->dc_init_attr.dct_access_key;
      return 0;
    case MLX5DV_DCTYPE_DCI:
      /* DCI streams only relax ordering between streams; one ordered stream
       * keeps every promise they make. */
      dc->type = IBEMU_CORE_DCI;
      return 0;
    default:
      return EINVAL;
  }
}

static struct ibv_qp* dv_create_qp(struct ibv_context* context, struct ibv_qp_init_attr_ex* attr,
                                   struct mlx5dv_qp_init_attr* dv) {
  struct ibemu_core_dc dc;
  bool is_dc = false;
  int err;
  if (!context || !ibemu_owns_device(context->device)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if ((err = check_dv_attr(attr, dv, &dc, &is_dc))) {
    errno = err;
    return NULL;
  }
  const struct ibv_qp_init_attr_ex asked = *attr;
  struct ibv_qp* qp = ibemu_create_qp_with(context, attr, is_dc ? &dc : NULL);
  if (ibemu_trace_verbs_on())
    ibemu_trace_create_qp("mlx5dv_create_qp", &asked, is_dc ? (int)dc.type : 0, &attr->cap, qp,
                          qp ? 0 : errno);
  return qp;
}

static struct mlx5dv_qp_ex* dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex* qpx) {
  if (!qpx || !ibemu_owns_device(qpx->qp_base.context->device)) return NULL;
  return &to_qp_ex(qpx)->dv;
}

/* The fields a DC program reads: no DC on-demand paging, no DCI streams
 * beyond the one (both logs 0). Others asked for are left out of comp_mask,
 * as mlx5 does for capabilities a device lacks. */
static int dv_query_device(struct ibv_context* context, struct mlx5dv_context* out) {
  if (!context || !ibemu_owns_device(context->device)) return EOPNOTSUPP;
  const uint64_t asked = out->comp_mask;
  out->version = 0;
  out->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1;
  out->comp_mask = 0;
  if (asked & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
    out->dc_odp_caps = 0;
    out->comp_mask |= MLX5DV_CONTEXT_MASK_DC_ODP_CAPS;
  }
  if (asked & MLX5DV_CONTEXT_MASK_DCI_STREAMS) {
    memset(&out->dci_streams_caps, 0, sizeof(out->dci_streams_caps));
    out->comp_mask |= MLX5DV_CONTEXT_MASK_DCI_STREAMS;
  }
  return 0;
}

/* The same path as ibv_reg_dmabuf_mr, so the region is one like any other
 * (libibverbs fills in its context, PD, address and length, and
 * IBEMU_TRACE=verbs logs it as ibv_reg_dmabuf_mr). */
static struct ibv_mr* dv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length,
                                       uint64_t iova, int fd, int access) {
  if (!pd || !ibemu_owns_device(pd->context->device)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  return ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

__attribute__((visibility("default"))) const struct ibemu_mlx5dv_entry ibemu_mlx5dv_entry = {
    .version = IBEMU_MLX5DV_ENTRY_VERSION,
    .is_supported = dv_is_supported,
    .create_qp = dv_create_qp,
    .qp_ex_from_ibv_qp_ex = dv_qp_ex_from_ibv_qp_ex,
    .query_device = dv_query_device,
    .reg_dmabuf_mr = dv_reg_dmabuf_mr,
};
