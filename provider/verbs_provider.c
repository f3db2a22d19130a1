/*
 * libibemu-rdmav<PABI>.so: the rdma-core provider of ibemu's emulated HCAs. This
 * file is the glue libibverbs sees — device matching, the context, and one
 * small wrapper per verb that finds ibemu's object with container_of and
 * calls the C++ core (provider/core_api.h). It is C because libibverbs'
 * private structures (provider/verbs_driver.h) are.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "provider/verb_trace.h"
#include "provider/verbs_layout.h"
#include "provider/verbs_objects.h"

/* The per-device driver ABI the daemon writes in sysfs (uverbsN/abi_version). */
#define IBEMU_DRIVER_ABI 1

/* ---- device ---- */

/*
 * Every libibverbs from v35 on walks each provider's match_table, with no
 * NULL check, for every device a kernel driver identified (driver id set:
 * rxe, mlx5, any real HCA), so a provider without a table crashes every
 * verbs program on such a host. The table matches the device name, as
 * libibverbs spells it for name matches ("rdma_device:N<name>", fnmatch).
 */
static const struct verbs_match_ent ibemu_match_table[] = {
    {.u.modalias = "rdma_device:*Nibemu*", .kind = IBEMU_VERBS_MATCH_MODALIAS},
    {.kind = IBEMU_VERBS_MATCH_SENTINEL},
};

/* libibverbs calls this after the table, whatever the table said. A device
 * with a driver id belongs to that kernel driver's provider, even if someone
 * renamed it ibemu-something; ibemu.ko reports none. */
static bool ibemu_match_device(struct verbs_sysfs_dev* sysfs_dev) {
  return sysfs_dev->match == &ibemu_match_table[0] &&
         sysfs_dev->driver_id == IBEMU_RDMA_DRIVER_UNKNOWN &&
         strncmp(sysfs_dev->ibdev_name, "ibemu", 5) == 0;
}

static struct verbs_device* ibemu_alloc_device(struct verbs_sysfs_dev* sysfs_dev) {
  (void)sysfs_dev;
  struct ibemu_device* dev = calloc(1, sizeof(*dev));
  return dev ? &dev->vdev : NULL;
}

static void ibemu_uninit_device(struct verbs_device* vdev) {
  free(IBEMU_CONTAINER_OF(vdev, struct ibemu_device, vdev));
}

/* ---- context ---- */

/* attr_size is sizeof(struct ibv_device_attr_ex) of the verbs.h the program
 * was built with (ibv_query_device_ex is inline), or sizeof(orig_attr) from
 * ibv_query_device: older programs pass less, newer ones more. Fill what both
 * sides know and zero the rest, as the kernel's query does. */
static int ibemu_query_device_ex(struct ibv_context* c, const struct ibv_query_device_ex_input* in,
                                 struct ibv_device_attr_ex* attr, size_t attr_size) {
  struct ibv_device_attr_ex full;
  int err;
  if (in && in->comp_mask) return EINVAL;
  if (attr_size < sizeof(attr->orig_attr)) return EINVAL;
  memset(&full, 0, sizeof(full));
  err = ibemu_core_query_device_ex(to_ctx(c)->core, &full, sizeof(full));
  if (err) return err;
  /* The extended fields a program reads: the 64-bit capability flags start
   * with the 32 classic ones; the port count without the u8 limit. No
   * completion timestamps (completion_timestamp_mask and hca_core_clock
   * stay 0), no ODP, TSO, RSS, packet pacing, tag matching or device memory. */
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  if (attr_size > sizeof(full)) {
    memset((char*)attr + sizeof(full), 0, attr_size - sizeof(full));
    attr_size = sizeof(full);
  }
  memcpy(attr, &full, attr_size);
  return 0;
}

static int ibemu_query_port(struct ibv_context* c, uint8_t port, struct ibv_port_attr* attr) {
  return ibemu_core_query_port(to_ctx(c)->core, port, attr);
}

