/*
 * IBEMU_TRACE=verbs: the ops table a context gets instead of ibemu_ctx_ops
 * while verbs are traced. Each entry calls the plain one and hands its
 * arguments and result to the formatter (provider/verb_trace.h). A program
 * that does not trace never reaches this file: the choice is made once, when
 * the context opens, so the data path carries no check at all.
 */
#include <errno.h>

#include "provider/verb_trace.h"
#include "provider/verbs_objects.h"

#define PLAIN ibemu_ctx_ops

static struct ibv_mw* traced_alloc_mw(struct ibv_pd* pd, enum ibv_mw_type type) {
  struct ibv_mw* mw = PLAIN.alloc_mw(pd, type);
  ibemu_trace_alloc_mw(pd, type, mw, mw ? 0 : errno);
  return mw;
}

static struct ibv_pd* traced_alloc_pd(struct ibv_context* c) {
  struct ibv_pd* pd = PLAIN.alloc_pd(c);
  ibemu_trace_alloc_pd(c, pd, pd ? 0 : errno);
  return pd;
}

static int traced_attach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  int ret = PLAIN.attach_mcast(qp, gid, lid);
  ibemu_trace_mcast("ibv_attach_mcast", qp, gid, lid, ret);
  return ret;
}

static int traced_bind_mw(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* bind) {
  uint32_t old_rkey = mw->rkey;
  int ret = PLAIN.bind_mw(qp, mw, bind);
  ibemu_trace_bind_mw(qp, old_rkey, mw, bind, ret);
  return ret;
}

static struct ibv_ah* traced_create_ah(struct ibv_pd* pd, struct ibv_ah_attr* attr) {
  struct ibv_ah* ah = PLAIN.create_ah(pd, attr);
  ibemu_trace_create_ah(pd, attr, ah, ah ? 0 : errno);
  return ah;
}

static struct ibv_cq* traced_create_cq(struct ibv_context* c, int cqe,
                                       struct ibv_comp_channel* channel, int comp_vector) {
  struct ibv_cq* cq = PLAIN.create_cq(c, cqe, channel, comp_vector);
  ibemu_trace_create_cq(c, cqe, channel ? channel->fd : -1, comp_vector, cq, cq ? 0 : errno);
  return cq;
}

/* The CQ's polling functions are traced too (cq_ex.c asks ibemu_trace_verbs_on). */
static struct ibv_cq_ex* traced_create_cq_ex(struct ibv_context* c,
                                             struct ibv_cq_init_attr_ex* attr) {
  struct ibv_cq_ex* cq = PLAIN.create_cq_ex(c, attr);
  ibemu_trace_create_cq_ex(c, attr, cq, cq ? 0 : errno);
  return cq;
}

static struct ibv_qp* traced_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* attr) {
  const struct ibv_qp_init_attr_ex asked = {.qp_context = attr->qp_context,
                                            .send_cq = attr->send_cq,
                                            .recv_cq = attr->recv_cq,
                                            .srq = attr->srq,
                                            .cap = attr->cap,
                                            .qp_type = attr->qp_type,
                                            .sq_sig_all = attr->sq_sig_all,
                                            .comp_mask = IBV_QP_INIT_ATTR_PD,
                                            .pd = pd};
  struct ibv_qp* qp = PLAIN.create_qp(pd, attr);
  ibemu_trace_create_qp("ibv_create_qp", &asked, 0, &attr->cap, qp, qp ? 0 : errno);
  return qp;
}

static struct ibv_qp* traced_create_qp_ex(struct ibv_context* c, struct ibv_qp_init_attr_ex* attr) {
  const struct ibv_qp_init_attr_ex asked = *attr;
  struct ibv_qp* qp = PLAIN.create_qp_ex(c, attr);
  ibemu_trace_create_qp("ibv_create_qp_ex", &asked, 0, &attr->cap, qp, qp ? 0 : errno);
  return qp;
}

static int traced_close_xrcd(struct ibv_xrcd* xrcd) {
  int ret = PLAIN.close_xrcd(xrcd);
  ibemu_trace_close_xrcd(xrcd, ret);
  return ret;
}

static struct ibv_srq* traced_create_srq(struct ibv_pd* pd, struct ibv_srq_init_attr* attr) {
  struct ibv_srq* srq = PLAIN.create_srq(pd, attr);
  struct ibv_srq_init_attr_ex ex = {
      .attr = attr->attr, .comp_mask = IBV_SRQ_INIT_ATTR_PD, .pd = pd};
  ibemu_trace_create_srq(&ex, srq, srq ? 0 : errno);
  return srq;
}

