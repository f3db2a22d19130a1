/*
 * The private provider ABI of libibverbs for every rdma-core release from v35
 * on. rdma-core does not install its driver.h, so ibemu declares the few
 * structures and functions it uses here, with the layout each release fixes;
 * every difference between releases is in this file. Two numbers, both
 * found by cmake/CheckVerbsPrivateAbi.cmake in the libibverbs the build
 * links against, select the layout:
 *
 *  IBEMU_VERBS_PABI        the ABI's number, N of IBVERBS_PRIVATE_N and of
 *                          verbs_register_driver_N: 34 (v35 to v56), 57 (v57,
 *                          v58), 59 (v59 to v63), 64 (v64), 65 (v65 on).
 *  IBEMU_VERBS_OPS_LAYOUT  the first rdma-core release whose struct
 *                          verbs_context_ops this is. rdma-core twice added
 *                          ops without a new PABI (v36, v62), so the PABI
 *                          alone does not fix the layout.
 *
 * What changed, as far as a provider sees it:
 *  v36  op query_qp_data_in_order (PABI still 34).
 *  v57  ibv_cmd_get_context() takes fds to pass; ibemu calls no ibv_cmd_*.
 *  v59  ops alloc_dmah, dealloc_dmah, reg_mr_ex; ibv_cmd_create_cq_ex()
 *       takes the CQ's buffer, unused here.
 *  v62  ops dm_export_dmabuf_fd, query_port_speed (PABI still 59).
 *  v64  ops alloc_buf, free_buf.
 *  v65  the completion-counter ops (create_comp_cntr and eight more).
 * An op ibemu leaves NULL gets libibverbs' own fallback: EOPNOTSUPP, or for
 * reg_mr_ex and alloc_buf a translation to reg_mr/reg_dmabuf_mr and a
 * page-aligned allocation. The structures other than the ops (the device,
 * the sysfs entry, verbs_mr/qp/srq/cq/xrcd) are the same in every release.
 *
 * This header is C (the layout uses C's atomics).
 */
#ifndef IBEMU_VERBS_DRIVER_H
#define IBEMU_VERBS_DRIVER_H

#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

#if !defined(IBEMU_VERBS_PABI) || !defined(IBEMU_VERBS_OPS_LAYOUT)
#error "cmake/CheckVerbsPrivateAbi.cmake defines IBEMU_VERBS_PABI and IBEMU_VERBS_OPS_LAYOUT"
#endif
#if IBEMU_VERBS_PABI != 34 && IBEMU_VERBS_PABI != 57 && IBEMU_VERBS_PABI != 59 && \
    IBEMU_VERBS_PABI != 64 && IBEMU_VERBS_PABI != 65
#error "provider/verbs_driver.h does not know this IBVERBS_PRIVATE ABI"
#endif

/* Later ABIs' ops take types the headers of earlier rdma-core lack; they
 * are only named here, through pointers. */
struct ibv_buf;
struct ibv_dmah;
struct ibv_dmah_init_attr;
struct ibv_mr_init_attr;
struct ibv_comp_cntr;
struct ibv_comp_cntr_caps;
struct ibv_comp_cntr_init_attr;
struct ibv_qp_attach_comp_cntr_attr;

struct ibemu_list_node {
  struct ibemu_list_node *next, *prev;
};

/* How a verbs_match_ent matches (driver.h's enum verbs_match_kind). */
enum {
  IBEMU_VERBS_MATCH_SENTINEL = 0,
  IBEMU_VERBS_MATCH_MODALIAS = 2,
};

/* A driver id a kernel driver reported over netlink; ibemu.ko has none. */
enum { IBEMU_RDMA_DRIVER_UNKNOWN = 0 };