static struct ibv_pd* ibemu_alloc_pd(struct ibv_context* c) {
  struct ibemu_pd* pd = calloc(1, sizeof(*pd));
  if (!pd) {
    errno = ENOMEM;
    return NULL;
  }
  pd->id = ibemu_core_alloc_pd(to_ctx(c)->core);
  pd->pd.handle = pd->id;
  ibemu_hold_context(c);
  return &pd->pd;
}

/* As the kernel (ib_destroy_usecnt): a PD that objects still use stays, and
 * its deallocation fails with EBUSY; freed, a later verb on one of those
 * objects would reach freed memory. */
static int ibemu_dealloc_pd(struct ibv_pd* pd) {
  struct ibv_context* c = pd->context;
  if (atomic_load(&to_pd(pd)->users)) return EBUSY;
  free(to_pd(pd));
  ibemu_release_context(c);
  return 0;
}

/* An object created on `pd` (NULL: none, as for XRC receive QPs) ... */
static void hold_pd(struct ibv_pd* pd) {
  if (pd) atomic_fetch_add(&to_pd(pd)->users, 1);
}

/* ... and destroyed. */
static void release_pd(struct ibv_pd* pd) {
  if (pd) atomic_fetch_sub(&to_pd(pd)->users, 1);
}

/* The libibverbs object of a region the core registered (err 0) under `key`. */
static struct ibv_mr* new_mr(int err, uint32_t key, int access, int mr_type) {
  struct verbs_mr* vmr = err ? NULL : calloc(1, sizeof(*vmr));
  if (!vmr) {
    errno = err ? err : ENOMEM;
    return NULL;
  }
  vmr->ibv_mr.lkey = key;
  vmr->ibv_mr.rkey = key;
  vmr->ibv_mr.handle = key;
  vmr->access = access;
  vmr->mr_type = mr_type;
  return &vmr->ibv_mr;
}

static struct ibv_mr* ibemu_reg_mr(struct ibv_pd* pd, void* addr, size_t length, uint64_t hca_va,
                                   int access) {
  uint32_t key = 0;
  int err = ibemu_core_reg_mr(to_ctx(pd->context)->core, to_pd(pd)->id, addr, length, hca_va,
                              access, &key);
  struct ibv_mr* mr = new_mr(err, key, access, IBEMU_MR_TYPE_MR);
  if (!mr && !err) ibemu_core_dereg_mr(to_ctx(pd->context)->core, key);
  if (mr) hold_pd(pd);
  return mr;
}

static struct ibv_mr* ibemu_reg_dmabuf_mr(struct ibv_pd* pd, uint64_t offset, size_t length,
                                          uint64_t iova, int fd, int access) {
  uint32_t key = 0;
  int err = ibemu_core_reg_dmabuf_mr(to_ctx(pd->context)->core, to_pd(pd)->id, offset, length, iova,
                                     fd, access, &key);
  struct ibv_mr* mr = new_mr(err, key, access, IBEMU_MR_TYPE_DMABUF_MR);
  if (!mr && !err) ibemu_core_dereg_mr(to_ctx(pd->context)->core, key);
  if (mr) hold_pd(pd);
  return mr;
}

static int ibemu_dereg_mr(struct verbs_mr* vmr) {
  int err = ibemu_core_dereg_mr(to_ctx(vmr->ibv_mr.context)->core, vmr->ibv_mr.lkey);
  if (err) return err;
  release_pd(vmr->ibv_mr.pd);
  free(vmr);
  return 0;
}

static int ibemu_rereg_mr(struct verbs_mr* vmr, int flags, struct ibv_pd* pd, void* addr,
                          size_t length, int access) {
  struct ibv_mr* mr = &vmr->ibv_mr;
  uint32_t pd_id = (flags & IBV_REREG_MR_CHANGE_PD) ? to_pd(pd)->id : to_pd(mr->pd)->id;
  int err =
      ibemu_core_rereg_mr(to_ctx(mr->context)->core, mr->lkey, flags, pd_id, addr, length, access);
  if (err) return err;
  if (flags & IBV_REREG_MR_CHANGE_PD) { /* libibverbs sets mr->pd = pd next */
    release_pd(mr->pd);
    hold_pd(pd);
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) vmr->access = access;
  return 0;
}

