/*
 * The functions of rdma-core's libmlx5 newer than Debian 12's (nodes
 * MLX5_1.25 .. MLX5_1.27), reached as NCCL reaches mlx5dv_reg_dmabuf_mr:
 * libmlx5.so.1 opened with dlopen and each function looked up at its node
 * with dlvsym, on a system whose own libmlx5 may not have them. Run with
 * ibemu's in front (`ibemu run`), on ibemu0 and ibemu1:
 * - mlx5dv_get_data_direct_sysfs_path: ENODEV, as on a ConnectX with no
 *   data-direct device;
 * - NCCL's dma-buf probe, a registration of fd -1: EBADF (dma-bufs are
 *   supported; EOPNOTSUPP would say they are not);
 * - MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT: EINVAL, or EOPNOTSUPP for an IOVA
 *   off a page boundary; an unknown mlx5 flag: EINVAL;
 * - a memfd (standing for a CPU driver's dma-buf, as in dmabuf_probe)
 *   registered with no mlx5 flag is a working region: RDMA WRITE from
 *   ibemu0 lands in it through its rkey, the bytes show through the fd's
 *   mapping, RDMA WRITE from it through its lkey reaches ibemu0; then it
 *   deregisters;
 * - the other newer calls fail as on a device libmlx5 does not drive
 *   (docs/mlx5dv.md), and _mlx5dv_get_export_sizes reports sizes.
 * Prints "libmlx5 PATH" (the library dlopen found), then "ok WHAT" or
 * "FAIL WHAT: ..." per check; exits 0 when none failed, 2 when it could not
 * run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rc_common.h"

#include "probe_checks.h"

/* rdma-core v54's mlx5_api.h; older headers lack it (the value is the
 * kernel's MLX5_IB_UAPI_REG_DMABUF_ACCESS_DATA_DIRECT). */
#ifndef MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT
#define MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (1 << 0)
#endif

typedef struct ibv_mr* reg_dmabuf_mr_fn(struct ibv_pd* pd, uint64_t offset, size_t length,
                                        uint64_t iova, int fd, int access, int mlx5_access);
typedef int get_data_direct_sysfs_path_fn(struct ibv_context* context, char* buf, size_t buf_len);
typedef bool is_supported_fn(struct ibv_device* device);
typedef struct ibv_flow* create_flow_fn(void* matcher, void* match_value, size_t num_actions,
                                        void* actions_attr, size_t attr_len);
typedef int export_fn(void* object, void* data);
typedef void* import_fn(struct ibv_context* context, void* data);
typedef void unimport_fn(void* object);
/* struct mlx5dv_export_sizes of rdma-core v63's mlx5dv.h. */
struct export_sizes {
  uint32_t var_attrs_size;
  uint32_t devx_umem_attrs_size;
  uint32_t devx_obj_attrs_size;
};

static void die(const char* what) {
  fprintf(stderr, "mlx5dv_newer_nodes: %s: %s\n", what, strerror(errno));
  exit(2);
}

/* A refused registration: NULL with errno `want`. */
static void expect_refused(struct ibv_mr* mr, int want, const char* what) {
  int err = errno;
  char detail[96];
  snprintf(detail, sizeof detail, "got %p, errno %d (%s), want NULL and errno %d", (void*)mr, err,
           strerror(err), want);
  check(!mr && err == want, what, detail);
  if (mr) ibv_dereg_mr(mr);
}

static void* versioned(void* lib, const char* name, const char* version) {
  void* f = dlvsym(lib, name, version);
  if (!f) {
    fprintf(stderr, "mlx5dv_newer_nodes: no %s@%s: %s\n", name, version, dlerror());
    exit(2);
  }
  return f;
}

/* The calls of MLX5_1.25.1 .. MLX5_1.27 with objects no ibemu device can
 * have made (zeroed stand-ins): each fails in its own convention. */
