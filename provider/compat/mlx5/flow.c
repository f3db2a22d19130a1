/*
 * Flow steering through the verbs flow API: mlx5 flow matchers, flows, flow
 * actions (ESP, header modification, packet reformat) and steering anchors.
 * Debian's libmlx5 makes them only on its own devices: on any other the
 * constructors return NULL with errno EOPNOTSUPP and the destructors return
 * EOPNOTSUPP. No matcher or anchor can be made here.
 */
#include "provider/compat/mlx5/compat.h"

MLX5_EXPORT struct mlx5dv_flow_matcher* mlx5dv_create_flow_matcher(
    struct ibv_context* context, struct mlx5dv_flow_matcher_attr* matcher_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_destroy_flow_matcher(struct mlx5dv_flow_matcher* matcher) {
  return EOPNOTSUPP;
}

MLX5_EXPORT struct ibv_flow* mlx5dv_create_flow(struct mlx5dv_flow_matcher* matcher,
                                                struct mlx5dv_flow_match_parameters* match_value,
                                                size_t num_actions,
                                                struct mlx5dv_flow_action_attr actions_attr[]) {
  return fail_null(EOPNOTSUPP);
}

/* rdma-core v63's mlx5dv_create_flow (a macro, newer_api.h) passes the
 * caller's size of struct mlx5dv_flow_action_attr, which grew. */
MLX5_EXPORT struct ibv_flow* __mlx5dv_create_flow(struct mlx5dv_flow_matcher* matcher,
                                                  struct mlx5dv_flow_match_parameters* match_value,
                                                  size_t num_actions,
                                                  struct mlx5dv_flow_action_attr actions_attr[],
                                                  size_t attr_len) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct ibv_flow_action* mlx5dv_create_flow_action_esp(
    struct ibv_context* ctx, struct ibv_flow_action_esp_attr* esp,
    struct mlx5dv_flow_action_esp* mlx5_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct ibv_flow_action* mlx5dv_create_flow_action_modify_header(
    struct ibv_context* ctx, size_t actions_sz, uint64_t actions[],
    enum mlx5dv_flow_table_type ft_type) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct ibv_flow_action* mlx5dv_create_flow_action_packet_reformat(
    struct ibv_context* ctx, size_t data_sz, void* data,
    enum mlx5dv_flow_action_packet_reformat_type reformat_type,
    enum mlx5dv_flow_table_type ft_type) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_steering_anchor* mlx5dv_create_steering_anchor(
    struct ibv_context* context, struct mlx5dv_steering_anchor_attr* attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_destroy_steering_anchor(struct mlx5dv_steering_anchor* sa) {
  return EOPNOTSUPP;
}