struct verbs_match_ent {
  void* driver_data;
  union {
    const char* modalias;
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

/* An RDMA device found in sysfs. */
struct verbs_sysfs_dev {
  struct ibemu_list_node entry;
  void* provider_data;
  const struct verbs_match_ent* match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
  char modalias[512];
  uint64_t node_guid;
  uint32_t driver_id;
  enum ibv_node_type node_type;
  int ibdev_idx;
  uint32_t num_ports;
  uint32_t abi_ver;
  struct timespec time_created;
};

struct verbs_device;

struct verbs_device_ops {
  const char* name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const struct verbs_match_ent* match_table;
  const struct verbs_device_ops** static_providers;
  bool (*match_device)(struct verbs_sysfs_dev* sysfs_dev);
  struct verbs_context* (*alloc_context)(struct ibv_device* device, int cmd_fd, void* private_data);
  struct verbs_context* (*import_context)(struct ibv_device* device, int cmd_fd);
  struct verbs_device* (*alloc_device)(struct verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(struct verbs_device* device);
};

struct verbs_device {
  struct ibv_device device; /* must be first */
  const struct verbs_device_ops* ops;
  atomic_int refcount;
  struct ibemu_list_node entry;
  struct verbs_sysfs_dev* sysfs;
  uint64_t core_support;
};

/* libibverbs' enum ibv_mr_type (driver.h). */
enum { IBEMU_MR_TYPE_MR = 0, IBEMU_MR_TYPE_DMABUF_MR = 3 };

struct verbs_mr {
  struct ibv_mr ibv_mr;
  int mr_type; /* enum ibv_mr_type */
  int access;
};

struct verbs_xrcd {
  struct ibv_xrcd xrcd;
  uint32_t comp_mask;
  uint32_t handle;
};

/* An SRQ as libibverbs sees it when the provider reports its type
 * (ibv_get_srq_num and XRC QPs read these). */
struct verbs_srq {
  struct ibv_srq srq;
  enum ibv_srq_type srq_type;
  struct verbs_xrcd* xrcd;
  struct ibv_cq* cq;
  uint32_t srq_num;
};

enum verbs_qp_mask {
  VERBS_QP_XRCD = 1 << 0,
  VERBS_QP_EX = 1 << 1, /* the QP has a struct ibv_qp_ex (ibv_qp_to_qp_ex) */
};

struct verbs_qp {
  union {
    struct ibv_qp qp;
    struct ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;
  struct verbs_xrcd* xrcd;
};

struct verbs_cq {
  union {
    struct ibv_cq cq;
    struct ibv_cq_ex cq_ex;
  };
};

/* Every op a provider may supply, in the ABI's (alphabetical) order. */
struct verbs_context_ops {
  int (*advise_mr)(struct ibv_pd*, enum ibv_advise_mr_advice, uint32_t, struct ibv_sge*, uint32_t);
#if IBEMU_VERBS_OPS_LAYOUT >= 64
  void* (*alloc_buf)(struct ibv_pd*, size_t, struct ibv_buf**);
#endif
  struct ibv_dm* (*alloc_dm)(struct ibv_context*, struct ibv_alloc_dm_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 59
  struct ibv_dmah* (*alloc_dmah)(struct ibv_context*, struct ibv_dmah_init_attr*);
#endif
  struct ibv_mw* (*alloc_mw)(struct ibv_pd*, enum ibv_mw_type);
  struct ibv_mr* (*alloc_null_mr)(struct ibv_pd*);
  struct ibv_pd* (*alloc_parent_domain)(struct ibv_context*, struct ibv_parent_domain_init_attr*);
  struct ibv_pd* (*alloc_pd)(struct ibv_context*);
  struct ibv_td* (*alloc_td)(struct ibv_context*, struct ibv_td_init_attr*);
  void (*async_event)(struct ibv_context*, struct ibv_async_event*);
  int (*attach_counters_point_flow)(struct ibv_counters*, struct ibv_counter_attach_attr*,
                                    struct ibv_flow*);
  int (*attach_mcast)(struct ibv_qp*, const union ibv_gid*, uint16_t);
  int (*bind_mw)(struct ibv_qp*, struct ibv_mw*, struct ibv_mw_bind*);
  int (*close_xrcd)(struct ibv_xrcd*);
  void (*cq_event)(struct ibv_cq*);
  struct ibv_ah* (*create_ah)(struct ibv_pd*, struct ibv_ah_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  struct ibv_comp_cntr* (*create_comp_cntr)(struct ibv_context*, struct ibv_comp_cntr_init_attr*);
#endif
  struct ibv_counters* (*create_counters)(struct ibv_context*, struct ibv_counters_init_attr*);
  struct ibv_cq* (*create_cq)(struct ibv_context*, int, struct ibv_comp_channel*, int);
  struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context*, struct ibv_cq_init_attr_ex*);
  struct ibv_flow* (*create_flow)(struct ibv_qp*, struct ibv_flow_attr*);
  struct ibv_flow_action* (*create_flow_action_esp)(struct ibv_context*,
                                                    struct ibv_flow_action_esp_attr*);
  struct ibv_qp* (*create_qp)(struct ibv_pd*, struct ibv_qp_init_attr*);
  struct ibv_qp* (*create_qp_ex)(struct ibv_context*, struct ibv_qp_init_attr_ex*);
  struct ibv_rwq_ind_table* (*create_rwq_ind_table)(struct ibv_context*,
                                                    struct ibv_rwq_ind_table_init_attr*);
  struct ibv_srq* (*create_srq)(struct ibv_pd*, struct ibv_srq_init_attr*);
  struct ibv_srq* (*create_srq_ex)(struct ibv_context*, struct ibv_srq_init_attr_ex*);
  struct ibv_wq* (*create_wq)(struct ibv_context*, struct ibv_wq_init_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 59
  int (*dealloc_dmah)(struct ibv_dmah*);
#endif
  int (*dealloc_mw)(struct ibv_mw*);
  int (*dealloc_pd)(struct ibv_pd*);
  int (*dealloc_td)(struct ibv_td*);
  int (*dereg_mr)(struct verbs_mr*);
  int (*destroy_ah)(struct ibv_ah*);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*destroy_comp_cntr)(struct ibv_comp_cntr*);
#endif
  int (*destroy_counters)(struct ibv_counters*);
  int (*destroy_cq)(struct ibv_cq*);
  int (*destroy_flow)(struct ibv_flow*);
  int (*destroy_flow_action)(struct ibv_flow_action*);
  int (*destroy_qp)(struct ibv_qp*);
  int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table*);
  int (*destroy_srq)(struct ibv_srq*);
  int (*destroy_wq)(struct ibv_wq*);
  int (*detach_mcast)(struct ibv_qp*, const union ibv_gid*, uint16_t);
#if IBEMU_VERBS_OPS_LAYOUT >= 62
  int (*dm_export_dmabuf_fd)(struct ibv_dm*);
#endif
#if IBEMU_VERBS_OPS_LAYOUT >= 64
  void (*free_buf)(struct ibv_buf*);
#endif
  void (*free_context)(struct ibv_context*);
  int (*free_dm)(struct ibv_dm*);
  int (*get_srq_num)(struct ibv_srq*, uint32_t*);
  struct ibv_dm* (*import_dm)(struct ibv_context*, uint32_t);
  struct ibv_mr* (*import_mr)(struct ibv_pd*, uint32_t);
  struct ibv_pd* (*import_pd)(struct ibv_context*, uint32_t);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*inc_comp_cntr)(struct ibv_comp_cntr*, uint64_t);
  int (*inc_err_comp_cntr)(struct ibv_comp_cntr*, uint64_t);
#endif
  int (*modify_cq)(struct ibv_cq*, struct ibv_modify_cq_attr*);
  int (*modify_flow_action_esp)(struct ibv_flow_action*, struct ibv_flow_action_esp_attr*);
  int (*modify_qp)(struct ibv_qp*, struct ibv_qp_attr*, int);
  int (*modify_qp_rate_limit)(struct ibv_qp*, struct ibv_qp_rate_limit_attr*);
  int (*modify_srq)(struct ibv_srq*, struct ibv_srq_attr*, int);
  int (*modify_wq)(struct ibv_wq*, struct ibv_wq_attr*);
  struct ibv_qp* (*open_qp)(struct ibv_context*, struct ibv_qp_open_attr*);
  struct ibv_xrcd* (*open_xrcd)(struct ibv_context*, struct ibv_xrcd_init_attr*);
  int (*poll_cq)(struct ibv_cq*, int, struct ibv_wc*);
  int (*post_recv)(struct ibv_qp*, struct ibv_recv_wr*, struct ibv_recv_wr**);
  int (*post_send)(struct ibv_qp*, struct ibv_send_wr*, struct ibv_send_wr**);
  int (*post_srq_ops)(struct ibv_srq*, struct ibv_ops_wr*, struct ibv_ops_wr**);
  int (*post_srq_recv)(struct ibv_srq*, struct ibv_recv_wr*, struct ibv_recv_wr**);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*qp_attach_comp_cntr)(struct ibv_qp*, struct ibv_comp_cntr*,
                             struct ibv_qp_attach_comp_cntr_attr*);
  int (*query_comp_cntr_caps)(struct ibv_context*, struct ibv_comp_cntr_caps*, size_t);
#endif
  int (*query_device_ex)(struct ibv_context*, const struct ibv_query_device_ex_input*,
                         struct ibv_device_attr_ex*, size_t);
  int (*query_ece)(struct ibv_qp*, struct ibv_ece*);
  int (*query_port)(struct ibv_context*, uint8_t, struct ibv_port_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 62
  int (*query_port_speed)(struct ibv_context*, uint32_t, uint64_t*);
#endif
  int (*query_qp)(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 36
  int (*query_qp_data_in_order)(struct ibv_qp*, enum ibv_wr_opcode, uint32_t);
#endif
  int (*query_rt_values)(struct ibv_context*, struct ibv_values_ex*);
  int (*query_srq)(struct ibv_srq*, struct ibv_srq_attr*);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*read_comp_cntr)(struct ibv_comp_cntr*, uint64_t*);
#endif
  int (*read_counters)(struct ibv_counters*, uint64_t*, uint32_t, uint32_t);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*read_err_comp_cntr)(struct ibv_comp_cntr*, uint64_t*);
#endif
  struct ibv_mr* (*reg_dm_mr)(struct ibv_pd*, struct ibv_dm*, uint64_t, size_t, unsigned int);
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int);
  struct ibv_mr* (*reg_mr)(struct ibv_pd*, void*, size_t, uint64_t, int);
#if IBEMU_VERBS_OPS_LAYOUT >= 59
  struct ibv_mr* (*reg_mr_ex)(struct ibv_pd*, struct ibv_mr_init_attr*);
#endif
  int (*req_notify_cq)(struct ibv_cq*, int);
  int (*rereg_mr)(struct verbs_mr*, int, struct ibv_pd*, void*, size_t, int);
  int (*resize_cq)(struct ibv_cq*, int);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*set_comp_cntr)(struct ibv_comp_cntr*, uint64_t);
#endif
  int (*set_ece)(struct ibv_qp*, struct ibv_ece*);
#if IBEMU_VERBS_OPS_LAYOUT >= 65
  int (*set_err_comp_cntr)(struct ibv_comp_cntr*, uint64_t);
#endif
  void (*unimport_dm)(struct ibv_dm*);
  void (*unimport_mr)(struct ibv_mr*);
  void (*unimport_pd)(struct ibv_pd*);
};

/* verbs_register_driver_<PABI>: the ABI's number is part of the name, so a
 * provider built for another ABI fails to load rather than misbehaves. */
#define IBEMU_REGISTER_DRIVER_NAME_(pabi) verbs_register_driver_##pabi
#define IBEMU_REGISTER_DRIVER_NAME(pabi) IBEMU_REGISTER_DRIVER_NAME_(pabi)
#define ibemu_verbs_register_driver IBEMU_REGISTER_DRIVER_NAME(IBEMU_VERBS_PABI)
void ibemu_verbs_register_driver(const struct verbs_device_ops* ops);
void* _verbs_init_and_alloc_context(struct ibv_device* device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context* context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context* context);
void verbs_set_ops(struct verbs_context* vctx, const struct verbs_context_ops* ops);
void verbs_init_cq(struct ibv_cq* cq, struct ibv_context* context, struct ibv_comp_channel* channel,
                   void* cq_context);

#define IBEMU_CONTAINER_OF(ptr, type, member) \
  ((type*)((char*)(ptr) - __builtin_offsetof(type, member)))

#endif
