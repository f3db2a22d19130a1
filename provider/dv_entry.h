/*
 * What the provider offers the compat libmlx5.so.1 (provider/compat/mlx5):
 * the mlx5dv calls that ibemu emulates on its own devices. The provider
 * exports one symbol, IBEMU_MLX5DV_ENTRY_SYMBOL, a table of functions; the
 * compat library finds the loaded provider and looks it up with dlsym, so
 * neither library links the other. Every function takes objects of any
 * device: a device or context that is not ibemu's gets what real libmlx5
 * answers for a device it does not drive (EOPNOTSUPP).
 */
#ifndef IBEMU_DV_ENTRY_H
#define IBEMU_DV_ENTRY_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IBEMU_MLX5DV_ENTRY_SYMBOL "ibemu_mlx5dv_entry"
/* Raised whenever the table grows, so that a compat library never reads past
 * the end of an older provider's table (it then finds no provider). */
#define IBEMU_MLX5DV_ENTRY_VERSION 2u
/* IBEMU_PROVIDER_FILE_NAME, the file name of the provider (libibverbs loads
 * it as a driver), comes from cmake/CheckVerbsPrivateAbi.cmake. */

struct ibemu_mlx5dv_entry {
  uint32_t version; /* IBEMU_MLX5DV_ENTRY_VERSION */
  /* mlx5dv_is_supported: true for ibemu's devices. */
  bool (*is_supported)(struct ibv_device* device);
  /* mlx5dv_create_qp: DCI and DCT (MLX5DV_QP_INIT_ATTR_MASK_DC) and the
   * plain QP types; NULL with errno set on failure. */
  struct ibv_qp* (*create_qp)(struct ibv_context* context, struct ibv_qp_init_attr_ex* qp_attr,
                              struct mlx5dv_qp_init_attr* mlx5_qp_attr);
  /* mlx5dv_qp_ex_from_ibv_qp_ex: the mlx5dv_qp_ex of a QP created with
   * IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (wr_set_dc_addr set on DCIs). */
  struct mlx5dv_qp_ex* (*qp_ex_from_ibv_qp_ex)(struct ibv_qp_ex* qp);
  /* mlx5dv_query_device: returns 0 or an errno value. */
  int (*query_device)(struct ibv_context* context, struct mlx5dv_context* attrs_out);
  /* mlx5dv_reg_dmabuf_mr once the compat library has refused the mlx5
   * access flags (ibemu honours none): ibv_reg_dmabuf_mr on an ibemu
   * device, NULL with errno EOPNOTSUPP on another. */
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                  int fd, int access);
};

#ifdef __cplusplus
}
#endif

#endif
