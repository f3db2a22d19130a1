/*
 * Indirect mkeys (signature and crypto offloads), crypto login and data
 * encryption keys. Debian's libmlx5 makes them only on its own devices: on
 * any other the constructors return NULL with errno EOPNOTSUPP and the int
 * calls return EOPNOTSUPP. No mkey, login object or DEK can be made here.
 *
 * No device check in the real code: _mlx5dv_mkey_check (behind the inline
 * mlx5dv_mkey_check) reads the mkey's signature state; here it returns
 * EOPNOTSUPP, as no mkey exists to check.
 */
#include "provider/compat/mlx5/compat.h"

MLX5_EXPORT struct mlx5dv_mkey* mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr* mkey_init_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey* mkey) { return EOPNOTSUPP; }

MLX5_EXPORT int _mlx5dv_mkey_check(struct mlx5dv_mkey* mkey, struct mlx5dv_mkey_err* err_info,
                                   size_t err_info_size) {
  return EOPNOTSUPP;
}

/* Crypto login: the session that allows wrapped keys. */

MLX5_EXPORT int mlx5dv_crypto_login(struct ibv_context* context,
                                    struct mlx5dv_crypto_login_attr* login_attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_crypto_login_query_state(struct ibv_context* context,
                                                enum mlx5dv_crypto_login_state* state) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_crypto_logout(struct ibv_context* context) { return EOPNOTSUPP; }

MLX5_EXPORT struct mlx5dv_crypto_login_obj* mlx5dv_crypto_login_create(
    struct ibv_context* context, struct mlx5dv_crypto_login_attr_ex* login_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_crypto_login_query(struct mlx5dv_crypto_login_obj* crypto_login,
                                          struct mlx5dv_crypto_login_query_attr* query_attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_crypto_login_destroy(struct mlx5dv_crypto_login_obj* crypto_login) {
  return EOPNOTSUPP;
}

/* Data encryption keys. */

MLX5_EXPORT struct mlx5dv_dek* mlx5dv_dek_create(struct ibv_context* context,
                                                 struct mlx5dv_dek_init_attr* init_attr) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT int mlx5dv_dek_query(struct mlx5dv_dek* dek, struct mlx5dv_dek_attr* attr) {
  return EOPNOTSUPP;
}

MLX5_EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek* dek) { return EOPNOTSUPP; }
