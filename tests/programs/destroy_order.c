/* Destroying a verbs object that others still use fails with EBUSY and
 * leaves it usable, as the kernel's uverbs does (ib_destroy_usecnt): a PD
 * with an MR, MW, AH, SRQ or QP on it; a CQ a QP or an XRC SRQ completes
 * into; an SRQ a QP receives from; an XRC domain with an SRQ on it. Once the
 * users are gone, each goes with 0. Objects that outlive their context
 * (ibv_close_device first, as pyverbs' garbage collector may do it) still
 * go with 0, and nothing of the closed context is touched after it is
 * freed. Prints one line per check and "ok" at
 * the end; exits 1 at the first check that fails.
 * Usage: destroy_order [-d DEVICE] */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void expect(const char* what, int got, int want) {
  printf("%-52s %s (%s)\n", what, got == want ? "ok" : "FAILED", got ? strerror(got) : "0");
  if (got != want) failures++;
}

static void* must(void* object, const char* what) {
  if (!object) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
  }
  return object;
}

static struct ibv_qp* rc_qp(struct ibv_pd* pd, struct ibv_cq* cq, struct ibv_srq* srq) {
  struct ibv_qp_init_attr attr = {
      .send_cq = cq,
      .recv_cq = cq,
      .srq = srq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 4, .max_recv_wr = srq ? 0 : 4, .max_send_sge = 1, .max_recv_sge = 1}};
  return must(ibv_create_qp(pd, &attr), "ibv_create_qp");
}

/* The PD stays while any one kind of object is on it. */
static void pd_users(struct ibv_context* ctx) {
  static char buf[4096];
  struct ibv_pd* pd = must(ibv_alloc_pd(ctx), "ibv_alloc_pd");
  struct ibv_cq* cq = must(ibv_create_cq(ctx, 8, NULL, NULL, 0), "ibv_create_cq");

  struct ibv_mr* mr = must(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
  expect("ibv_dealloc_pd with an MR on it", ibv_dealloc_pd(pd), EBUSY);
  expect("  the MR still deregisters", ibv_dereg_mr(mr), 0);

  struct ibv_mw* mw = must(ibv_alloc_mw(pd, IBV_MW_TYPE_1), "ibv_alloc_mw");
  expect("ibv_dealloc_pd with a memory window on it", ibv_dealloc_pd(pd), EBUSY);
  expect("  the window still deallocates", ibv_dealloc_mw(mw), 0);

  struct ibv_ah_attr ah_attr = {.dlid = 1, .port_num = 1};
  struct ibv_ah* ah = must(ibv_create_ah(pd, &ah_attr), "ibv_create_ah");
  expect("ibv_dealloc_pd with an AH on it", ibv_dealloc_pd(pd), EBUSY);
  expect("  the AH still goes", ibv_destroy_ah(ah), 0);

  struct ibv_srq_init_attr srq_attr = {.attr = {.max_wr = 4, .max_sge = 1}};
  struct ibv_srq* srq = must(ibv_create_srq(pd, &srq_attr), "ibv_create_srq");
  expect("ibv_dealloc_pd with an SRQ on it", ibv_dealloc_pd(pd), EBUSY);
  struct ibv_qp* qp = rc_qp(pd, cq, srq);
  expect("ibv_destroy_srq while a QP receives from it", ibv_destroy_srq(srq), EBUSY);
  expect("ibv_destroy_cq while a QP completes into it", ibv_destroy_cq(cq), EBUSY);
  expect("ibv_dealloc_pd with a QP on it", ibv_dealloc_pd(pd), EBUSY);
  /* After every refusal the objects still work. */
  struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  expect("  the QP still moves to INIT",
         ibv_modify_qp(qp, &init,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
         0);
  expect("  the QP goes", ibv_destroy_qp(qp), 0);
  expect("  then the SRQ", ibv_destroy_srq(srq), 0);

  struct ibv_mr* moved = must(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), "reg");
  struct ibv_pd* other = must(ibv_alloc_pd(ctx), "ibv_alloc_pd");
  expect("ibv_rereg_mr moves an MR to another PD",
         ibv_rereg_mr(moved, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0), 0);
  expect("  the PD it left goes", ibv_dealloc_pd(pd), 0);
  expect("  the PD it joined stays", ibv_dealloc_pd(other), EBUSY);
  expect("  the MR deregisters", ibv_dereg_mr(moved), 0);
  expect("  then its PD goes", ibv_dealloc_pd(other), 0);
  expect("  the CQ goes", ibv_destroy_cq(cq), 0);
}

/* An XRC domain and the CQ of an XRC SRQ on it stay while the SRQ does. */
static void xrc_users(struct ibv_context* ctx) {
  struct ibv_xrcd_init_attr xattr = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xattr);
  if (!xrcd) {
    printf("%-52s skipped (%s)\n", "XRC domain", strerror(errno));
    return;
  }
  struct ibv_pd* pd = must(ibv_alloc_pd(ctx), "ibv_alloc_pd");
  struct ibv_cq* cq = must(ibv_create_cq(ctx, 8, NULL, NULL, 0), "ibv_create_cq");
  struct ibv_srq_init_attr_ex sattr = {.attr = {.max_wr = 4, .max_sge = 1},
                                       .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                    IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
                                       .srq_type = IBV_SRQT_XRC,
                                       .pd = pd,
                                       .xrcd = xrcd,
                                       .cq = cq};
  struct ibv_srq* srq = must(ibv_create_srq_ex(ctx, &sattr), "ibv_create_srq_ex");
  expect("ibv_close_xrcd with an XRC SRQ on it", ibv_close_xrcd(xrcd), EBUSY);
  expect("ibv_destroy_cq while an XRC SRQ completes into it", ibv_destroy_cq(cq), EBUSY);
  expect("ibv_dealloc_pd with an XRC SRQ on it", ibv_dealloc_pd(pd), EBUSY);
  expect("  the XRC SRQ goes", ibv_destroy_srq(srq), 0);
  expect("  then the domain", ibv_close_xrcd(xrcd), 0);
  expect("  the CQ", ibv_destroy_cq(cq), 0);
  expect("  and the PD", ibv_dealloc_pd(pd), 0);
}