static int ibemu_attach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  return ibemu_core_attach_mcast(to_qp(qp)->core, gid, lid);
}

static int ibemu_detach_mcast(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid) {
  return ibemu_core_detach_mcast(to_qp(qp)->core, gid, lid);
}

static struct ibv_ah* ibemu_create_ah(struct ibv_pd* pd, struct ibv_ah_attr* attr) {
  struct ibemu_ah* ah;
  int err = ibemu_core_check_ah(to_ctx(pd->context)->core, attr);
  if (err) {
    errno = err;
    return NULL;
  }
  ah = calloc(1, sizeof(*ah));
  if (!ah) {
    errno = ENOMEM;
    return NULL;
  }
  ah->attr = *attr;
  hold_pd(pd);
  return &ah->ah;
}

static int ibemu_destroy_ah(struct ibv_ah* ah) {
  release_pd(ah->pd);
  free((struct ibemu_ah*)ah);
  return 0;
}

static struct ibemu_srq* new_srq(struct ibv_context* c, struct ibv_srq_attr* attr) {
  struct ibemu_srq* srq = calloc(1, sizeof(*srq));
  int err;
  if (!srq) {
    errno = ENOMEM;
    return NULL;
  }
  srq->core = ibemu_core_create_srq(to_ctx(c)->core, &srq->vsrq.srq, attr, &err);
  if (!srq->core) {
    free(srq);
    errno = err;
    return NULL;
  }
  srq->vsrq.srq_type = IBV_SRQT_BASIC;
  return srq;
}

static struct ibv_srq* ibemu_create_srq(struct ibv_pd* pd, struct ibv_srq_init_attr* attr) {
  struct ibemu_srq* srq = new_srq(pd->context, &attr->attr);
  if (!srq) return NULL;
  hold_pd(pd); /* libibverbs sets srq->pd */
  return &srq->vsrq.srq;
}

/* ibv_create_srq_ex: basic SRQs, and XRC SRQs (IBA annex A14) that XRC
 * receive QPs of their domain deliver into. libibverbs leaves the ibv_srq
 * fields to the provider on this path. */
static struct ibv_srq* ibemu_create_srq_ex(struct ibv_context* c,
                                           struct ibv_srq_init_attr_ex* attr) {
  const uint32_t supported =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  enum ibv_srq_type type =
      (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  struct ibemu_srq* srq;
  if ((attr->comp_mask & ~supported) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
      (type == IBV_SRQT_XRC && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd ||
                                !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq))) {
    errno = EINVAL;
    return NULL;
  }
  srq = new_srq(c, &attr->attr);
  if (!srq) return NULL;
  if (type == IBV_SRQT_XRC) {
    struct ibemu_xrcd* xrcd = (struct ibemu_xrcd*)attr->xrcd;
    int err = ibemu_core_make_xrc_srq(srq->core, xrcd->id, to_pd(attr->pd)->id,
                                      to_cq(attr->cq)->core, &srq->vsrq.srq_num);
    if (err) {
      ibemu_core_destroy_srq(srq->core);
      free(srq);
      errno = err;
      return NULL;
    }
    srq->vsrq.srq_type = IBV_SRQT_XRC;
    srq->vsrq.xrcd = &xrcd->vxrcd;
    atomic_fetch_add(&xrcd->users, 1);
    srq->vsrq.cq = attr->cq;
  }
  struct ibv_srq* s = &srq->vsrq.srq;
  s->context = c;
  s->srq_context = attr->srq_context;
  s->pd = attr->pd;
  hold_pd(s->pd);
  s->handle = srq->vsrq.srq_num;
  s->events_completed = 0;
  pthread_mutex_init(&s->mutex, NULL);
  pthread_cond_init(&s->cond, NULL);
  return s;
}

