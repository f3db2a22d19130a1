/*
 * The boundary between the provider's C glue (provider/verbs_provider.c, which
 * knows libibverbs' private structures) and its C++ core (provider/core/,
 * which runs the transport). Plain C types only; every function is noexcept
 * on the C++ side and reports errors as errno values.
 */
#ifndef IBEMU_CORE_API_H
#define IBEMU_CORE_API_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibemu_core_context;
struct ibemu_core_cq;
struct ibemu_core_qp;
struct ibemu_core_srq;

/* Opens the emulated device `ibdev_name` through the local ibemud. `cmd_fd`
 * is the uverbs file libibverbs opened: a kernel device's (ibemu.ko) or the
 * preload shim's stand-in. On success *async_fd is the read end of the
 * context's async event pipe. */
struct ibemu_core_context* ibemu_core_open(const char* ibdev_name, int cmd_fd, int* async_fd,
                                           int* err);
void ibemu_core_close(struct ibemu_core_context* ctx);

int ibemu_core_query_device_ex(struct ibemu_core_context* ctx, struct ibv_device_attr_ex* attr,
                               size_t attr_size);
int ibemu_core_query_port(struct ibemu_core_context* ctx, uint8_t port, struct ibv_port_attr* attr);

uint32_t ibemu_core_alloc_pd(struct ibemu_core_context* ctx);
int ibemu_core_reg_mr(struct ibemu_core_context* ctx, uint32_t pd, void* addr, size_t length,
                      uint64_t iova, int access, uint32_t* key);
/* ibv_reg_dmabuf_mr: a GPU dma-buf named by its GPU address (iova), or a
 * host dma-buf mapped at `offset`. */
int ibemu_core_reg_dmabuf_mr(struct ibemu_core_context* ctx, uint32_t pd, uint64_t offset,
                             size_t length, uint64_t iova, int fd, int access, uint32_t* key);
int ibemu_core_dereg_mr(struct ibemu_core_context* ctx, uint32_t key);
/* An address handle: what ibv_create_ah was given (a UD WR names it). */
struct ibemu_ah {
  struct ibv_ah ah;
  struct ibv_ah_attr attr;
};
int ibemu_core_check_ah(struct ibemu_core_context* ctx, const struct ibv_ah_attr* attr);

/* ibv_attach_mcast / ibv_detach_mcast on a UD QP. */
int ibemu_core_attach_mcast(struct ibemu_core_qp* qp, const union ibv_gid* gid, uint16_t lid);
int ibemu_core_detach_mcast(struct ibemu_core_qp* qp, const union ibv_gid* gid, uint16_t lid);

/* Memory windows: `type` is enum ibv_mw_type; the rkey names the window. */
int ibemu_core_alloc_mw(struct ibemu_core_context* ctx, uint32_t pd, int type, uint32_t* rkey);
int ibemu_core_dealloc_mw(struct ibemu_core_context* ctx, uint32_t rkey);
/* ibv_rereg_mr: `flags` are IBV_REREG_MR_*; the key stays the same. */
int ibemu_core_rereg_mr(struct ibemu_core_context* ctx, uint32_t key, int flags, uint32_t pd,
                        void* addr, size_t length, int access);

/* `cq` is the libibverbs object reported through the completion channel. */
struct ibemu_core_cq* ibemu_core_create_cq(struct ibemu_core_context* ctx, int cqe,
                                           struct ibv_cq* cq, int channel_fd, int* err);
int ibemu_core_destroy_cq(struct ibemu_core_cq* cq);
int ibemu_core_poll_cq(struct ibemu_core_cq* cq, int n, struct ibv_wc* wc);
int ibemu_core_req_notify_cq(struct ibemu_core_cq* cq, int solicited_only);
int ibemu_core_resize_cq(struct ibemu_core_cq* cq, int cqe);

/* A QP of the Dynamically Connected transport (mlx5dv's DC; attr->qp_type
 * is IBV_QPT_DRIVER for them). */
enum ibemu_core_dc_type { IBEMU_CORE_DCI = 1, IBEMU_CORE_DCT = 2 };
struct ibemu_core_dc {
  enum ibemu_core_dc_type type;
  uint64_t dct_access_key; /* DCT only */
};

/* Validates the attributes (caps are updated to what was granted) and
 * allocates the QP number through the daemon. `ibqp` is the libibverbs object
 * its async events name; `dc` is NULL but for DC QPs. */
struct ibemu_core_qp* ibemu_core_create_qp(struct ibemu_core_context* ctx, struct ibv_qp* ibqp,
                                           struct ibv_qp_init_attr_ex* attr, uint32_t pd,
                                           struct ibemu_core_cq* send_cq,
                                           struct ibemu_core_cq* recv_cq,
                                           struct ibemu_core_srq* srq, uint32_t xrcd,
                                           const struct ibemu_core_dc* dc, uint32_t* qpn, int* err);

/* Shared receive queues. `srq` is the libibverbs object its limit event names;
 * attr->max_wr / max_sge are raised to what was granted. */
struct ibemu_core_srq* ibemu_core_create_srq(struct ibemu_core_context* ctx, struct ibv_srq* srq,
                                             struct ibv_srq_attr* attr, int* err);
int ibemu_core_destroy_srq(struct ibemu_core_srq* srq);
/* The SRQ's number on the device (ibv_get_srq_num), assigned when first asked. */
int ibemu_core_srq_number(struct ibemu_core_srq* srq, uint32_t* srqn);
/* Makes an SRQ an XRC SRQ of domain `xrcd`, completing on `cq`; *srqn is the
 * number senders name it by. */
