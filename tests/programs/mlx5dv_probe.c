/*
 * Probes the mlx5 direct-verbs API on ibemu's devices. Linked against
 * Debian's libmlx5; run with ibemu's (provider/compat/mlx5) in front of it.
 *   mlx5dv_probe basic DEV
 *       before any device list exists (the provider is not loaded yet),
 *       the emulated calls answer as for a device libmlx5 does not drive;
 *       then mlx5dv_is_supported is true on every device and the calls
 *       ibemu does not emulate (DEVX, steering, mkeys, crypto, ...) fail
 *       as on a device libmlx5 does not drive;
 *   mlx5dv_probe dc DEV
 *       mlx5dv_query_device reports the DC capabilities asked for, and
 *       mlx5dv_create_qp makes a DCT and a DCI whose mlx5dv_qp_ex has
 *       wr_set_dc_addr.
 * Prints "libmlx5 PATH" (the libmlx5.so.1 the program is bound to), then
 * "ok WHAT" or "FAIL WHAT: ..." per check; exits 0 when none failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe_checks.h"

static int first_libmlx5(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size, (void)data;
  const char* slash = strrchr(info->dlpi_name, '/');
  if (!slash || strcmp(slash + 1, "libmlx5.so.1") != 0) return 0;
  printf("libmlx5 %s\n", info->dlpi_name);
  return 1;
}

static void die(const char* what) {
  perror(what);
  exit(2);
}

/* Before ibv_get_device_list no provider is loaded: the compat library must
 * answer "not mine" without touching these zeroed objects. */
static void before_device_list(void) {
  static struct ibv_device no_device;
  static struct ibv_context no_context = {.device = &no_device};
  static struct ibv_qp_ex no_qp;
  struct ibv_qp_init_attr_ex attr = {0};
  struct mlx5dv_context dv = {0};
  check(!mlx5dv_is_supported(&no_device), "early is_supported false", "true");
  expect_int(mlx5dv_query_device(&no_context, &dv), EOPNOTSUPP, "early query_device");
  errno = 0;
  expect_null(mlx5dv_create_qp(&no_context, &attr, NULL), EOPNOTSUPP, "early create_qp");
  check(!mlx5dv_qp_ex_from_ibv_qp_ex(&no_qp), "early qp_ex_from_ibv_qp_ex NULL", "not NULL");
}

static struct ibv_context* open_named(struct ibv_device** list, const char* name) {
  for (; *list; list++)
    if (!strcmp(ibv_get_device_name(*list), name)) {
      struct ibv_context* ctx = ibv_open_device(*list);
      if (!ctx) die("ibv_open_device");
      return ctx;
    }
  fprintf(stderr, "no device %s\n", name);
  exit(2);
}

