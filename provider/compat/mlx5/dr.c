/*
 * Direct rule steering (mlx5dv_dr_*). Debian's libmlx5 makes a domain only
 * on a port it can steer: on an InfiniBand port — every ibemu port — it
 * fails with EOPNOTSUPP (an unknown domain type: EINVAL). (It also accepts
 * the Ethernet port of a device it does not drive, for a domain of root
 * tables whose rules then fail; ibemu has no Ethernet ports, so that is not
 * copied.) No domain means no table, matcher or rule either.
 *
 * No device check in the real code: it dereferences the domain, table,
 * matcher, rule or DEVX object it is given. None of those can exist here,
 * so these fail with EOPNOTSUPP in the function's own convention: the
 * constructors taking one (NULL and errno), the int calls taking one (errno
 * set and returned), the mlx5dv_dump_dr_* calls (-EOPNOTSUPP; -EINVAL for a
 * NULL argument, as there), the two void setters (nothing).
 *
 * The actions that need no device — drop, default miss, tag, pop VLAN, push
 * VLAN, and the QP destination — are made by the real library without
 * looking at one, so they succeed here too; only mlx5dv_dr_action_destroy
 * and the modify calls (EINVAL: they are neither meters nor ASO actions)
 * can use them.
 */
#include <endian.h>
#include <stdlib.h>

#include "provider/compat/mlx5/compat.h"

struct mlx5dv_dr_action {
  int unused;
};

static struct mlx5dv_dr_action* device_free_action(void) {
  struct mlx5dv_dr_action* action = calloc(1, sizeof(*action));
  if (!action) errno = ENOMEM;
  return action;
}

/* Domains, tables, matchers, rules. */