/* Every SRQ has a number, as on ConnectX (DC programs exchange theirs). */
static int ibemu_get_srq_num(struct ibv_srq* srq, uint32_t* srq_num) {
  struct ibemu_srq* s = (struct ibemu_srq*)srq;
  if (s->vsrq.srq_type == IBV_SRQT_XRC) {
    *srq_num = s->vsrq.srq_num;
    return 0;
  }
  return ibemu_core_srq_number(s->core, srq_num);
}

/* ibv_open_xrcd: processes that pass the same file share the domain (the
 * daemon keys it by device and inode); no file, a private domain. */
static struct ibv_xrcd* ibemu_open_xrcd(struct ibv_context* c, struct ibv_xrcd_init_attr* attr) {
  char file[64] = "";
  uint32_t id;
  struct ibemu_xrcd* xrcd;
  int err;
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
      !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) || (attr->oflags & ~(O_CREAT | O_EXCL))) {
    errno = EINVAL;
    return NULL;
  }
  if (attr->fd >= 0) {
    struct stat st;
    if (fstat(attr->fd, &st) != 0) return NULL;
    snprintf(file, sizeof(file), "%llx:%llx", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
  } else if (!(attr->oflags & O_CREAT)) {
    errno = EINVAL; /* a private domain can only be created */
    return NULL;
  }
  err = ibemu_core_open_xrcd(to_ctx(c)->core, file, attr->oflags & O_CREAT, attr->oflags & O_EXCL,
                             &id);
  if (err) {
    errno = err;
    return NULL;
  }
  xrcd = calloc(1, sizeof(*xrcd));
  if (!xrcd) {
    ibemu_core_close_xrcd(to_ctx(c)->core, id);
    errno = ENOMEM;
    return NULL;
  }
  xrcd->id = id;
  xrcd->vxrcd.handle = id;
  xrcd->vxrcd.xrcd.context = c;
  ibemu_hold_context(c);
  return &xrcd->vxrcd.xrcd;
}

static int ibemu_close_xrcd(struct ibv_xrcd* x) {
  struct ibemu_xrcd* xrcd = (struct ibemu_xrcd*)x;
  /* As the kernel: a domain that SRQs or QPs still use stays open. */
  if (atomic_load(&xrcd->users)) return EBUSY;
  struct ibv_context* c = x->context;
  int err = ibemu_core_close_xrcd(to_ctx(c)->core, xrcd->id);
  if (err) return err;
  free(xrcd);
  ibemu_release_context(c);
  return 0;
}

/* What an XRC domain no longer carries when an SRQ or QP on it goes. */
static void release_xrcd(struct verbs_xrcd* x) {
  if (x) atomic_fetch_sub(&((struct ibemu_xrcd*)x)->users, 1);
}

static int ibemu_destroy_srq(struct ibv_srq* srq) {
  struct ibemu_srq* s = (struct ibemu_srq*)srq;
  int err = ibemu_core_destroy_srq(s->core);
  if (err) return err;
  release_pd(srq->pd);
  release_xrcd(s->vsrq.srq_type == IBV_SRQT_XRC ? s->vsrq.xrcd : NULL);
  free(srq);
  return 0;
}

static int ibemu_modify_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr, int mask) {
  return ibemu_core_modify_srq(((struct ibemu_srq*)srq)->core, attr, mask);
}

static int ibemu_query_srq(struct ibv_srq* srq, struct ibv_srq_attr* attr) {
  return ibemu_core_query_srq(((struct ibemu_srq*)srq)->core, attr);
}

static int ibemu_post_srq_recv(struct ibv_srq* srq, struct ibv_recv_wr* wr,
                               struct ibv_recv_wr** bad) {
  return ibemu_core_post_srq_recv(((struct ibemu_srq*)srq)->core, wr, bad);
}