static void devx_and_context(struct ibv_device* dev, struct ibv_context* ctx) {
  uint32_t in[4] = {0}, out[4] = {0}, eqn, qpn;
  struct mlx5dv_context_attr open_attr = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
  errno = 0;
  expect_null(mlx5dv_open_device(dev, &open_attr), EOPNOTSUPP, "open_device");
  expect_int(mlx5dv_devx_general_cmd(ctx, in, sizeof in, out, sizeof out), EOPNOTSUPP,
             "devx_general_cmd");
  errno = 0;
  expect_null(mlx5dv_devx_obj_create(ctx, in, sizeof in, out, sizeof out), EOPNOTSUPP,
              "devx_obj_create");
  errno = 0;
  expect_null(mlx5dv_devx_umem_reg(ctx, in, sizeof in, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP,
              "devx_umem_reg");
  errno = 0;
  expect_null(mlx5dv_devx_alloc_uar(ctx, MLX5DV_UAR_ALLOC_TYPE_NC), EOPNOTSUPP, "devx_alloc_uar");
  expect_int(mlx5dv_devx_query_eqn(ctx, 0, &eqn), EOPNOTSUPP, "devx_query_eqn");
  errno = 0;
  expect_null(mlx5dv_devx_create_event_channel(ctx, 0), EOPNOTSUPP, "devx_create_event_channel");

  struct mlx5dv_clock_info clock;
  struct mlx5dv_port port;
  expect_int(mlx5dv_get_clock_info(ctx, &clock), EOPNOTSUPP, "get_clock_info");
  expect_int(mlx5dv_query_port(ctx, 1, &port), EOPNOTSUPP, "query_port");
  expect_int(mlx5dv_set_context_attr(ctx, MLX5DV_CTX_ATTR_BUF_ALLOCATORS, NULL), EOPNOTSUPP,
             "set_context_attr");
  expect_int(mlx5dv_reserved_qpn_alloc(ctx, &qpn), EOPNOTSUPP, "reserved_qpn_alloc");
  struct mlx5dv_sched_attr sched = {0};
  errno = 0;
  expect_null(mlx5dv_sched_node_create(ctx, &sched), EOPNOTSUPP, "sched_node_create");
  struct ibv_alloc_dm_attr dm = {.length = 64};
  struct mlx5dv_alloc_dm_attr mdm = {0};
  errno = 0;
  expect_null(mlx5dv_alloc_dm(ctx, &dm, &mdm), EOPNOTSUPP, "alloc_dm");
  struct mlx5dv_vfio_context_attr vfio = {.pci_name = "0000:00:00.0"};
  errno = 0;
  expect_null(mlx5dv_get_vfio_device_list(&vfio), EOPNOTSUPP, "get_vfio_device_list");
}

static void steering(struct ibv_context* ctx) {
  errno = 0;
  expect_null(mlx5dv_dr_domain_create(ctx, MLX5DV_DR_DOMAIN_TYPE_NIC_RX), EOPNOTSUPP,
              "dr_domain_create");
  errno = 0;
  expect_null(mlx5dv_dr_domain_create(ctx, MLX5DV_DR_DOMAIN_TYPE_FDB + 1), EINVAL,
              "dr_domain_create bad type");
  /* A drop action needs no device, in Debian's library as here. */
  struct mlx5dv_dr_action* drop = mlx5dv_dr_action_create_drop();
  check(drop != NULL, "dr_action_create_drop", "NULL");
  if (drop) expect_int(mlx5dv_dr_action_destroy(drop), 0, "dr_action_destroy");
  struct mlx5dv_flow_matcher_attr matcher = {0};
  errno = 0;
  expect_null(mlx5dv_create_flow_matcher(ctx, &matcher), EOPNOTSUPP, "create_flow_matcher");
}

static void objects(struct ibv_context* ctx) {
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!pd || !cq) die("pd/cq");
  struct ibv_qp_init_attr qp_attr = {
      .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {1, 1, 1, 1, 0}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qp_attr);
  if (!qp) die("ibv_create_qp");

  struct mlx5dv_mkey_init_attr mkey = {.pd = pd, .max_entries = 1};
  errno = 0;
  expect_null(mlx5dv_create_mkey(&mkey), EOPNOTSUPP, "create_mkey");
  struct mlx5dv_dek_init_attr dek = {.pd = pd};
  errno = 0;
  expect_null(mlx5dv_dek_create(ctx, &dek), EOPNOTSUPP, "dek_create");
  struct mlx5dv_crypto_login_attr login = {0};
  expect_int(mlx5dv_crypto_login(ctx, &login), EOPNOTSUPP, "crypto_login");

  struct mlx5dv_cq dv_cq;
  struct mlx5dv_obj obj = {.cq = {.in = cq, .out = &dv_cq}};
  expect_int(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ), EOPNOTSUPP, "init_obj CQ");
  expect_int(mlx5dv_init_obj(&obj, 0), EINVAL, "init_obj nothing");
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16};
  errno = 0;
  expect_null(mlx5dv_create_cq(ctx, &cq_attr, NULL), EOPNOTSUPP, "create_cq");

  uint32_t in[4] = {0}, out[4] = {0};
  uint8_t port, active;
  expect_int(mlx5dv_devx_qp_query(qp, in, sizeof in, out, sizeof out), EOPNOTSUPP, "devx_qp_query");
  expect_int(mlx5dv_query_qp_lag_port(qp, &port, &active), EOPNOTSUPP, "query_qp_lag_port");
  expect_int(mlx5dv_modify_qp_udp_sport(qp, 4791), EOPNOTSUPP, "modify_qp_udp_sport");

  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
}

