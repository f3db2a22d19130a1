// QPs and SRQs made through rdma_cm, and the QP state changes the CM makes
// for them: INIT when created, RTR and RTS as the connection is agreed, ERR
// when it ends. A UD QP is ready to send as soon as it is created.
#include <arpa/inet.h>

#include <cstring>

#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"

namespace ibemu::rdmacm {

namespace {

constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY

int pkey_index(CmId* id) {
  uint16_t want = htons(id->pkey);
  for (int i = 0; i < 128; ++i) {
    __be16 pkey;
    if (ibv_query_pkey(id->pub.verbs, id->pub.port_num, i, &pkey) != 0) break;
    if ((pkey & htons(0x7fff)) == (want & htons(0x7fff))) return i;
  }
  return 0;
}

/// The attributes a QP needs for `state` on this connection (what
/// rdma_init_qp_attr reports). 0 or an errno.
int qp_attributes(CmId* id, ibv_qp_attr* attr, int* mask) {
  const ibv_qp_state state = attr->qp_state;
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = state;
  const bool ud = id->pub.qp_type == IBV_QPT_UD;
  const bool rc = id->pub.qp_type == IBV_QPT_RC;
  switch (state) {
    case IBV_QPS_INIT:
      attr->pkey_index = uint16_t(pkey_index(id));
      attr->port_num = id->pub.port_num;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        attr->qkey = kUdpQkey;
        *mask |= IBV_QP_QKEY;
      } else {
        attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      attr->path_mtu = ibv_mtu(id->path.mtu);
      attr->dest_qp_num = id->remote_qpn;
      attr->rq_psn = id->remote_psn;
      attr->ah_attr.dlid = ntohs(id->path.dlid);
      attr->ah_attr.sl = id->path.sl;
      attr->ah_attr.port_num = id->pub.port_num;
      attr->ah_attr.static_rate = 0;
      if (id->path.hop_limit > 1) {
        attr->ah_attr.is_global = 1;
        attr->ah_attr.grh.dgid = id->path.dgid;
        attr->ah_attr.grh.hop_limit = id->path.hop_limit;
        attr->ah_attr.grh.traffic_class = id->path.traffic_class;
        attr->ah_attr.grh.flow_label = ntohl(id->path.flow_label);
      }
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (rc) {
        attr->max_dest_rd_atomic = id->responder_resources;
        // The kernel's CM asks for the smallest RNR NAK timer code, 0.
        attr->min_rnr_timer = 0;
        attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (id->responder_resources)
          attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTS:
      attr->sq_psn = ud ? 0 : id->local_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (rc) {
        attr->timeout = id->ack_timeout;
        attr->retry_cnt = id->retry_count;
        attr->rnr_retry = id->rnr_retry_count;
        attr->max_rd_atomic = id->initiator_depth;
        *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      return 0;
    default:
      return EINVAL;
  }
}

int move_qp(CmId* id, ibv_qp* qp, ibv_qp_state state) {
  ibv_qp_attr attr{};
  int mask = 0;
  attr.qp_state = state;
  if (int err = qp_attributes(id, &attr, &mask)) return fail(err);
  int err = ibv_modify_qp(qp, &attr, mask);
  return err ? fail(err) : 0;
}

Device& device_of(Library& lib, CmId* id) { return lib.devices[id->device]; }

/// The CQs rdma_cm makes for a QP created without its own, each with a
/// completion channel as rdma_get_send_comp / rdma_get_recv_comp expect.
int make_cqs(CmId* id, ibv_qp_init_attr_ex* attr) {
  auto make = [&](ibv_comp_channel** channel, ibv_cq** cq, uint32_t size) {
    *channel = ibv_create_comp_channel(id->pub.verbs);
    if (!*channel) return errno;
    *cq = ibv_create_cq(id->pub.verbs, int(size ? size : 1), id, *channel, 0);
    return *cq ? 0 : errno;
  };
  if (!attr->recv_cq) {
    if (int err = make(&id->pub.recv_cq_channel, &id->pub.recv_cq, attr->cap.max_recv_wr))
      return err;
    attr->recv_cq = id->pub.recv_cq;
  }
  if (!attr->send_cq) {
    if (int err = make(&id->pub.send_cq_channel, &id->pub.send_cq, attr->cap.max_send_wr))
      return err;
    attr->send_cq = id->pub.send_cq;
  }
  return 0;
}

void destroy_cqs(CmId* id) {
  if (id->pub.send_cq) ibv_destroy_cq(id->pub.send_cq);
  if (id->pub.send_cq_channel) ibv_destroy_comp_channel(id->pub.send_cq_channel);
  if (id->pub.recv_cq) ibv_destroy_cq(id->pub.recv_cq);
  if (id->pub.recv_cq_channel) ibv_destroy_comp_channel(id->pub.recv_cq_channel);
  id->pub.send_cq = id->pub.recv_cq = nullptr;
  id->pub.send_cq_channel = id->pub.recv_cq_channel = nullptr;
}

}  // namespace

uint8_t max_responder_resources(const Device& d) {
  return uint8_t(std::min(d.attr.max_qp_rd_atom, 255));
}
uint8_t max_initiator_depth(const Device& d) {
  return uint8_t(std::min(d.attr.max_qp_init_rd_atom, 255));
}

int qp_to_init(CmId* id, ibv_qp* qp) {
  if (move_qp(id, qp, IBV_QPS_INIT)) return -1;
  if (id->pub.qp_type != IBV_QPT_UD) return 0;
  if (move_qp(id, qp, IBV_QPS_RTR)) return -1;
  return move_qp(id, qp, IBV_QPS_RTS);
}
int qp_to_rtr(CmId* id) { return move_qp(id, id->pub.qp, IBV_QPS_RTR); }
int qp_to_rts(CmId* id) { return move_qp(id, id->pub.qp, IBV_QPS_RTS); }
int qp_to_error(CmId* id) {
  if (!id->pub.qp) return 0;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return ibv_modify_qp(id->pub.qp, &attr, IBV_QP_STATE);
}

int create_qp_locked(Library& lib, CmId* id, ibv_qp_init_attr_ex* attr) {
  if (!id->pub.verbs || id->device < 0) return EINVAL;
  if (!attr->pd) {
    attr->pd = id->pub.pd ? id->pub.pd : device_of(lib, id).shared_pd();
    if (!attr->pd) return ENOMEM;
  }
  if (attr->pd->context != id->pub.verbs) return EINVAL;
  // Programs of rdma_create_ep often leave the type to the id's.
  if (!attr->qp_type) attr->qp_type = id->pub.qp_type;
  attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  if (id->pub.srq && !attr->srq) attr->srq = id->pub.srq;
  if (int err = make_cqs(id, attr)) {
    destroy_cqs(id);
    return err;
  }
  ibv_qp* qp = ibv_create_qp_ex(id->pub.verbs, attr);
  if (!qp) {
    int err = errno;
    destroy_cqs(id);
    return err;
  }
  id->pub.qp_type = attr->qp_type;
  if (qp_to_init(id, qp)) {
    int err = errno;
    ibv_destroy_qp(qp);
    destroy_cqs(id);
    return err;
  }
  id->pub.qp = qp;
  id->pub.pd = attr->pd;
  return 0;
}

}  // namespace ibemu::rdmacm

using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* attr) {
  if (!pub || !attr) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  int err = create_qp_locked(*lib, from_pub(pub), attr);
  return err ? fail(err) : 0;
}

IBEMU_EXPORT int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* init) {
  if (!pub || !init) return fail(EINVAL);
  ibv_qp_init_attr_ex attr{};
  std::memcpy(&attr, init, sizeof *init);
  attr.pd = pd;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  if (rdma_create_qp_ex(pub, &attr) != 0) return -1;
  init->send_cq = attr.send_cq;
  init->recv_cq = attr.recv_cq;
  init->srq = attr.srq;
  init->cap = attr.cap;
  return 0;
}