static struct ibv_mw* ibemu_alloc_mw(struct ibv_pd* pd, enum ibv_mw_type type) {
  struct ibv_mw* mw = calloc(1, sizeof(*mw));
  int err;
  if (!mw) {
    errno = ENOMEM;
    return NULL;
  }
  err = ibemu_core_alloc_mw(to_ctx(pd->context)->core, to_pd(pd)->id, type, &mw->rkey);
  if (err) {
    free(mw);
    errno = err;
    return NULL;
  }
  mw->context = pd->context;
  mw->pd = pd;
  hold_pd(pd);
  mw->handle = mw->rkey;
  mw->type = type;
  return mw;
}

static int ibemu_dealloc_mw(struct ibv_mw* mw) {
  int err = ibemu_core_dealloc_mw(to_ctx(mw->context)->core, mw->rkey);
  if (err) return err;
  release_pd(mw->pd);
  free(mw);
  return 0;
}

/* ibv_bind_mw (type 1 windows): a BIND_MW work request on the QP's send queue
 * under the window's next key, which the window takes once it is posted. */
static int ibemu_bind_mw(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* mw_bind) {
  struct ibv_send_wr wr = {
      .wr_id = mw_bind->wr_id,
      .opcode = IBV_WR_BIND_MW,
      .send_flags = mw_bind->send_flags,
      .bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey), .bind_info = mw_bind->bind_info},
  };
  struct ibv_send_wr* bad;
  int err = ibemu_core_post_send(to_qp(qp)->core, &wr, &bad);
  if (err) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

static struct ibv_cq* ibemu_create_cq(struct ibv_context* c, int cqe,
                                      struct ibv_comp_channel* channel, int comp_vector) {
  struct ibemu_cq* cq;
  int err;
  if (comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
    errno = EINVAL;
    return NULL;
  }
  cq = calloc(1, sizeof(*cq));
  if (!cq) {
    errno = ENOMEM;
    return NULL;
  }
  cq->core =
      ibemu_core_create_cq(to_ctx(c)->core, cqe, &cq->vcq.cq, channel ? channel->fd : -1, &err);
  if (!cq->core) {
    free(cq);
    errno = err;
    return NULL;
  }
  cq->vcq.cq.cqe = cqe;
  ibemu_hold_context(c);
  return &cq->vcq.cq;
}

static int ibemu_destroy_cq(struct ibv_cq* ibcq) {
  struct ibemu_cq* cq = to_cq(ibcq);
  struct ibv_context* c = ibcq->context;
  int err = ibemu_core_destroy_cq(cq->core);
  if (err) return err;
  ibemu_cq_ex_fini(cq);
  free(cq);
  ibemu_release_context(c);
  return 0;
}

static int ibemu_poll_cq(struct ibv_cq* cq, int n, struct ibv_wc* wc) {
  return ibemu_core_poll_cq(to_cq(cq)->core, n, wc);
}

static int ibemu_req_notify_cq(struct ibv_cq* cq, int solicited_only) {
  return ibemu_core_req_notify_cq(to_cq(cq)->core, solicited_only);
}

static void ibemu_cq_event(struct ibv_cq* cq) { (void)cq; }

static int ibemu_resize_cq(struct ibv_cq* cq, int cqe) {
  int err = ibemu_core_resize_cq(to_cq(cq)->core, cqe);
  if (!err) cq->cqe = cqe;
  return err;
}