static int basic(const char* name) {
  before_device_list();
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("ibv_get_device_list");
  for (int i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "is_supported %s", ibv_get_device_name(list[i]));
    check(mlx5dv_is_supported(list[i]), what, "false");
  }
  struct ibv_context* ctx = open_named(list, name);
  devx_and_context(ctx->device, ctx);
  steering(ctx);
  objects(ctx);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return probe_failures ? 1 : 0;
}

static int dc(const char* name) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  if (!list) die("ibv_get_device_list");
  struct ibv_context* ctx = open_named(list, name);

  struct mlx5dv_context attrs = {.comp_mask = MLX5DV_CONTEXT_MASK_DC_ODP_CAPS |
                                              MLX5DV_CONTEXT_MASK_DCI_STREAMS};
  expect_int(mlx5dv_query_device(ctx, &attrs), 0, "query_device");
  printf("flags 0x%llx comp_mask 0x%llx\n", (unsigned long long)attrs.flags,
         (unsigned long long)attrs.comp_mask);
  check(attrs.comp_mask & MLX5DV_CONTEXT_MASK_DC_ODP_CAPS, "query_device DC_ODP_CAPS",
        "not reported");
  check(attrs.comp_mask & MLX5DV_CONTEXT_MASK_DCI_STREAMS, "query_device DCI_STREAMS",
        "not reported");

  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 16, .max_sge = 1}};
  struct ibv_srq* srq = pd ? ibv_create_srq(pd, &srq_attr) : NULL;
  if (!pd || !cq || !srq) die("pd/cq/srq");

  struct ibv_qp_init_attr_ex dct_attr = {.qp_type = IBV_QPT_DRIVER,
                                         .send_cq = cq,
                                         .recv_cq = cq,
                                         .srq = srq,
                                         .comp_mask = IBV_QP_INIT_ATTR_PD,
                                         .pd = pd};
  struct mlx5dv_qp_init_attr dct_dv = {
      .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
      .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = 0x1234}};
  errno = 0;
  struct ibv_qp* dct = mlx5dv_create_qp(ctx, &dct_attr, &dct_dv);
  check(dct && dct->qp_type == IBV_QPT_DRIVER, "create_qp DCT", strerror(errno));

  struct ibv_qp_init_attr_ex dci_attr = {
      .qp_type = IBV_QPT_DRIVER,
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 16, .max_send_sge = 1},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND};
  struct mlx5dv_qp_init_attr dci_dv = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
                                       .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCI}};
  errno = 0;
  struct ibv_qp* dci = mlx5dv_create_qp(ctx, &dci_attr, &dci_dv);
  check(dci && dci->qp_type == IBV_QPT_DRIVER, "create_qp DCI", strerror(errno));
  if (dci) {
    struct mlx5dv_qp_ex* mqp = mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_to_qp_ex(dci));
    check(mqp && mqp->wr_set_dc_addr, "qp_ex_from_ibv_qp_ex wr_set_dc_addr", "missing");
    expect_int(mlx5dv_dci_stream_id_reset(dci, 0), EOPNOTSUPP, "dci_stream_id_reset");
    ibv_destroy_qp(dci);
  }
  if (dct) ibv_destroy_qp(dct);
  ibv_destroy_srq(srq);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return probe_failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s basic|dc DEVICE\n", argv[0]);
    return 2;
  }
  dl_iterate_phdr(first_libmlx5, NULL);
  if (!strcmp(argv[1], "basic")) return basic(argv[2]);
  if (!strcmp(argv[1], "dc")) return dc(argv[2]);
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