/* ibv_close_device before the objects made on the context. */
static void after_close(struct ibv_device* dev) {
  static char buf[4096];
  struct ibv_context* ctx = must(ibv_open_device(dev), "ibv_open_device");
  struct ibv_pd* pd = must(ibv_alloc_pd(ctx), "ibv_alloc_pd");
  struct ibv_cq* cq = must(ibv_create_cq(ctx, 8, NULL, NULL, 0), "ibv_create_cq");
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 8, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
  struct ibv_cq_ex* cq_ex = must(ibv_create_cq_ex(ctx, &cq_attr), "ibv_create_cq_ex");
  struct ibv_mr* mr = must(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), "ibv_reg_mr");
  struct ibv_qp* qp = rc_qp(pd, cq, NULL);
  struct ibv_xrcd_init_attr xattr = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xattr);
  expect("ibv_close_device with objects left", ibv_close_device(ctx), 0);
  expect("  a QP of the closed context still goes", ibv_destroy_qp(qp), 0);
  expect("  its MR", ibv_dereg_mr(mr), 0);
  expect("  its CQ", ibv_destroy_cq(cq), 0);
  if (xrcd) expect("  its XRC domain", ibv_close_xrcd(xrcd), 0);
  expect("  its PD", ibv_dealloc_pd(pd), 0);
  expect("  and last its extended CQ", ibv_destroy_cq(ibv_cq_ex_to_cq(cq_ex)), 0);
}

int main(int argc, char** argv) {
  const char* name = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "d:")) != -1) {
    if (opt != 'd') {
      fprintf(stderr, "usage: %s [-d DEVICE]\n", argv[0]);
      return 2;
    }
    name = optarg;
  }
  int n;
  struct ibv_device** list = must(ibv_get_device_list(&n), "ibv_get_device_list");
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n && !dev; i++)
    if (!name || !strcmp(ibv_get_device_name(list[i]), name)) dev = list[i];
  struct ibv_context* ctx = must(dev ? ibv_open_device(dev) : NULL, "ibv_open_device");
  pd_users(ctx);
  xrc_users(ctx);
  ibv_close_device(ctx);
  after_close(dev);
  ibv_free_device_list(list);
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