struct ibv_qp* ibemu_create_qp_with(struct ibv_context* c, struct ibv_qp_init_attr_ex* attr,
                                    const struct ibemu_core_dc* dc) {
  struct ibemu_qp* qp;
  uint32_t qpn;
  int err;
  const uint32_t supported = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                             IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  bool qp_ex = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  /* An XRC receive QP names an XRC domain instead of a PD (IBA annex A14). */
  const bool xrc_recv = attr->qp_type == IBV_QPT_XRC_RECV;
  struct ibemu_xrcd* xrcd =
      (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) ? (struct ibemu_xrcd*)attr->xrcd : NULL;
  /* Of the creation flags only multicast loopback blocking applies to an IB
   * HCA (the others are Ethernet and offloads it does not have), and only
   * to UD QPs. */
  const uint32_t create_flags =
      (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? attr->create_flags : 0;
  if ((attr->comp_mask & ~supported) || (create_flags & ~IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (create_flags && attr->qp_type != IBV_QPT_UD) {
    errno = EINVAL;
    return NULL;
  }
  if (xrc_recv ? !xrcd : !attr->pd) {
    errno = EINVAL;
    return NULL;
  }
  if (qp_ex && (err = ibemu_qp_ex_check(attr))) {
    errno = err;
    return NULL;
  }
  qp = calloc(1, sizeof(*qp));
  if (!qp) {
    errno = ENOMEM;
    return NULL;
  }
  qp->core =
      ibemu_core_create_qp(to_ctx(c)->core, &qp->vqp.qp, attr, xrc_recv ? 0 : to_pd(attr->pd)->id,
                           attr->send_cq ? to_cq(attr->send_cq)->core : NULL,
                           attr->recv_cq ? to_cq(attr->recv_cq)->core : NULL,
                           attr->srq ? ((struct ibemu_srq*)attr->srq)->core : NULL,
                           xrc_recv ? xrcd->id : 0, dc, &qpn, &err);
  if (!qp->core) {
    free(qp);
    errno = err;
    return NULL;
  }
  qp->dc_type = dc ? dc->type : 0;
  if (qp_ex && (err = ibemu_qp_ex_init(qp, attr))) {
    ibemu_core_destroy_qp(qp->core);
    free(qp);
    errno = err;
    return NULL;
  }
  struct ibv_qp* q = &qp->vqp.qp;
  q->context = c;
  q->qp_context = attr->qp_context;
  q->pd = xrc_recv ? NULL : attr->pd;
  hold_pd(q->pd);
  if (xrcd) {
    qp->vqp.xrcd = &xrcd->vxrcd;
    qp->vqp.comp_mask |= VERBS_QP_XRCD;
    atomic_fetch_add(&xrcd->users, 1);
  }
  q->send_cq = attr->send_cq;
  q->recv_cq = attr->recv_cq;
  q->srq = attr->srq;
  q->qp_type = attr->qp_type;
  q->state = IBV_QPS_RESET;
  q->qp_num = qpn;
  q->handle = qpn;
  q->events_completed = 0;
  pthread_mutex_init(&q->mutex, NULL);
  pthread_cond_init(&q->cond, NULL);
  return q;
}

/* ibv_open_qp (the kernel's ib_open_qp): another handle on an XRC receive
 * QP of the domain, found by number; the fields are those ibv_cmd_open_qp
 * sets, and the state is unknown until the handle queries or modifies. */
static struct ibv_qp* ibemu_open_qp(struct ibv_context* c, struct ibv_qp_open_attr* attr) {
  const uint32_t required = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  struct ibemu_xrcd* xrcd;
  struct ibemu_qp* qp;
  int err;
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if ((attr->comp_mask & required) != required || !attr->xrcd ||
      attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return NULL;
  }
  xrcd = (struct ibemu_xrcd*)attr->xrcd;
  qp = calloc(1, sizeof(*qp));
  if (!qp) {
    errno = ENOMEM;
    return NULL;
  }
  qp->core = ibemu_core_open_qp(to_ctx(c)->core, &qp->vqp.qp, xrcd->id, attr->qp_num, &err);
  if (!qp->core) {
    free(qp);
    errno = err;
    return NULL;
  }
  struct ibv_qp* q = &qp->vqp.qp;
  q->context = c;
  q->qp_context = attr->qp_context;
  q->qp_type = IBV_QPT_XRC_RECV;
  q->state = IBV_QPS_UNKNOWN;
  q->qp_num = attr->qp_num;
  q->handle = attr->qp_num;
  q->events_completed = 0;
  pthread_mutex_init(&q->mutex, NULL);
  pthread_cond_init(&q->cond, NULL);
  qp->vqp.xrcd = &xrcd->vxrcd;
  qp->vqp.comp_mask |= VERBS_QP_XRCD;
  atomic_fetch_add(&xrcd->users, 1);
  return q;
}

static struct ibv_qp* ibemu_create_qp(struct ibv_pd* pd, struct ibv_qp_init_attr* attr) {
  struct ibv_qp_init_attr_ex ex;
  struct ibv_qp* qp;
  memset(&ex, 0, sizeof(ex));
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  qp = ibemu_create_qp_with(pd->context, &ex, NULL);
  if (qp) attr->cap = ex.cap;
  return qp;
}

static struct ibv_qp* ibemu_create_qp_ex(struct ibv_context* c, struct ibv_qp_init_attr_ex* attr) {
  return ibemu_create_qp_with(c, attr, NULL);
}

static int ibemu_destroy_qp(struct ibv_qp* ibqp) {
  struct ibemu_qp* qp = to_qp(ibqp);
  int err = ibemu_core_destroy_qp(qp->core);
  if (err) return err;
  release_pd(ibqp->pd);
  release_xrcd((qp->vqp.comp_mask & VERBS_QP_XRCD) ? qp->vqp.xrcd : NULL);
  ibemu_qp_ex_fini(qp);
  free(qp);
  return 0;
}

static int ibemu_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  int err = ibemu_core_modify_qp(to_qp(qp)->core, attr, mask);
  if (!err && (mask & IBV_QP_STATE)) qp->state = attr->qp_state;
  return err;
}

static int ibemu_query_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask,
                          struct ibv_qp_init_attr* init) {
  int err = ibemu_core_query_qp(to_qp(qp)->core, attr, mask, init);
  if (!err && init) {
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
  }
  return err;
}

static int ibemu_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad) {
  return ibemu_core_post_send(to_qp(qp)->core, wr, bad);
}