static struct ibv_srq* traced_create_srq_ex(struct ibv_context* c,
                                            struct ibv_srq_init_attr_ex* attr) {
  struct ibv_srq* srq = PLAIN.create_srq_ex(c, attr);
  ibemu_trace_create_srq(attr, srq, srq ? 0 : errno);
  return srq;
}

static int traced_dealloc_mw(struct ibv_mw* mw) {
  uint32_t rkey = mw->rkey;
  int ret = PLAIN.dealloc_mw(mw);
  ibemu_trace_dealloc_mw(rkey, ret);
  return ret;
}

static int traced_dealloc_pd(struct ibv_pd* pd) {
  uint32_t handle = pd->handle;
  int ret = PLAIN.dealloc_pd(pd);
  ibemu_trace_dealloc_pd(handle, ret);
  return ret;
}

static int traced_dereg_mr(struct verbs_mr* vmr) {
  uint32_t lkey = vmr->ibv_mr.lkey;
  int ret = PLAIN.dereg_mr(vmr);
  ibemu_trace_dereg_mr(lkey, ret);
  return ret;
}

static int traced_destroy_ah(struct ibv_ah* ah) {
  int ret = PLAIN.destroy_ah(ah);
  ibemu_trace_destroy_ah(ah, ret);
  return ret;
}

static int traced_destroy_cq(struct ibv_cq* cq) {
  int ret = PLAIN.destroy_cq(cq);
  ibemu_trace_destroy_cq(cq, ret);
  return ret;
}

static int traced_destroy_qp(struct ibv_qp* qp) {
  uint32_t qpn = qp->qp_num;
  int ret = PLAIN.destroy_qp(qp);
  ibemu_trace_destroy_qp(qpn, ret);
  return ret;
}

static int traced_destroy_srq(struct ibv_srq* srq) {
  int ret = PLAIN.destroy_srq(srq);
  ibemu_trace_destroy_srq(srq, ret);
  return ret;
}

static int traced_detach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  int ret = PLAIN.detach_mcast(qp, gid, lid);
  ibemu_trace_mcast("ibv_detach_mcast", qp, gid, lid, ret);
  return ret;
}

static void traced_free_context(struct ibv_context* c) {
  /* The device outlives its contexts: its name is still there after. */
  const char* name = c->device->name;
  PLAIN.free_context(c);
  ibemu_trace_close_device(name);
}

static int traced_get_srq_num(struct ibv_srq* srq, uint32_t* srq_num) {
  int ret = PLAIN.get_srq_num(srq, srq_num);
  ibemu_trace_get_srq_num(srq, ret ? 0 : *srq_num, ret);
  return ret;
}

static int traced_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  int ret = PLAIN.modify_qp(qp, attr, mask);
  ibemu_trace_modify_qp(qp, attr, mask, ret);
  return ret;
}

static int traced_modify_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr, int mask) {
  int ret = PLAIN.modify_srq(srq, attr, mask);
  ibemu_trace_modify_srq(srq, attr, mask, ret);
  return ret;
}

static struct ibv_qp* traced_open_qp(struct ibv_context* c, struct ibv_qp_open_attr* attr) {
  struct ibv_qp* qp = PLAIN.open_qp(c, attr);
  ibemu_trace_open_qp(attr, qp, qp ? 0 : errno);
  return qp;
}

static struct ibv_xrcd* traced_open_xrcd(struct ibv_context* c, struct ibv_xrcd_init_attr* attr) {
  struct ibv_xrcd* xrcd = PLAIN.open_xrcd(c, attr);
  ibemu_trace_open_xrcd(attr, xrcd, xrcd ? 0 : errno);
  return xrcd;
}

static int traced_poll_cq(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
  int ret = PLAIN.poll_cq(cq, n, wc);
  ibemu_trace_poll_cq(cq, n, wc, ret);
  return ret;
}

static int traced_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  int ret = PLAIN.post_recv(qp, wr, bad);
  ibemu_trace_post_recv(qp, wr, ret ? *bad : NULL, ret);
  return ret;
}

static int traced_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  int ret = PLAIN.post_send(qp, wr, bad);
  ibemu_trace_post_send(qp, wr, ret ? *bad : NULL, ret);
  return ret;
}

static int traced_post_srq_recv(struct ibv_srq* srq, struct ibv_recv_wr* wr,
                                struct ibv_recv_wr** bad) {
  int ret = PLAIN.post_srq_recv(srq, wr, bad);
  ibemu_trace_post_srq_recv(srq, wr, ret ? *bad : NULL, ret);
  return ret;
}

