/*
 * Shared by the files of the compat libmlx5.so.1: the export marker, the
 * provider lookup (dispatch.c) and the failure helpers of the calls ibemu
 * does not emulate. Those fail as Debian's libmlx5 (rdma-core 44) fails for
 * a device it does not drive: its wrappers find no mlx5 operations for the
 * device and return EOPNOTSUPP, each in its own convention — NULL with
 * errno for constructors, the errno value for most int calls, nothing for
 * void destructors. docs/mlx5dv.md lists them.
 */
#ifndef IBEMU_COMPAT_MLX5_H
#define IBEMU_COMPAT_MLX5_H

#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stddef.h>

#include "provider/compat/mlx5/newer_api.h"
#include "provider/dv_entry.h"

/* Marks the functions of libmlx5's API; everything else stays hidden. */
#define MLX5_EXPORT __attribute__((visibility("default")))

/* The provider's table of emulated calls, or NULL while the provider is
 * not loaded in this process. */
const struct ibemu_mlx5dv_entry* ibemu_mlx5_provider(void);

/* A constructor's failure: NULL, with errno set to err. */
static inline void* fail_null(int err) {
  errno = err;
  return NULL;
}

/* The failure of calls that set errno and also return its value. */
static inline int fail_errno(int err) {
  errno = err;
  return err;
}

#endif