int ibemu_core_make_xrc_srq(struct ibemu_core_srq* srq, uint32_t xrcd, uint32_t pd,
                            struct ibemu_core_cq* cq, uint32_t* srqn);

/* XRC domains: `file` names the domain shared through a file ("" = private). */
int ibemu_core_open_xrcd(struct ibemu_core_context* ctx, const char* file, int create,
                         int exclusive, uint32_t* xrcd);
int ibemu_core_close_xrcd(struct ibemu_core_context* ctx, uint32_t xrcd);
int ibemu_core_modify_srq(struct ibemu_core_srq* srq, const struct ibv_srq_attr* attr, int mask);
int ibemu_core_query_srq(struct ibemu_core_srq* srq, struct ibv_srq_attr* attr);
int ibemu_core_post_srq_recv(struct ibemu_core_srq* srq, struct ibv_recv_wr* wr,
                             struct ibv_recv_wr** bad);
/* ibv_open_qp: a handle on the XRC receive QP `qpn` of XRC domain `xrcd`,
 * wherever it was created; `ibqp` is the libibverbs object its async events
 * name. Destroying the handle closes only it. */
struct ibemu_core_qp* ibemu_core_open_qp(struct ibemu_core_context* ctx, struct ibv_qp* ibqp,
                                         uint32_t xrcd, uint32_t qpn, int* err);
int ibemu_core_destroy_qp(struct ibemu_core_qp* qp);
int ibemu_core_modify_qp(struct ibemu_core_qp* qp, struct ibv_qp_attr* attr, int mask);
int ibemu_core_query_qp(struct ibemu_core_qp* qp, struct ibv_qp_attr* attr, int mask,
                        struct ibv_qp_init_attr* init);
int ibemu_core_post_send(struct ibemu_core_qp* qp, struct ibv_send_wr* wr,
                         struct ibv_send_wr** bad);
int ibemu_core_post_recv(struct ibemu_core_qp* qp, struct ibv_recv_wr* wr,
                         struct ibv_recv_wr** bad);

/* ---- The ibv_wr_* API (provider/core/qp_ex_api.cc) ----
 * A builder accumulates the WRs of one ibv_wr_start() .. ibv_wr_complete()
 * region of a QP and posts them together through the same engine path as
 * ibemu_core_post_send. Errors found while building (too many WRs or SGEs,
 * inline data too long, a setter without a WR) are remembered and returned by
 * ibemu_core_wr_complete, which then posts nothing (as mlx5 and rxe roll
 * back). Locking: ibemu_core_wr_start takes the builder's lock and
 * ibemu_core_wr_complete / ibemu_core_wr_abort release it, on the same
 * thread; the calls in between need no lock of their own. */
struct ibemu_core_wr_builder;

/* One WR as a builder function (ibv_wr_send, ibv_wr_rdma_write, ...) gives it. */
struct ibemu_core_wr {
  uint64_t wr_id;
  uint32_t flags;       /* ibv_send_flags; IBV_SEND_INLINE comes from the setter used */
  uint32_t opcode;      /* ibv_wr_opcode */
  uint32_t imm_or_rkey; /* imm_data (network order), or the rkey to invalidate */
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  struct { /* IBV_WR_BIND_MW: the window (by its current rkey) and ibv_mw_bind_info */
    uint32_t mw_rkey;
    uint32_t mr_lkey;
    uint32_t access;
    uint64_t addr;
    uint64_t length;
  } bind;
};

/* The IBV_QP_EX_WITH_* operations the device offers on a QP of `qp_type`. */
uint64_t ibemu_core_wr_ops_supported(enum ibv_qp_type qp_type);
/* `cap` is what the QP was granted (limits for WRs per region, SGEs, inline). */
struct ibemu_core_wr_builder* ibemu_core_wr_builder_create(struct ibemu_core_qp* qp,
                                                           const struct ibv_qp_cap* cap, int* err);
void ibemu_core_wr_builder_destroy(struct ibemu_core_wr_builder* b);
void ibemu_core_wr_start(struct ibemu_core_wr_builder* b);
void ibemu_core_wr_op(struct ibemu_core_wr_builder* b, const struct ibemu_core_wr* wr);
/* Data setters: apply to the last WR built. */
void ibemu_core_wr_set_sges(struct ibemu_core_wr_builder* b, const struct ibv_sge* sges,
                            size_t num_sge);
void ibemu_core_wr_set_inline(struct ibemu_core_wr_builder* b, const struct ibv_data_buf* bufs,
                              size_t num_buf);
void ibemu_core_wr_set_ud_addr(struct ibemu_core_wr_builder* b, const struct ibemu_ah* ah,
                               uint32_t remote_qpn, uint32_t remote_qkey);
void ibemu_core_wr_set_xrc_srqn(struct ibemu_core_wr_builder* b, uint32_t remote_srqn);
/* A DCI's WR: its target DCT (mlx5dv_wr_set_dc_addr). */
void ibemu_core_wr_set_dc_addr(struct ibemu_core_wr_builder* b, const struct ibemu_ah* ah,
                               uint32_t remote_dctn, uint64_t remote_dc_key);
/* Posts the region's WRs; 0 or the errno of the first bad WR. */
int ibemu_core_wr_complete(struct ibemu_core_wr_builder* b);
void ibemu_core_wr_abort(struct ibemu_core_wr_builder* b);

#ifdef __cplusplus
}
#endif

#endif