static int ibemu_post_recv(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad) {
  return ibemu_core_post_recv(to_qp(qp)->core, wr, bad);
}

/* ibv_close_device does not destroy what the program made on the context
 * (the program should have, says libibverbs), and a kernel HCA's objects
 * outlive it: destroying one later fails cleanly. Every ibemu object needs
 * its context, so a context closed while objects remain is freed when the
 * last of them goes. pyverbs' garbage collector closes a context before its
 * objects when they sit in one reference cycle. */
void ibemu_hold_context(struct ibv_context* c) { atomic_fetch_add(&to_ctx(c)->refs, 1); }

void ibemu_release_context(struct ibv_context* c) {
  struct ibemu_context* ctx = to_ctx(c);
  if (atomic_fetch_sub(&ctx->refs, 1) != 1) return;
  ibemu_core_close(ctx->core);
  verbs_uninit_context(&ctx->vctx);
  free(ctx);
}

static void ibemu_free_context(struct ibv_context* c) { ibemu_release_context(c); }

const struct verbs_context_ops ibemu_ctx_ops = {
    .alloc_mw = ibemu_alloc_mw,
    .alloc_pd = ibemu_alloc_pd,
    .attach_mcast = ibemu_attach_mcast,
    .bind_mw = ibemu_bind_mw,
    .cq_event = ibemu_cq_event,
    .create_ah = ibemu_create_ah,
    .create_cq = ibemu_create_cq,
    .create_cq_ex = ibemu_create_cq_ex,
    .create_qp = ibemu_create_qp,
    .create_qp_ex = ibemu_create_qp_ex,
    .close_xrcd = ibemu_close_xrcd,
    .create_srq = ibemu_create_srq,
    .create_srq_ex = ibemu_create_srq_ex,
    .dealloc_mw = ibemu_dealloc_mw,
    .dealloc_pd = ibemu_dealloc_pd,
    .dereg_mr = ibemu_dereg_mr,
    .destroy_ah = ibemu_destroy_ah,
    .destroy_cq = ibemu_destroy_cq,
    .destroy_qp = ibemu_destroy_qp,
    .destroy_srq = ibemu_destroy_srq,
    .detach_mcast = ibemu_detach_mcast,
    .free_context = ibemu_free_context,
    .get_srq_num = ibemu_get_srq_num,
    .modify_qp = ibemu_modify_qp,
    .modify_srq = ibemu_modify_srq,
    .open_qp = ibemu_open_qp,
    .open_xrcd = ibemu_open_xrcd,
    .poll_cq = ibemu_poll_cq,
    .post_recv = ibemu_post_recv,
    .post_send = ibemu_post_send,
    .post_srq_recv = ibemu_post_srq_recv,
    .query_device_ex = ibemu_query_device_ex,
    .query_port = ibemu_query_port,
    .query_qp = ibemu_query_qp,
    .query_srq = ibemu_query_srq,
    .reg_dmabuf_mr = ibemu_reg_dmabuf_mr,
    .reg_mr = ibemu_reg_mr,
    .req_notify_cq = ibemu_req_notify_cq,
    .rereg_mr = ibemu_rereg_mr,
    .resize_cq = ibemu_resize_cq,
};

