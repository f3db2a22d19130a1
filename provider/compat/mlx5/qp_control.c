/*
 * Per-QP controls of ConnectX: LAG port affinity, the RoCE UDP source port,
 * DCI stream ids, send-queue WR cancellation, and the QoS scheduling tree
 * (nodes, leaves, a QP's place in it). Debian's libmlx5 applies them only
 * to objects of its own devices: on any other the constructors return NULL
 * with errno EOPNOTSUPP and the int calls return EOPNOTSUPP — ibemu's DCIs
 * included (mlx5dv_dci_stream_id_reset, docs/dc.md).
 *
 * No device check in the real code: mlx5dv_qp_cancel_posted_send_wrs,
 * which walks the send queue of an mlx5 QP; here it returns -EOPNOTSUPP
 * (its man page: -errno on failure).
 */
#include "provider/compat/mlx5/compat.h"

MLX5_EXPORT int mlx5dv_query_qp_lag_port(struct ibv_qp* qp, uint8_t* port_num,
                                         uint8_t* active_port_num) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_modify_qp_lag_port(struct ibv_qp* qp, uint8_t port_num) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_modify_qp_udp_sport(struct ibv_qp* qp, uint16_t udp_sport) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_dci_stream_id_reset(struct ibv_qp* qp, uint16_t stream_id) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_qp_cancel_posted_send_wrs(struct mlx5dv_qp_ex* mqp, uint64_t wr_id) {
  return -EOPNOTSUPP;
}

/* The scheduling tree. */

MLX5_EXPORT struct mlx5dv_sched_node* mlx5dv_sched_node_create(
    struct ibv_context* context, const struct mlx5dv_sched_attr* sched_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_sched_leaf* mlx5dv_sched_leaf_create(
    struct ibv_context* context, const struct mlx5dv_sched_attr* sched_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_sched_node_modify(struct mlx5dv_sched_node* node,
                                         const struct mlx5dv_sched_attr* sched_attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_sched_leaf_modify(struct mlx5dv_sched_leaf* leaf,
                                         const struct mlx5dv_sched_attr* sched_attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_sched_node_destroy(struct mlx5dv_sched_node* node) { return EOPNOTSUPP; }

MLX5_EXPORT int mlx5dv_sched_leaf_destroy(struct mlx5dv_sched_leaf* leaf) { return EOPNOTSUPP; }

MLX5_EXPORT int mlx5dv_modify_qp_sched_elem(struct ibv_qp* qp,
                                            const struct mlx5dv_sched_leaf* requestor,
                                            const struct mlx5dv_sched_leaf* responder) {
  return EOPNOTSUPP;
}