IBEMU_EXPORT void rdma_destroy_qp(rdma_cm_id* pub) {
  if (!pub || !pub->qp) return;
  ibv_destroy_qp(pub->qp);
  pub->qp = nullptr;
  destroy_cqs(from_pub(pub));
}

IBEMU_EXPORT int rdma_create_srq_ex(rdma_cm_id* pub, ibv_srq_init_attr_ex* attr) {
  if (!pub || !attr || !pub->verbs) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
    std::lock_guard<std::mutex> lock(lib->mu);
    attr->pd = pub->pd ? pub->pd : device_of(*lib, id).shared_pd();
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  ibv_srq* srq = ibv_create_srq_ex(pub->verbs, attr);
  if (!srq) return -1;
  pub->srq = srq;
  pub->pd = attr->pd;
  return 0;
}

IBEMU_EXPORT int rdma_create_srq(rdma_cm_id* pub, ibv_pd* pd, ibv_srq_init_attr* init) {
  if (!init) return fail(EINVAL);
  ibv_srq_init_attr_ex attr{};
  attr.srq_context = init->srq_context;
  attr.attr = init->attr;
  attr.srq_type = IBV_SRQT_BASIC;
  if (pd) {
    attr.pd = pd;
    attr.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
  } else {
    attr.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
  }
  if (rdma_create_srq_ex(pub, &attr) != 0) return -1;
  init->attr = attr.attr;
  return 0;
}

IBEMU_EXPORT void rdma_destroy_srq(rdma_cm_id* pub) {
  if (!pub || !pub->srq) return;
  ibv_destroy_srq(pub->srq);
  pub->srq = nullptr;
}

IBEMU_EXPORT int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* attr, int* mask) {
  if (!pub || !attr || !mask) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  int err = qp_attributes(from_pub(pub), attr, mask);
  return err ? fail(err) : 0;
}

}  // extern "C"