MLX5_EXPORT struct mlx5dv_dr_domain* mlx5dv_dr_domain_create(struct ibv_context* ctx,
                                                             enum mlx5dv_dr_domain_type type) {
  return fail_null(type > MLX5DV_DR_DOMAIN_TYPE_FDB ? EINVAL : EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_domain_sync(struct mlx5dv_dr_domain* domain, uint32_t flags) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_dr_domain_set_reclaim_device_memory(struct mlx5dv_dr_domain* dmn,
                                                            bool enable) {}

MLX5_EXPORT void mlx5dv_dr_domain_allow_duplicate_rules(struct mlx5dv_dr_domain* domain,
                                                        bool allow) {}

MLX5_EXPORT int mlx5dv_dr_domain_destroy(struct mlx5dv_dr_domain* domain) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_table* mlx5dv_dr_table_create(struct mlx5dv_dr_domain* domain,
                                                           uint32_t level) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_table_destroy(struct mlx5dv_dr_table* table) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_matcher* mlx5dv_dr_matcher_create(
    struct mlx5dv_dr_table* table, uint16_t priority, uint8_t match_criteria_enable,
    struct mlx5dv_flow_match_parameters* mask) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_matcher_set_layout(struct mlx5dv_dr_matcher* matcher,
                                             struct mlx5dv_dr_matcher_layout* layout) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_matcher_destroy(struct mlx5dv_dr_matcher* matcher) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_rule* mlx5dv_dr_rule_create(struct mlx5dv_dr_matcher* matcher,
                                                         struct mlx5dv_flow_match_parameters* value,
                                                         size_t num_actions,
                                                         struct mlx5dv_dr_action* actions[]) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_rule_destroy(struct mlx5dv_dr_rule* rule) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_aso_other_domain_link(struct mlx5dv_devx_obj* devx_obj,
                                                struct mlx5dv_dr_domain* peer_dmn,
                                                struct mlx5dv_dr_domain* dmn, uint32_t flags,
                                                uint8_t return_reg_c) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dr_aso_other_domain_unlink(struct mlx5dv_devx_obj* devx_obj,
                                                  struct mlx5dv_dr_domain* dmn) {
  return fail_errno(EOPNOTSUPP);
}

/* Actions that need no device. */

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_drop(void) {
  return device_free_action();
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_default_miss(void) {
  return device_free_action();
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_tag(uint32_t tag_value) {
  return device_free_action();
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_pop_vlan(void) {
  return device_free_action();
}

/* Only the two VLAN ethertypes (802.1ad S-tag, 802.1Q C-tag) are accepted. */
MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_push_vlan(
    struct mlx5dv_dr_domain* domain, __be32 vlan_hdr) {
  const uint16_t ethertype = be32toh(vlan_hdr) >> 16;
  if (ethertype != 0x88a8 && ethertype != 0x8100) return fail_null(EINVAL);
  return device_free_action();
}

/* A QP destination must be a raw packet QP. */
MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ibv_qp(struct ibv_qp* ibqp) {
  if (!ibqp || ibqp->qp_type != IBV_QPT_RAW_PACKET) return fail_null(EINVAL);
  return device_free_action();
}

MLX5_EXPORT int mlx5dv_dr_action_modify_aso(struct mlx5dv_dr_action* action, uint32_t offset,
                                            uint32_t flags, uint8_t return_reg_c) {
  return fail_errno(EINVAL);
}

MLX5_EXPORT int mlx5dv_dr_action_modify_flow_meter(struct mlx5dv_dr_action* action,
                                                   struct mlx5dv_dr_flow_meter_attr* attr,
                                                   __be64 modify_field_select) {
  return fail_errno(EINVAL);
}

MLX5_EXPORT int mlx5dv_dr_action_destroy(struct mlx5dv_dr_action* action) {
  free(action);
  return 0;
}

/* Actions that need a domain, a table or a DEVX object. */

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_table(
    struct mlx5dv_dr_table* table) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_root_table(
    struct mlx5dv_dr_table* table, uint16_t priority) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_vport(
    struct mlx5dv_dr_domain* domain, uint32_t vport) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_ib_port(
    struct mlx5dv_dr_domain* domain, uint32_t ib_port) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_devx_tir(
    struct mlx5dv_devx_obj* devx_obj) {
  return fail_null(EOPNOTSUPP);
}

/* Fewer than two destinations is EINVAL before the domain is looked at. */
MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_dest_array(
    struct mlx5dv_dr_domain* domain, size_t num_dest, struct mlx5dv_dr_action_dest_attr* dests[]) {
  return fail_null(num_dest <= 1 ? EINVAL : EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_flow_counter(
    struct mlx5dv_devx_obj* devx_obj, uint32_t offset) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_flow_meter(
    struct mlx5dv_dr_flow_meter_attr* attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_flow_sampler(
    struct mlx5dv_dr_flow_sampler_attr* attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_modify_header(
    struct mlx5dv_dr_domain* domain, uint32_t flags, size_t actions_sz, __be64 actions[]) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_packet_reformat(
    struct mlx5dv_dr_domain* domain, uint32_t flags,
    enum mlx5dv_flow_action_packet_reformat_type reformat_type, size_t data_sz, void* data) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_dr_action* mlx5dv_dr_action_create_aso(struct mlx5dv_dr_domain* domain,
                                                                 struct mlx5dv_devx_obj* devx_obj,
                                                                 uint32_t offset, uint32_t flags,
                                                                 uint8_t return_reg_c) {
  return fail_null(EOPNOTSUPP);
}

/* Dumps. */

MLX5_EXPORT int mlx5dv_dump_dr_domain(FILE* fout, struct mlx5dv_dr_domain* domain) {
  return fout && domain ? -EOPNOTSUPP : -EINVAL;
}

MLX5_EXPORT int mlx5dv_dump_dr_table(FILE* fout, struct mlx5dv_dr_table* table) {
  return fout && table ? -EOPNOTSUPP : -EINVAL;
}

MLX5_EXPORT int mlx5dv_dump_dr_matcher(FILE* fout, struct mlx5dv_dr_matcher* matcher) {
  return fout && matcher ? -EOPNOTSUPP : -EINVAL;
}

MLX5_EXPORT int mlx5dv_dump_dr_rule(FILE* fout, struct mlx5dv_dr_rule* rule) {
  return fout && rule ? -EOPNOTSUPP : -EINVAL;
}