static struct verbs_context* ibemu_alloc_context(struct ibv_device* ibdev, int cmd_fd,
                                                 void* private_data) {
  struct ibemu_context* ctx;
  int async_fd, err;
  (void)private_data;
  ctx = _verbs_init_and_alloc_context(ibdev, cmd_fd, sizeof(*ctx),
                                      &((struct ibemu_context*)NULL)->vctx, 0 /* unknown id */);
  if (!ctx) return NULL;
  ctx->core = ibemu_core_open(ibdev->name, cmd_fd, &async_fd, &err);
  if (!ctx->core) {
    verbs_uninit_context(&ctx->vctx);
    free(ctx);
    if (ibemu_trace_verbs_on()) ibemu_trace_open_device(ibdev->name, NULL, err);
    errno = err;
    return NULL;
  }
  /* Async events come from the core's pipe, which in kernel mode also
   * carries the kernel's. */
  ctx->vctx.context.async_fd = async_fd;
  ctx->vctx.context.num_comp_vectors = 1;
  /* IBEMU_TRACE=verbs: decided here, once, so untraced verbs pay nothing. */
  if (ibemu_trace_verbs_on()) {
    verbs_set_ops(&ctx->vctx, &ibemu_traced_ctx_ops);
    ibemu_trace_open_device(ibdev->name, &ctx->vctx.context, 0);
  } else {
    verbs_set_ops(&ctx->vctx, &ibemu_ctx_ops);
  }
  atomic_init(&ctx->refs, 1);
  return &ctx->vctx;
}

static const struct verbs_device_ops ibemu_dev_ops = {
    .name = "ibemu",
    .match_min_abi_version = IBEMU_DRIVER_ABI,
    .match_max_abi_version = IBEMU_DRIVER_ABI,
    .match_table = ibemu_match_table,
    .match_device = ibemu_match_device,
    .alloc_context = ibemu_alloc_context,
    .alloc_device = ibemu_alloc_device,
    .uninit_device = ibemu_uninit_device,
};

bool ibemu_owns_device(struct ibv_device* device) {
  return device && IBEMU_CONTAINER_OF(device, struct verbs_device, device)->ops == &ibemu_dev_ops;
}

static __attribute__((constructor)) void ibemu_register_driver(void) {
  int running = ibemu_running_verbs_ops_layout(IBEMU_VERBS_PABI);
  if (running != IBEMU_VERBS_OPS_LAYOUT) {
    /* Registering would hand libibverbs ops in the wrong slots. Its own
     * warnings about drivers look like this one. */
    fprintf(stderr,
            "libibverbs: Warning: " IBEMU_PROVIDER_FILE_NAME
            " was built for the provider ops of rdma-core v%d, but this libibverbs has "
            "those of v%d; rebuild ibemu against it (ibemu's devices stay hidden)\n",
            IBEMU_VERBS_OPS_LAYOUT, running);
    return;
  }
  ibemu_verbs_register_driver(&ibemu_dev_ops);
}
