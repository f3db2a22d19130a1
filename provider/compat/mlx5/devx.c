/*
 * DEVX: raw firmware commands and the objects made with them. Debian's
 * libmlx5 runs them only on contexts of its own devices; on any other the
 * constructors return NULL with errno EOPNOTSUPP, the int calls return
 * EOPNOTSUPP, mlx5dv_devx_uar_export_dmabuf_fd returns -1 with errno
 * EOPNOTSUPP and the void destructors do nothing. No DEVX object, UAR, UMEM,
 * EQ, MSI vector, event channel or completion channel can be made here, so
 * the calls taking one only ever see one the program did not get from us.
 *
 * No device check in the real code, which uses the object's file
 * descriptor: mlx5dv_devx_destroy_cmd_comp (here: nothing),
 * mlx5dv_devx_get_async_cmd_comp (here: EOPNOTSUPP) and
 * mlx5dv_devx_get_event (here: -1 with errno EOPNOTSUPP).
 */
#include "provider/compat/mlx5/compat.h"

MLX5_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context* context, const void* in, size_t inlen,
                                        void* out, size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_query_eqn(struct ibv_context* context, uint32_t vector, uint32_t* eqn) {
  return EOPNOTSUPP;
}

/* Objects. */

MLX5_EXPORT struct mlx5dv_devx_obj* mlx5dv_devx_obj_create(struct ibv_context* context,
                                                           const void* in, size_t inlen, void* out,
                                                           size_t outlen) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen,
                                      void* out, size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj* obj, const void* in, size_t inlen,
                                       void* out, size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj* obj) { return EOPNOTSUPP; }

MLX5_EXPORT int mlx5dv_devx_obj_query_async(struct mlx5dv_devx_obj* obj, const void* in,
                                            size_t inlen, size_t outlen, uint64_t wr_id,
                                            struct mlx5dv_devx_cmd_comp* cmd_comp) {
  return EOPNOTSUPP;
}

/* The verbs objects' firmware state. */

MLX5_EXPORT int mlx5dv_devx_qp_query(struct ibv_qp* qp, const void* in, size_t inlen, void* out,
                                     size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_qp_modify(struct ibv_qp* qp, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_cq_query(struct ibv_cq* cq, const void* in, size_t inlen, void* out,
                                     size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_cq_modify(struct ibv_cq* cq, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_srq_query(struct ibv_srq* srq, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_srq_modify(struct ibv_srq* srq, const void* in, size_t inlen, void* out,
                                       size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_wq_query(struct ibv_wq* wq, const void* in, size_t inlen, void* out,
                                     size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_wq_modify(struct ibv_wq* wq, const void* in, size_t inlen, void* out,
                                      size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_ind_tbl_query(struct ibv_rwq_ind_table* ind_tbl, const void* in,
                                          size_t inlen, void* out, size_t outlen) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_ind_tbl_modify(struct ibv_rwq_ind_table* ind_tbl, const void* in,
                                           size_t inlen, void* out, size_t outlen) {
  return EOPNOTSUPP;
}

/* Memory, doorbells, event queues and interrupt vectors. */

MLX5_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg(struct ibv_context* ctx, void* addr,
                                                          size_t size, uint32_t access) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_reg_ex(struct ibv_context* ctx,
                                                             struct mlx5dv_devx_umem_in* umem_in) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem* umem) { return EOPNOTSUPP; }

MLX5_EXPORT struct mlx5dv_devx_uar* mlx5dv_devx_alloc_uar(struct ibv_context* context,
                                                          uint32_t flags) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar* devx_uar) {}

/* It returns a file descriptor: -1 with errno on failure. */
MLX5_EXPORT int mlx5dv_devx_uar_export_dmabuf_fd(struct mlx5dv_devx_uar* devx_uar) {
  errno = EOPNOTSUPP;
  return -1;
}

MLX5_EXPORT struct mlx5dv_devx_eq* mlx5dv_devx_create_eq(struct ibv_context* ibctx, const void* in,
                                                         size_t inlen, void* out, size_t outlen) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_devx_destroy_eq(struct mlx5dv_devx_eq* eq) { return EOPNOTSUPP; }

MLX5_EXPORT struct mlx5dv_devx_msi_vector* mlx5dv_devx_alloc_msi_vector(struct ibv_context* ibctx) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_devx_free_msi_vector(struct mlx5dv_devx_msi_vector* msi) {
  return EOPNOTSUPP;
}

/* Asynchronous commands and events. */

MLX5_EXPORT struct mlx5dv_devx_cmd_comp* mlx5dv_devx_create_cmd_comp(struct ibv_context* context) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_devx_destroy_cmd_comp(struct mlx5dv_devx_cmd_comp* cmd_comp) {}

MLX5_EXPORT int mlx5dv_devx_get_async_cmd_comp(struct mlx5dv_devx_cmd_comp* cmd_comp,
                                               struct mlx5dv_devx_async_cmd_hdr* cmd_resp,
                                               size_t cmd_resp_len) {
  return EOPNOTSUPP;
}

MLX5_EXPORT struct mlx5dv_devx_event_channel* mlx5dv_devx_create_event_channel(
    struct ibv_context* context, enum mlx5dv_devx_create_event_channel_flags flags) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_devx_destroy_event_channel(
    struct mlx5dv_devx_event_channel* event_channel) {}

MLX5_EXPORT int mlx5dv_devx_subscribe_devx_event(struct mlx5dv_devx_event_channel* event_channel,
                                                 struct mlx5dv_devx_obj* obj, uint16_t events_sz,
                                                 uint16_t events_num[], uint64_t cookie) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_devx_subscribe_devx_event_fd(struct mlx5dv_devx_event_channel* event_channel,
                                                    int fd, struct mlx5dv_devx_obj* obj,
                                                    uint16_t event_num) {
  return EOPNOTSUPP;
}

MLX5_EXPORT ssize_t mlx5dv_devx_get_event(struct mlx5dv_devx_event_channel* event_channel,
                                          struct mlx5dv_devx_async_event_hdr* event_data,
                                          size_t event_resp_len) {
  errno = EOPNOTSUPP;
  return -1;
}