static int traced_query_device_ex(struct ibv_context* c, const struct ibv_query_device_ex_input* in,
                                  struct ibv_device_attr_ex* attr, size_t attr_size) {
  int ret = PLAIN.query_device_ex(c, in, attr, attr_size);
  ibemu_trace_query_device(c, attr_size, attr, ret);
  return ret;
}

static int traced_query_port(struct ibv_context* c, uint8_t port, struct ibv_port_attr* attr) {
  int ret = PLAIN.query_port(c, port, attr);
  ibemu_trace_query_port(c, port, attr, ret);
  return ret;
}

static int traced_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask,
                           struct ibv_qp_init_attr* init) {
  int ret = PLAIN.query_qp(qp, attr, mask, init);
  ibemu_trace_query_qp(qp, attr, mask, ret);
  return ret;
}

static int traced_query_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr) {
  int ret = PLAIN.query_srq(srq, attr);
  ibemu_trace_query_srq(srq, attr, ret);
  return ret;
}

static struct ibv_mr* traced_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length,
                                           uint64_t iova, int fd, int access) {
  struct ibv_mr* mr = PLAIN.reg_dmabuf_mr(pd, offset, length, iova, fd, access);
  ibemu_trace_reg_mr("ibv_reg_dmabuf_mr", pd, iova, length, access, mr, mr ? 0 : errno);
  return mr;
}

static struct ibv_mr* traced_reg_mr(struct ibv_pd* pd, void* addr, size_t length, uint64_t hca_va,
                                    int access) {
  struct ibv_mr* mr = PLAIN.reg_mr(pd, addr, length, hca_va, access);
  ibemu_trace_reg_mr("ibv_reg_mr", pd, (uint64_t)(uintptr_t)addr, length, access, mr,
                     mr ? 0 : errno);
  return mr;
}

static int traced_req_notify_cq(struct ibv_cq* cq, int solicited_only) {
  int ret = PLAIN.req_notify_cq(cq, solicited_only);
  ibemu_trace_req_notify_cq(cq, solicited_only, ret);
  return ret;
}

static int traced_rereg_mr(struct verbs_mr* vmr, int flags, struct ibv_pd* pd, void* addr,
                           size_t length, int access) {
  int ret = PLAIN.rereg_mr(vmr, flags, pd, addr, length, access);
  ibemu_trace_rereg_mr(vmr->ibv_mr.lkey, flags, pd, addr, length, access, ret);
  return ret;
}

static int traced_resize_cq(struct ibv_cq* cq, int cqe) {
  int ret = PLAIN.resize_cq(cq, cqe);
  ibemu_trace_resize_cq(cq, cqe, ret);
  return ret;
}

/* No cq_event: the plain one does nothing, as libibverbs' default does. */
const struct verbs_context_ops ibemu_traced_ctx_ops = {
    .alloc_mw = traced_alloc_mw,
    .alloc_pd = traced_alloc_pd,
    .attach_mcast = traced_attach_mcast,
    .bind_mw = traced_bind_mw,
    .create_ah = traced_create_ah,
    .create_cq = traced_create_cq,
    .create_cq_ex = traced_create_cq_ex,
    .create_qp = traced_create_qp,
    .create_qp_ex = traced_create_qp_ex,
    .close_xrcd = traced_close_xrcd,
    .create_srq = traced_create_srq,
    .create_srq_ex = traced_create_srq_ex,
    .dealloc_mw = traced_dealloc_mw,
    .dealloc_pd = traced_dealloc_pd,
    .dereg_mr = traced_dereg_mr,
    .destroy_ah = traced_destroy_ah,
    .destroy_cq = traced_destroy_cq,
    .destroy_qp = traced_destroy_qp,
    .destroy_srq = traced_destroy_srq,
    .detach_mcast = traced_detach_mcast,
    .free_context = traced_free_context,
    .get_srq_num = traced_get_srq_num,
    .modify_qp = traced_modify_qp,
    .modify_srq = traced_modify_srq,
    .open_qp = traced_open_qp,
    .open_xrcd = traced_open_xrcd,
    .poll_cq = traced_poll_cq,
    .post_recv = traced_post_recv,
    .post_send = traced_post_send,
    .post_srq_recv = traced_post_srq_recv,
    .query_device_ex = traced_query_device_ex,
    .query_port = traced_query_port,
    .query_qp = traced_query_qp,
    .query_srq = traced_query_srq,
    .reg_dmabuf_mr = traced_reg_dmabuf_mr,
    .reg_mr = traced_reg_mr,
    .req_notify_cq = traced_req_notify_cq,
    .rereg_mr = traced_rereg_mr,
    .resize_cq = traced_resize_cq,
};
