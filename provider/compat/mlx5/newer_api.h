/*
 * The mlx5dv API that rdma-core added after the system's mlx5dv.h may have
 * been written: the version nodes MLX5_1.25 (v54) to MLX5_1.27 (v63). The
 * library exports these functions whatever the system's header says, so a
 * program built against a newer rdma-core loads it; each one must then be
 * declared, or -Werror=missing-prototypes rejects its definition.
 *
 * CMakeLists.txt asks the system's header for each function and defines
 * IBEMU_HAVE_DECL_<NAME> where it declares it; only the missing ones are
 * declared here, as rdma-core declares them, so a header that has them
 * checks every definition instead. Include after <infiniband/mlx5dv.h>.
 */
#ifndef IBEMU_COMPAT_MLX5_NEWER_API_H
#define IBEMU_COMPAT_MLX5_NEWER_API_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* MLX5_1.25 */

#ifndef IBEMU_HAVE_DECL_MLX5DV_REG_DMABUF_MR
struct ibv_mr* mlx5dv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length,
                                    uint64_t iova, int fd, int access, int mlx5_access);
#endif

#ifndef IBEMU_HAVE_DECL_MLX5DV_GET_DATA_DIRECT_SYSFS_PATH
int mlx5dv_get_data_direct_sysfs_path(struct ibv_context* context, char* buf, size_t buf_len);
#endif

/* The one mlx5_access flag of mlx5dv_reg_dmabuf_mr (a macro in mlx5_api.h,
 * with the value of the kernel's MLX5_IB_UAPI_REG_DMABUF_ACCESS_DATA_DIRECT). */
#ifndef MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT
#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (1 << 0)
#endif

/* MLX5_1.25.1: since rdma-core v63 mlx5dv_create_flow is a macro over an
 * inline that calls __mlx5dv_create_flow with the caller's size of struct
 * mlx5dv_flow_action_attr. The function of that name stays exported (node
 * MLX5_1.6) for programs built before; it needs its prototype back. */
#ifdef mlx5dv_create_flow
#undef mlx5dv_create_flow
struct ibv_flow* mlx5dv_create_flow(struct mlx5dv_flow_matcher* matcher,
                                    struct mlx5dv_flow_match_parameters* match_value,
                                    size_t num_actions,
                                    struct mlx5dv_flow_action_attr actions_attr[]);
#endif

#ifndef IBEMU_HAVE_DECL___MLX5DV_CREATE_FLOW
struct ibv_flow* __mlx5dv_create_flow(struct mlx5dv_flow_matcher* matcher,
                                      struct mlx5dv_flow_match_parameters* match_value,
                                      size_t num_actions,
                                      struct mlx5dv_flow_action_attr actions_attr[],
                                      size_t attr_len);
#endif

/* MLX5_1.26 */

#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_UAR_EXPORT_DMABUF_FD
int mlx5dv_devx_uar_export_dmabuf_fd(struct mlx5dv_devx_uar* devx_uar);
#endif

/* MLX5_1.27: handing DEVX objects, UMEMs and VARs to another process. */

#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_OBJ_EXPORT
int mlx5dv_devx_obj_export(struct mlx5dv_devx_obj* obj, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_OBJ_IMPORT
struct mlx5dv_devx_obj* mlx5dv_devx_obj_import(struct ibv_context* context, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_OBJ_UNIMPORT
void mlx5dv_devx_obj_unimport(struct mlx5dv_devx_obj* obj);
#endif

#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_UMEM_EXPORT
int mlx5dv_devx_umem_export(struct mlx5dv_devx_umem* umem, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_UMEM_IMPORT
struct mlx5dv_devx_umem* mlx5dv_devx_umem_import(struct ibv_context* context, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_DEVX_UMEM_UNIMPORT
void mlx5dv_devx_umem_unimport(struct mlx5dv_devx_umem* umem);
#endif

#ifndef IBEMU_HAVE_DECL_MLX5DV_VAR_EXPORT
int mlx5dv_var_export(struct mlx5dv_var* dv_var, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_VAR_IMPORT
struct mlx5dv_var* mlx5dv_var_import(struct ibv_context* context, void* data);
#endif
#ifndef IBEMU_HAVE_DECL_MLX5DV_VAR_UNIMPORT
void mlx5dv_var_unimport(struct mlx5dv_var* dv_var);
#endif

/* The structure came with the function, in the same header change. */
#ifndef IBEMU_HAVE_DECL__MLX5DV_GET_EXPORT_SIZES
struct mlx5dv_export_sizes {
  uint32_t var_attrs_size;
  uint32_t devx_umem_attrs_size;
  uint32_t devx_obj_attrs_size;
};

void _mlx5dv_get_export_sizes(struct mlx5dv_export_sizes* sizes, size_t sizes_len);
#endif

#endif
