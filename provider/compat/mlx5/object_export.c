/*
 * MLX5_1.27: handing DEVX objects, DEVX UMEMs and VARs to another process
 * (which imports them into a context sharing the same kernel objects, e.g.
 * one from ibv_import_device). rdma-core's libmlx5 does this without asking
 * the device: export copies the object's handle and ids out of its mlx5
 * internals into the caller's buffer, import wraps whatever the buffer
 * holds in a new object, unimport frees that wrapper.
 *
 * None of these objects can be made here (devx.c, misc.c), so no ibemu
 * process has anything to export and no buffer can name an object of an
 * ibemu device. The calls fail as in the convention of each:
 * - export: EOPNOTSUPP, returned and in errno (its man page: the value of
 *   errno), the buffer left as it was;
 * - import: NULL with errno EOPNOTSUPP. rdma-core would return a wrapper
 *   whose every use then fails on a device it does not drive; failing at
 *   the import tells the program sooner;
 * - unimport: nothing, as the void destructors.
 * _mlx5dv_get_export_sizes needs no device and answers as rdma-core's
 * does: the buffer sizes of its export format, so a program sizes its
 * buffers the same whichever library it runs on.
 */
#include <string.h>
#include <sys/types.h>

#include "provider/compat/mlx5/compat.h"

MLX5_EXPORT int mlx5dv_devx_obj_export(struct mlx5dv_devx_obj* obj, void* data) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_devx_obj* mlx5dv_devx_obj_import(struct ibv_context* context,
                                                           void* data) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_devx_obj_unimport(struct mlx5dv_devx_obj* obj) {}

MLX5_EXPORT int mlx5dv_devx_umem_export(struct mlx5dv_devx_umem* umem, void* data) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_devx_umem* mlx5dv_devx_umem_import(struct ibv_context* context,
                                                             void* data) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_devx_umem_unimport(struct mlx5dv_devx_umem* umem) {}

MLX5_EXPORT int mlx5dv_var_export(struct mlx5dv_var* dv_var, void* data) {
  return fail_errno(EOPNOTSUPP);
}

MLX5_EXPORT struct mlx5dv_var* mlx5dv_var_import(struct ibv_context* context, void* data) {
  return fail_null(EOPNOTSUPP);
}

MLX5_EXPORT void mlx5dv_var_unimport(struct mlx5dv_var* dv_var) {}

/* The layouts of rdma-core's export buffers (private to its mlx5 provider,
 * in mlx5.h), whose sizes the call reports; only their sizes matter here. */
struct var_export_format {
  uint32_t handle;
  uint32_t page_id;
  uint32_t length;
  off_t mmap_off;
};

struct devx_obj_export_format {
  uint32_t handle;
  uint32_t type;
  uint32_t object_id;
  uint64_t rx_icm_addr;
  uint8_t log_obj_range;
};

struct devx_umem_export_format {
  uint32_t handle;
  uint32_t umem_id;
};

/* A caller built against a header with fewer fields passes a smaller
 * sizes_len: only the fields that fit in it are written. */
MLX5_EXPORT void _mlx5dv_get_export_sizes(struct mlx5dv_export_sizes* sizes, size_t sizes_len) {
  memset(sizes, 0, sizes_len);
  if (sizes_len >= offsetof(struct mlx5dv_export_sizes, var_attrs_size) + sizeof(uint32_t))
    sizes->var_attrs_size = sizeof(struct var_export_format);
  if (sizes_len >= offsetof(struct mlx5dv_export_sizes, devx_umem_attrs_size) + sizeof(uint32_t))
    sizes->devx_umem_attrs_size = sizeof(struct devx_umem_export_format);
  if (sizes_len >= offsetof(struct mlx5dv_export_sizes, devx_obj_attrs_size) + sizeof(uint32_t))
    sizes->devx_obj_attrs_size = sizeof(struct devx_obj_export_format);
}
