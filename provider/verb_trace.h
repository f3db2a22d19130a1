/*
 * IBEMU_TRACE=verbs: what the traced ops table (provider/verb_trace_ops.c)
 * and the extended APIs tell the formatter (provider/core/verb_trace.cc)
 * after each verb returns. Identities of destroyed objects are passed as
 * values taken before the call: the object is gone when the line is written.
 * `ret` is the verb's return value; `err` the errno of a verb that returned
 * NULL (0 otherwise).
 */
#ifndef IBEMU_VERB_TRACE_H
#define IBEMU_VERB_TRACE_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether IBEMU_TRACE has "verbs": asked once per context, CQ and QP, when
 * the traced functions are installed, never per call. */
bool ibemu_trace_verbs_on(void);

void ibemu_trace_open_device(const char* name, struct ibv_context* c, int err);
void ibemu_trace_close_device(const char* name);
void ibemu_trace_query_device(struct ibv_context* c, size_t attr_size,
                              const struct ibv_device_attr_ex* attr, int ret);
void ibemu_trace_query_port(struct ibv_context* c, uint8_t port, const struct ibv_port_attr* attr,
                            int ret);

void ibemu_trace_alloc_pd(struct ibv_context* c, struct ibv_pd* pd, int err);
void ibemu_trace_dealloc_pd(uint32_t pd, int ret);
/* `verb` is "ibv_reg_mr" or "ibv_reg_dmabuf_mr". */
void ibemu_trace_reg_mr(const char* verb, struct ibv_pd* pd, uint64_t addr, size_t length,
                        int access, struct ibv_mr* mr, int err);
void ibemu_trace_rereg_mr(uint32_t lkey, int flags, struct ibv_pd* pd, void* addr, size_t length,
                          int access, int ret);
void ibemu_trace_dereg_mr(uint32_t lkey, int ret);

void ibemu_trace_create_cq(struct ibv_context* c, int cqe, int channel_fd, int comp_vector,
                           struct ibv_cq* cq, int err);
void ibemu_trace_create_cq_ex(struct ibv_context* c, const struct ibv_cq_init_attr_ex* attr,
                              struct ibv_cq_ex* cq, int err);
void ibemu_trace_destroy_cq(const void* cq, int ret);
void ibemu_trace_resize_cq(struct ibv_cq* cq, int cqe, int ret);
/* Logged only when completions or an error came back (docs/tracing.md). */
void ibemu_trace_poll_cq(struct ibv_cq* cq, int n, const struct ibv_wc* wc, int ret);
/* ibv_start_poll / ibv_next_poll: `verb` names it; ENOENT is not logged. */
void ibemu_trace_poll_cq_ex(const char* verb, struct ibv_cq_ex* cq, const struct ibv_wc* wc,
                            int ret);
void ibemu_trace_req_notify_cq(struct ibv_cq* cq, int solicited_only, int ret);

/* `verb` is "ibv_create_qp", "ibv_create_qp_ex" or "mlx5dv_create_qp" (then
 * `dc_type` is enum ibemu_core_dc_type, 0 for other QPs); `asked` is the
 * attributes as the program passed them, `granted` the capabilities the QP
 * got. */
void ibemu_trace_create_qp(const char* verb, const struct ibv_qp_init_attr_ex* asked, int dc_type,
                           const struct ibv_qp_cap* granted, struct ibv_qp* qp, int err);
void ibemu_trace_open_qp(const struct ibv_qp_open_attr* attr, struct ibv_qp* qp, int err);
void ibemu_trace_modify_qp(struct ibv_qp* qp, const struct ibv_qp_attr* attr, int mask, int ret);
void ibemu_trace_query_qp(struct ibv_qp* qp, const struct ibv_qp_attr* attr, int mask, int ret);
void ibemu_trace_destroy_qp(uint32_t qpn, int ret);
void ibemu_trace_post_send(struct ibv_qp* qp, const struct ibv_send_wr* wr,
                           const struct ibv_send_wr* bad, int ret);
void ibemu_trace_post_recv(struct ibv_qp* qp, const struct ibv_recv_wr* wr,
                           const struct ibv_recv_wr* bad, int ret);
void ibemu_trace_mcast(const char* verb, struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid,
                       int ret);

void ibemu_trace_create_srq(struct ibv_srq_init_attr_ex* attr, struct ibv_srq* srq, int err);
void ibemu_trace_modify_srq(struct ibv_srq* srq, const struct ibv_srq_attr* attr, int mask,
                            int ret);
void ibemu_trace_query_srq(struct ibv_srq* srq, const struct ibv_srq_attr* attr, int ret);
void ibemu_trace_destroy_srq(const void* srq, int ret);
void ibemu_trace_get_srq_num(struct ibv_srq* srq, uint32_t srqn, int ret);
void ibemu_trace_post_srq_recv(struct ibv_srq* srq, const struct ibv_recv_wr* wr,
                               const struct ibv_recv_wr* bad, int ret);
void ibemu_trace_open_xrcd(const struct ibv_xrcd_init_attr* attr, struct ibv_xrcd* xrcd, int err);
void ibemu_trace_close_xrcd(const void* xrcd, int ret);

void ibemu_trace_create_ah(struct ibv_pd* pd, const struct ibv_ah_attr* attr, struct ibv_ah* ah,
                           int err);
void ibemu_trace_destroy_ah(const void* ah, int ret);
void ibemu_trace_alloc_mw(struct ibv_pd* pd, enum ibv_mw_type type, struct ibv_mw* mw, int err);
void ibemu_trace_dealloc_mw(uint32_t rkey, int ret);
void ibemu_trace_bind_mw(struct ibv_qp* qp, uint32_t old_rkey, struct ibv_mw* mw,
                         const struct ibv_mw_bind* bind, int ret);

#ifdef __cplusplus
}
#endif

#endif
