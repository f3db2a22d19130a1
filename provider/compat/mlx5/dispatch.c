/*
 * The mlx5dv calls ibemu emulates, passed to the provider, and how the
 * provider is found. libibverbs loads the provider (libibemu-rdmav<PABI>.so) at
 * the first ibv_get_device_list; neither library links the other. This one
 * looks among the loaded objects for the provider's file name and takes its
 * table (IBEMU_MLX5DV_ENTRY_SYMBOL, provider/dv_entry.h) with dlsym. A table
 * found is kept; "not found" is not, since the provider may come later.
 * Without a provider, or for a device the provider does not own, the calls
 * answer as Debian's libmlx5 does for a device it does not drive.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "provider/compat/mlx5/compat.h"

struct provider_search {
  char path[PATH_MAX];
  bool found;
};

static int match_provider(struct dl_phdr_info* info, size_t size, void* data) {
  struct provider_search* search = data;
  const char* name = info->dlpi_name;
  const char* slash = strrchr(name, '/');
  const char* base = slash ? slash + 1 : name;
  if (strcmp(base, IBEMU_PROVIDER_FILE_NAME) != 0 || strlen(name) >= sizeof(search->path)) return 0;
  strcpy(search->path, name);
  search->found = true;
  return 1;
}

/* The table of the loaded provider, or NULL. The handle of a provider whose
 * table is taken stays open: the table is used from then on. */
static const struct ibemu_mlx5dv_entry* find_provider(void) {
  struct provider_search search = {.found = false};
  dl_iterate_phdr(match_provider, &search);
  if (!search.found) return NULL;
  void* handle = dlopen(search.path, RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return NULL;
  const struct ibemu_mlx5dv_entry* entry = dlsym(handle, IBEMU_MLX5DV_ENTRY_SYMBOL);
  if (!entry || entry->version != IBEMU_MLX5DV_ENTRY_VERSION) {
    dlclose(handle);
    return NULL;
  }
  return entry;
}

static _Atomic(const struct ibemu_mlx5dv_entry*) cached_provider;

const struct ibemu_mlx5dv_entry* ibemu_mlx5_provider(void) {
  const struct ibemu_mlx5dv_entry* entry =
      atomic_load_explicit(&cached_provider, memory_order_acquire);
  if (entry) return entry;
  /* Two threads may both search; they find the same table. */
  entry = find_provider();
  if (entry) atomic_store_explicit(&cached_provider, entry, memory_order_release);
  return entry;
}

MLX5_EXPORT bool mlx5dv_is_supported(struct ibv_device* device) {
  const struct ibemu_mlx5dv_entry* p = ibemu_mlx5_provider();
  return p && p->is_supported && p->is_supported(device);
}

MLX5_EXPORT struct ibv_qp* mlx5dv_create_qp(struct ibv_context* context,
                                            struct ibv_qp_init_attr_ex* qp_attr,
                                            struct mlx5dv_qp_init_attr* mlx5_qp_attr) {
  const struct ibemu_mlx5dv_entry* p = ibemu_mlx5_provider();
  if (!p || !p->create_qp) return fail_null(EOPNOTSUPP);
  return p->create_qp(context, qp_attr, mlx5_qp_attr);
}

MLX5_EXPORT struct mlx5dv_qp_ex* mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex* qp) {
  const struct ibemu_mlx5dv_entry* p = ibemu_mlx5_provider();
  return p && p->qp_ex_from_ibv_qp_ex ? p->qp_ex_from_ibv_qp_ex(qp) : NULL;
}

MLX5_EXPORT int mlx5dv_query_device(struct ibv_context* ctx_in, struct mlx5dv_context* attrs_out) {
  const struct ibemu_mlx5dv_entry* p = ibemu_mlx5_provider();
  if (!p || !p->query_device) return EOPNOTSUPP;
  return p->query_device(ctx_in, attrs_out);
}