static void other_newer_calls(void* lib, struct ibv_context* ctx) {
  static uint64_t stand_in[16];
  uint8_t data[64];
  char what[96];

  create_flow_fn* create_flow = versioned(lib, "__mlx5dv_create_flow", "MLX5_1.25.1");
  errno = 0;
  expect_null(create_flow(stand_in, stand_in, 0, NULL, 24), EOPNOTSUPP, "__mlx5dv_create_flow");

  int (*uar_export)(void*) = versioned(lib, "mlx5dv_devx_uar_export_dmabuf_fd", "MLX5_1.26");
  errno = 0;
  int fd = uar_export(stand_in);
  check(fd == -1 && errno == EOPNOTSUPP, "devx_uar_export_dmabuf_fd", "not -1 with EOPNOTSUPP");

  void (*get_sizes)(struct export_sizes*, size_t) =
      versioned(lib, "_mlx5dv_get_export_sizes", "MLX5_1.27");
  struct export_sizes sizes;
  memset(&sizes, 0xff, sizeof sizes);
  get_sizes(&sizes, sizeof sizes);
  printf("export sizes: var %u, umem %u, obj %u\n", sizes.var_attrs_size,
         sizes.devx_umem_attrs_size, sizes.devx_obj_attrs_size);
  check(sizes.var_attrs_size && sizes.var_attrs_size <= sizeof data && sizes.devx_umem_attrs_size &&
            sizes.devx_umem_attrs_size <= sizeof data && sizes.devx_obj_attrs_size &&
            sizes.devx_obj_attrs_size <= sizeof data,
        "get_export_sizes", "a size is 0 or implausible");

  static const char* const kinds[] = {"mlx5dv_devx_obj", "mlx5dv_devx_umem", "mlx5dv_var"};
  for (int i = 0; i < 3; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s_export", kinds[i]);
    export_fn* export = versioned(lib, name, "MLX5_1.27");
    memset(data, 0xa5, sizeof data);
    errno = 0;
    int ret = export(stand_in, data);
    bool untouched = true;
    for (size_t j = 0; j < sizeof data; j++) untouched &= data[j] == 0xa5;
    snprintf(what, sizeof what, "%s EOPNOTSUPP", name);
    check(ret == EOPNOTSUPP && errno == EOPNOTSUPP && untouched, what,
          "not EOPNOTSUPP in both, or the buffer written");

    snprintf(name, sizeof name, "%s_import", kinds[i]);
    import_fn* import = versioned(lib, name, "MLX5_1.27");
    errno = 0;
    void* imported = import(ctx, data);
    snprintf(what, sizeof what, "%s EOPNOTSUPP", name);
    expect_null(imported, EOPNOTSUPP, what);

    snprintf(name, sizeof name, "%s_unimport", kinds[i]);
    unimport_fn* unimport = versioned(lib, name, "MLX5_1.27");
    unimport(stand_in);  // nothing to free: it must only return
    printf("ok %s\n", name);
  }
}

/* One signaled RDMA WRITE of `sge` to (remote_addr, rkey), waited for. */
static bool rdma_write(struct rc_end* from, struct ibv_sge sge, uint64_t remote_addr,
                       uint32_t rkey) {
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED,
                           .wr.rdma = {.remote_addr = remote_addr, .rkey = rkey}};
  struct ibv_send_wr* bad;
  if (ibv_post_send(from->qp, &wr, &bad)) return false;
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(from->cq, 1, &wc)) == 0) {
  }
  return n == 1 && wc.status == IBV_WC_SUCCESS;
}

enum { kSize = 2 * 4096 + 100, kOffset = 4096 };
static const int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
static const uint64_t kIova = 0x100000;  // the address the peer uses

/* What an ibemu HCA, which has no data-direct device, refuses. */
static void data_direct_refused(void* lib, struct rc_end* b, int fd) {
  reg_dmabuf_mr_fn* reg_dmabuf_mr = versioned(lib, "mlx5dv_reg_dmabuf_mr", "MLX5_1.25");
  get_data_direct_sysfs_path_fn* get_data_direct_sysfs_path =
      versioned(lib, "mlx5dv_get_data_direct_sysfs_path", "MLX5_1.25");
  char path[256] = "";
  errno = 0;
  int ret = get_data_direct_sysfs_path(b->ctx, path, sizeof path);
  char detail[96];
  snprintf(detail, sizeof detail, "returned %d, errno %d, want ENODEV (%d) both", ret, errno,
           ENODEV);
  check(ret == ENODEV && errno == ENODEV, "get_data_direct_sysfs_path ENODEV", detail);

  errno = 0;
  expect_refused(reg_dmabuf_mr(b->pd, 0, 0, 0, -1, 0, 0), EBADF, "fd -1 EBADF");
  errno = 0;
  expect_refused(reg_dmabuf_mr(b->pd, kOffset, kSize, kIova, fd, kAccess,
                               MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT),
                 EINVAL, "data direct EINVAL");
  errno = 0;
  expect_refused(reg_dmabuf_mr(b->pd, kOffset, kSize, kIova + 8, fd, kAccess,
                               MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT),
                 EOPNOTSUPP, "data direct unaligned iova EOPNOTSUPP");
  errno = 0;
  expect_refused(reg_dmabuf_mr(b->pd, kOffset, kSize, kIova, fd, kAccess, 1 << 1), EINVAL,
                 "unknown mlx5 flag EINVAL");
}

