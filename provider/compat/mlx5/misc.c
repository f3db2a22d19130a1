/*
 * The rest of the API: opening a device for DEVX, device, port and clock
 * queries, mlx5 object layouts (mlx5dv_init_obj), mlx5 CQs and WQs, device
 * memory, VAR and packet-pacing entries, reserved QP numbers, AH-to-QP
 * mapping and VFIO devices. Debian's libmlx5 serves them only for its own
 * devices: on any other the constructors return NULL with errno EOPNOTSUPP,
 * the int calls return EOPNOTSUPP and the void destructors do nothing.
 *
 * No device check in the real code:
 * - mlx5dv_get_vfio_device_list looks for the PCI function named in attr
 *   and reports what that lookup leaves in errno; ibemu drives no VFIO
 *   device, so here it is NULL with errno EOPNOTSUPP;
 * - mlx5dv_vfio_get_events_fd and mlx5dv_vfio_process_events read the VFIO
 *   context; no such context exists here: -1 with errno EOPNOTSUPP, and
 *   EOPNOTSUPP.
 */
#include "provider/compat/mlx5/compat.h"

/* ibemu's devices open through ibv_open_device only, as other non-mlx5
 * devices do. */
MLX5_EXPORT struct ibv_context* mlx5dv_open_device(struct ibv_device* device,
                                                   struct mlx5dv_context_attr* attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int _mlx5dv_query_port(struct ibv_context* context, uint32_t port_num,
                                   struct mlx5dv_port* info, size_t info_len) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_set_context_attr(struct ibv_context* context,
                                        enum mlx5dv_set_ctx_attr_type type, void* attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_get_clock_info(struct ibv_context* context,
                                      struct mlx5dv_clock_info* clock_info) {
  return EOPNOTSUPP;
}

/* mlx5dv_init_obj has two versions, MLX5_1.0 and the default MLX5_1.2;
 * they differ only in what they write on success. Both are EINVAL when
 * obj_type names no object (there is no context to look at), EOPNOTSUPP
 * otherwise. */
int init_obj_v1_0(struct mlx5dv_obj* obj, uint64_t obj_type);
int init_obj_v1_2(struct mlx5dv_obj* obj, uint64_t obj_type);
_Static_assert(__builtin_types_compatible_p(__typeof__(init_obj_v1_2), __typeof__(mlx5dv_init_obj)),
               "mlx5dv_init_obj's signature");

MLX5_EXPORT __attribute__((symver("mlx5dv_init_obj@@MLX5_1.2"))) int init_obj_v1_2(
    struct mlx5dv_obj* obj, uint64_t obj_type) {
  const uint64_t objects = MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_RWQ |
                           MLX5DV_OBJ_DM | MLX5DV_OBJ_AH | MLX5DV_OBJ_PD;
  return obj_type & objects ? EOPNOTSUPP : EINVAL;
}

MLX5_EXPORT __attribute__((symver("mlx5dv_init_obj@MLX5_1.0"))) int init_obj_v1_0(
    struct mlx5dv_obj* obj, uint64_t obj_type) {
  return init_obj_v1_2(obj, obj_type);
}

/* mlx5 CQs and WQs, device memory. */

MLX5_EXPORT struct ibv_cq_ex* mlx5dv_create_cq(struct ibv_context* context,
                                               struct ibv_cq_init_attr_ex* cq_attr,
                                               struct mlx5dv_cq_init_attr* mlx5_cq_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct ibv_wq* mlx5dv_create_wq(struct ibv_context* context,
                                            struct ibv_wq_init_attr* wq_init_attr,
                                            struct mlx5dv_wq_init_attr* mlx5_wq_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct ibv_dm* mlx5dv_alloc_dm(struct ibv_context* context,
                                           struct ibv_alloc_dm_attr* dm_attr,
                                           struct mlx5dv_alloc_dm_attr* mlx5_dm_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void* mlx5dv_dm_map_op_addr(struct ibv_dm* dm, uint8_t op) {
  return fail_null(EOPNOTSUPP);
}

/* VAR and packet-pacing entries, reserved QP numbers, AH-to-QP mapping. */

MLX5_EXPORT struct mlx5dv_var* mlx5dv_alloc_var(struct ibv_context* context, uint32_t flags) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_free_var(struct mlx5dv_var* dv_var) {}

MLX5_EXPORT struct mlx5dv_pp* mlx5dv_pp_alloc(struct ibv_context* context, size_t pp_context_sz,
                                              const void* pp_context, uint32_t flags) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_pp_free(struct mlx5dv_pp* pp) {}

MLX5_EXPORT int mlx5dv_reserved_qpn_alloc(struct ibv_context* ctx, uint32_t* qpn) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_reserved_qpn_dealloc(struct ibv_context* ctx, uint32_t qpn) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_map_ah_to_qp(struct ibv_ah* ah, uint32_t qp_num) { return EOPNOTSUPP; }

/* VFIO. */

MLX5_EXPORT struct ibv_device** mlx5dv_get_vfio_device_list(struct mlx5dv_vfio_context_attr* attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_vfio_get_events_fd(struct ibv_context* ibctx) {
  errno = EOPNOTSUPP;
  return -1;
}

MLX5_EXPORT int mlx5dv_vfio_process_events(struct ibv_context* context) { return EOPNOTSUPP; }
