/*
 * MLX5_1.25: dma-buf regions with mlx5 access flags, and the data-direct
 * device. The only flag, MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT, sends a
 * region's DMA through the data-direct engine that some ConnectX devices
 * are bonded with; an ibemu device has none. So ibemu answers as Linux's
 * mlx5 driver answers on a ConnectX without one:
 * - mlx5dv_get_data_direct_sysfs_path: ENODEV (also in errno, as the
 *   ioctl's failure leaves it);
 * - mlx5dv_reg_dmabuf_mr: without flags the region is registered as by
 *   ibv_reg_dmabuf_mr; with flags it is refused (refused_flags below).
 * On a device the provider does not own both fail as Debian's libmlx5 fails
 * on a device it does not drive: EOPNOTSUPP, NULL with errno for the MR.
 */
#include <stdbool.h>
#include <unistd.h>

#include "provider/compat/mlx5/compat.h"

static bool provider_owns(const struct ibemu_mlx5dv_entry* p, struct ibv_device* device) {
  return p && p->is_supported && device && p->is_supported(device);
}

/* The errno the mlx5 driver gives for mlx5_access flags on a device with no
 * data-direct device: an unknown flag fails the uverbs flag check (EINVAL);
 * data direct is refused outright for an IOVA off a page boundary or an
 * on-demand-paging region (EOPNOTSUPP), and otherwise because no
 * data-direct device is bonded (EINVAL). */
static int refused_flags(uint64_t iova, int access, int mlx5_access) {
  if (mlx5_access & ~MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT) return EINVAL;
  const uint64_t page_size = (uint64_t)sysconf(_SC_PAGESIZE);
  if ((iova & (page_size - 1)) || (access & IBV_ACCESS_ON_DEMAND)) return EOPNOTSUPP;
  return EINVAL;
}

MLX5_EXPORT struct ibv_mr* mlx5dv_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length,
                                                uint64_t iova, int fd, int access,
                                                int mlx5_access) {
  const struct ibemu_mlx5dv_entry* p = ibemu_mlx5_provider();
  if (!pd || !provider_owns(p, pd->context->device) || !p->reg_dmabuf_mr)
    return fail_null(EOPNOTSUPP);
  if (mlx5_access) return fail_null(refused_flags(iova, access, mlx5_access));
  return p->reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

MLX5_EXPORT int mlx5dv_get_data_direct_sysfs_path(struct ibv_context* context, char* buf,
                                                  size_t buf_len) {
  if (!context || !provider_owns(ibemu_mlx5_provider(), context->device)) return EOPNOTSUPP;
  return fail_errno(ENODEV);
}