/* The memfd `fd` (mapped at `view`) as a region of b, used both ways. */
static void working_region(void* lib, struct rc_end* a, struct rc_end* b, int fd,
                           const uint8_t* view) {
  reg_dmabuf_mr_fn* reg_dmabuf_mr = versioned(lib, "mlx5dv_reg_dmabuf_mr", "MLX5_1.25");
  errno = 0;
  struct ibv_mr* mr = reg_dmabuf_mr(b->pd, kOffset, kSize, kIova, fd, kAccess, 0);
  check(mr != NULL, "reg_dmabuf_mr", strerror(errno));
  if (!mr) return;
  check(mr->lkey && mr->rkey && mr->pd == b->pd && mr->context == b->ctx &&
            mr->addr == (void*)(uintptr_t)kOffset && mr->length == kSize,
        "reg_dmabuf_mr fields", "lkey, rkey, pd, context, addr or length wrong");

  uint8_t* src = malloc(kSize);
  uint8_t* back = calloc(1, kSize);
  for (int i = 0; i < kSize; ++i) src[i] = (uint8_t)(i * 7 + 3);
  struct ibv_mr* src_mr = ibv_reg_mr(a->pd, src, kSize, kAccess);
  struct ibv_mr* back_mr = ibv_reg_mr(a->pd, back, kSize, kAccess);
  if (!src_mr || !back_mr) die("ibv_reg_mr");
  bool wrote =
      rdma_write(a, (struct ibv_sge){(uintptr_t)src, kSize, src_mr->lkey}, kIova, mr->rkey);
  check(wrote && !memcmp(view + kOffset, src, kSize), "RDMA WRITE into it (rkey)",
        wrote ? "the dma-buf does not hold the bytes" : "the WRITE failed");
  bool sent =
      rdma_write(b, (struct ibv_sge){kIova, kSize, mr->lkey}, (uintptr_t)back, back_mr->rkey);
  check(sent && !memcmp(back, src, kSize), "RDMA WRITE from it (lkey)",
        sent ? "the peer does not hold the bytes" : "the WRITE failed");
  check(ibv_dereg_mr(mr) == 0, "dereg", strerror(errno));
}

int main(void) {
  void* lib = dlopen("libmlx5.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "mlx5dv_newer_nodes: %s\n", dlerror());
    return 2;
  }
  struct link_map* map;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0) printf("libmlx5 %s\n", map->l_name);

  struct rc_end a, b;
  if (open_rc_end("ibemu0", 4, &a) || open_rc_end("ibemu1", 4, &b)) die("devices");
  if (connect_rc_qp(a.qp, b.qp->qp_num, b.lid, IBV_MTU_1024, 14, 7, kAccess) ||
      connect_rc_qp(b.qp, a.qp->qp_num, a.lid, IBV_MTU_1024, 14, 7, kAccess))
    die("connecting");
  is_supported_fn* is_supported = versioned(lib, "mlx5dv_is_supported", "MLX5_1.8");
  check(is_supported(b.ctx->device), "is_supported", "false");

  int fd = memfd_create("mlx5dv_newer_nodes", 0);
  if (fd < 0 || ftruncate(fd, kOffset + kSize)) die("memfd");
  uint8_t* view = mmap(NULL, kOffset + kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) die("mmap");

  data_direct_refused(lib, &b, fd);
  working_region(lib, &a, &b, fd, view);
  other_newer_calls(lib, b.ctx);
  return probe_failures ? 1 : 0;
}
