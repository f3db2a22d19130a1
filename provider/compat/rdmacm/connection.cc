// The IB CM's connection protocol (IBA 12.6–12.9) as rdma_cm drives it:
//   active side   REQ ──▶            ◀── REP   RTU ──▶   ESTABLISHED
//   passive side  ──▶ CONNECT_REQUEST  REP ──▶  ◀── RTU  ESTABLISHED
//   either side   DREQ ──▶  ◀── DREP            DISCONNECTED
// and REJ for a refused or abandoned request. A message that waits for an
// answer (REQ, REP, DREQ) is resent after the CM response timeout, up to
// Max CM Retries times; then the connection attempt fails like the kernel's.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/mad/cm.h"
#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/ip_cm_header.h"

namespace ibemu::rdmacm {

namespace cm = mad::cm;

namespace {

// CM response timeout sent in REQs (IBA 12.7.6: 4.096 µs × 2^n): about a
// second, far above the emulated fabric's latency yet quick to notice a
// vanished peer; with 15 retries an attempt gives up after ~16 s as the
// kernel's rdma_cm does with its own (larger) values.
constexpr uint8_t kCmResponseTimeout = 18;
constexpr uint8_t kMaxCmRetries = 15;
constexpr auto kTimewait = std::chrono::milliseconds(100);
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY

Clock::duration cm_timeout(uint8_t exponent) {
  return std::chrono::microseconds(uint64_t(4096) << exponent) / 1000;
}

uint32_t random_psn() {
  static std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffff;
}

uint64_t new_tid(Library& lib) { return lib.next_tid++; }

uint64_t node_guid(Library& lib, const CmId* id) {
  return be64toh(lib.devices[id->device].attr.node_guid);
}

Endpoint* endpoint_of(Library& lib, CmId* id) { return lib.endpoint(id->endpoint); }

void send_to_peer(Library& lib, CmId* id, const std::vector<uint8_t>& mad) {
  if (Endpoint* ep = endpoint_of(lib, id)) lib.send_mad(*ep, false, id->remote_lid, mad);
}

void stop_resending(CmId* id) {
  id->timer_generation++;
  id->pending_mad.clear();
}

void on_give_up(Library& lib, CmId* id);

void send_rtu(Library& lib, CmId* id) {
  cm::Rtu rtu;
  rtu.set_local_comm_id(id->local_comm_id);
  rtu.set_remote_comm_id(id->remote_comm_id);
  send_to_peer(lib, id, cm::build_mad(cm::Attr::kRtu, id->tid, rtu));
}

/// Sends a MAD that waits for an answer, and resends it until one comes.
void send_awaiting_answer(Library& lib, CmId* id, std::vector<uint8_t> mad) {
  id->pending_mad = std::move(mad);
  id->retries_left = kMaxCmRetries;
  id->retry_interval = cm_timeout(kCmResponseTimeout);
  send_to_peer(lib, id, id->pending_mad);
  uint64_t generation = ++id->timer_generation;
  auto rearm = std::make_shared<std::function<void(CmId*)>>();
  *rearm = [&lib, generation, rearm](CmId* id) {
    if (id->timer_generation != generation || id->pending_mad.empty()) return;
    if (id->retries_left-- <= 0) {
      on_give_up(lib, id);
      return;
    }
    send_to_peer(lib, id, id->pending_mad);
    lib.add_timer(id, id->retry_interval, *rearm);
  };
  lib.add_timer(id, id->retry_interval, *rearm);
}

void post_timewait_exit(Library& lib, CmId* id) {
  uint64_t generation = ++id->timer_generation;
  lib.add_timer(id, kTimewait, [generation](CmId* id) {
    if (id->timer_generation == generation && id->state == IdState::kDisconnected)
      post_event(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
  });
}

void disconnected(Library& lib, CmId* id) {
  stop_resending(id);
  id->state = IdState::kDisconnected;
  post_event(id, RDMA_CM_EVENT_DISCONNECTED, 0);
  post_timewait_exit(lib, id);
}

std::vector<uint8_t> make_rej(CmId* id, cm::MessageKind kind, cm::RejectReason reason,
                              const void* data = nullptr, size_t len = 0) {
  cm::Rej rej;
  rej.set_local_comm_id(id->local_comm_id);
  rej.set_remote_comm_id(id->remote_comm_id);
  rej.set_message_rejected(uint8_t(kind));
  rej.set_reason(uint16_t(reason));
  cm::set_private_data(rej, data, len);
  return cm::build_mad(cm::Attr::kRej, id->tid, rej);
}

std::vector<uint8_t> make_dreq(Library& lib, CmId* id) {
  cm::Dreq dreq;
  dreq.set_local_comm_id(id->local_comm_id);
  dreq.set_remote_comm_id(id->remote_comm_id);
  dreq.set_remote_qpn(id->remote_qpn);
  id->tid = new_tid(lib);
  return cm::build_mad(cm::Attr::kDreq, id->tid, dreq);
}

void send_drep(Library& lib, CmId* id, uint64_t tid) {
  cm::Drep drep;
  drep.set_local_comm_id(id->local_comm_id);
  drep.set_remote_comm_id(id->remote_comm_id);
  send_to_peer(lib, id, cm::build_mad(cm::Attr::kDrep, tid, drep));
}

/// IBA 12.9.7: a REQ or REP never answered is rejected with reason
/// Timeout, and the attempt is over.
void unanswered(Library& lib, CmId* id, cm::MessageKind kind, IdState next) {
  send_to_peer(lib, id, make_rej(id, kind, cm::RejectReason::kTimeout));
  qp_to_error(id);
  id->state = next;
  post_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
}

void on_give_up(Library& lib, CmId* id) {
  id->pending_mad.clear();
  switch (id->state) {
    case IdState::kReqSent:
      unanswered(lib, id, cm::MessageKind::kReq, IdState::kRouteResolved);
      break;
    case IdState::kSidrReqSent:
      id->state = IdState::kRouteResolved;
      post_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      break;
    case IdState::kRepSent:
      unanswered(lib, id, cm::MessageKind::kRep, IdState::kIdle);
      break;
    case IdState::kDreqSent:
      disconnected(lib, id);  // no DREP: the peer is gone, the connection too
      break;
    default:
      break;
  }
}

/// The connection parameters of an event, with its private data.
void fill_conn_event(Event* e, const uint8_t* data, size_t len, uint8_t responder_resources,
                     uint8_t initiator_depth, bool flow_control, uint8_t retry, uint8_t rnr,
                     bool srq, uint32_t qpn) {
  std::memcpy(e->private_data, data, len);
  auto& c = e->pub.param.conn;
  c.private_data_len = uint8_t(len);
  c.responder_resources = responder_resources;
  c.initiator_depth = initiator_depth;
  c.flow_control = flow_control;
  c.retry_count = retry;
  c.rnr_retry_count = rnr;
  c.srq = srq;
  c.qp_num = qpn;
}

/// The id listening for a REQ or SIDR_REQ of `service_id` on this endpoint.
CmId* listener_for(Library& lib, const Endpoint& ep, uint64_t service_id) {
  for (CmId* id : lib.ids) {
    if (id->state != IdState::kListen || id->service_id != service_id) continue;
    const auto& eps = id->listen_endpoints;
    if (std::find(eps.begin(), eps.end(), ep.umad_index) != eps.end()) return id;
  }
  return nullptr;
}

/// An id for an incoming request, on the listener's channel and port.
CmId* new_passive_id(Library& lib, CmId* listener, const Endpoint& ep, const uint8_t* ip_header) {
  CmId* id = create_id(lib, &listener->channel->pub, listener->pub.context, listener->pub.ps,
                       listener->pub.qp_type);
  if (!id) return nullptr;
  id->listener = listener;
  const PortAddress* port = &lib.ports[ep.umad_index];
  attach_port(lib, id, port);
  sockaddr_storage src, dst;
  if (read_ip_cm_header(ip_header, &src, &dst)) {
    std::memcpy(&id->pub.route.addr.dst_storage, &src, sizeof src);
    std::memcpy(&id->pub.route.addr.src_storage, &dst, sizeof dst);
    set_port(&id->pub.route.addr.src_addr, listener->bound_port);
  }
  id->endpoint = ep.umad_index;
  return id;
}

void on_req(Library& lib, Endpoint& ep, const uint8_t* mad) {
  auto req = cm::parse_message<cm::Req>(mad);
  for (CmId* id : lib.ids) {
    if (id->remote_comm_id == req.local_comm_id() && id->remote_ca_guid == req.local_ca_guid() &&
        id->state != IdState::kDestroying) {
      // A resent REQ: our REP may have been lost.
      if (id->state == IdState::kRepSent) send_to_peer(lib, id, id->pending_mad);
      return;
    }
  }
  CmId* listener = listener_for(lib, ep, req.service_id());
  if (!listener) return;
  CmId* id = new_passive_id(lib, listener, ep, cm::private_data(req));
  if (!id) return;
  id->tid = mad::load_be64(mad + 8);
  id->service_id = req.service_id();
  id->remote_comm_id = req.local_comm_id();
  id->remote_ca_guid = req.local_ca_guid();
  id->remote_qpn = req.local_qpn();
  id->remote_psn = req.starting_psn();
  id->remote_lid = req.primary_local_lid();
  const Device& dev = lib.devices[id->device];
  id->responder_resources = std::min(req.initiator_depth(), max_responder_resources(dev));
  id->initiator_depth = std::min(req.responder_resources(), max_initiator_depth(dev));
  id->retry_count = req.retry_count();
  id->rnr_retry_count = req.rnr_retry_count();
  id->ack_timeout = req.primary_local_ack_timeout();
  id->pkey = req.partition_key();
  ibv_sa_path_rec& p = id->path;
  std::memcpy(p.sgid.raw, req.primary_remote_gid(), 16);
  std::memcpy(p.dgid.raw, req.primary_local_gid(), 16);
  p.slid = htons(req.primary_remote_lid());
  p.dlid = htons(req.primary_local_lid());
  p.flow_label = htonl(req.primary_flow_label());
  p.hop_limit = req.primary_hop_limit();
  p.traffic_class = req.primary_traffic_class();
  p.pkey = htons(req.partition_key());
  p.sl = req.primary_sl();
  p.mtu = req.path_mtu();
  p.rate = req.primary_packet_rate();
  p.numb_path = 1;
  p.reversible = 1;
  id->pub.route.path_rec = &id->path;
  id->pub.route.num_paths = 1;
  std::memcpy(&id->pub.route.addr.addr.ibaddr.dgid, req.primary_local_gid(), 16);
  id->state = IdState::kConnectRequestReceived;
  Event* e = post_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
  fill_conn_event(e, cm::private_data(req) + kIpCmHeaderSize,
                  cm::Req::kPrivateDataSize - kIpCmHeaderSize, req.initiator_depth(),
                  req.responder_resources(), req.end_to_end_flow_control(), req.retry_count(),
                  req.rnr_retry_count(), req.srq(), req.local_qpn());
}

void on_rep(Library& lib, CmId* id, const uint8_t* mad) {
  auto rep = cm::parse_message<cm::Rep>(mad);
  if (id->state == IdState::kEstablished) {
    // Our RTU was lost: the REP came again.
    send_rtu(lib, id);
    return;
  }
  if (id->state != IdState::kReqSent) return;
  stop_resending(id);
  id->remote_comm_id = rep.local_comm_id();
  id->remote_ca_guid = rep.local_ca_guid();
  id->remote_qpn = rep.local_qpn();
  id->remote_psn = rep.starting_psn();
  id->responder_resources = std::min(id->responder_resources, rep.initiator_depth());
  id->initiator_depth = std::min(id->initiator_depth, rep.responder_resources());
  id->rnr_retry_count = rep.rnr_retry_count();
  auto event_type = RDMA_CM_EVENT_CONNECT_RESPONSE;
  if (id->pub.qp) {
    if (qp_to_rtr(id) || qp_to_rts(id)) {
      send_to_peer(lib, id, make_rej(id, cm::MessageKind::kRep, cm::RejectReason::kNoQp));
      id->state = IdState::kRouteResolved;
      post_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -errno);
      return;
    }
    send_rtu(lib, id);
    id->state = IdState::kEstablished;
    event_type = RDMA_CM_EVENT_ESTABLISHED;
  } else {
    id->state = IdState::kRepReceived;
  }
  Event* e = post_event(id, event_type, 0);
  fill_conn_event(e, cm::private_data(rep), cm::Rep::kPrivateDataSize, rep.responder_resources(),
                  rep.initiator_depth(), rep.end_to_end_flow_control(), id->retry_count,
                  rep.rnr_retry_count(), rep.srq(), rep.local_qpn());
}

void on_rej(Library& lib, CmId* id, const uint8_t* mad) {
  auto rej = cm::parse_message<cm::Rej>(mad);
  (void)lib;
  switch (id->state) {
    case IdState::kReqSent:
    case IdState::kRepSent:
    case IdState::kRepReceived:
    case IdState::kEstablished:
      break;
    default:
      return;
  }
  stop_resending(id);
  qp_to_error(id);
  id->state = id->listener ? IdState::kIdle : IdState::kRouteResolved;
  Event* e = post_event(id, RDMA_CM_EVENT_REJECTED, rej.reason());
  std::memcpy(e->private_data, cm::private_data(rej), cm::Rej::kPrivateDataSize);
  e->pub.param.conn.private_data_len = uint8_t(cm::Rej::kPrivateDataSize);
}

void on_sidr_req(Library& lib, Endpoint& ep, uint16_t slid, const uint8_t* mad) {
  auto req = cm::parse_message<cm::SidrReq>(mad);
  for (CmId* id : lib.ids)
    if (id->listener && id->remote_comm_id == req.request_id() && id->remote_lid == slid &&
        id->pub.qp_type == IBV_QPT_UD && id->state != IdState::kDestroying)
      return;  // a resent SIDR_REQ still waiting for the program
  CmId* listener = listener_for(lib, ep, req.service_id());
  if (!listener) return;
  CmId* id = new_passive_id(lib, listener, ep, cm::private_data(req));
  if (!id) return;
  id->tid = mad::load_be64(mad + 8);
  id->service_id = req.service_id();
  id->remote_comm_id = req.request_id();
  id->remote_lid = slid;
  id->pkey = req.partition_key();
  id->state = IdState::kConnectRequestReceived;
  Event* e = post_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
  size_t len = cm::SidrReq::kPrivateDataSize - kIpCmHeaderSize;
  std::memcpy(e->private_data, cm::private_data(req) + kIpCmHeaderSize, len);
  e->pub.param.ud.private_data_len = uint8_t(len);
}

void on_sidr_rep(Library& lib, CmId* id, const uint8_t* mad) {
  auto rep = cm::parse_message<cm::SidrRep>(mad);
  if (id->state != IdState::kSidrReqSent) return;
  stop_resending(id);
  if (rep.status() != uint8_t(cm::SidrStatus::kValid)) {
    id->state = IdState::kRouteResolved;
    post_event(id, RDMA_CM_EVENT_UNREACHABLE, rep.status());
    return;
  }
  id->remote_qpn = rep.qpn();
  id->remote_qkey = rep.qkey();
  id->state = IdState::kUdReady;
  Event* e = post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
  std::memcpy(e->private_data, cm::private_data(rep), cm::SidrRep::kPrivateDataSize);
  auto& ud = e->pub.param.ud;
  ud.private_data_len = uint8_t(cm::SidrRep::kPrivateDataSize);
  ud.qp_num = rep.qpn();
  ud.qkey = rep.qkey();
  ud.ah_attr.dlid = ntohs(id->path.dlid);
  ud.ah_attr.sl = id->path.sl;
  ud.ah_attr.port_num = id->pub.port_num;
  ud.ah_attr.static_rate = id->path.rate;
  (void)lib;
}

}  // namespace

void on_cm_mad(Library& lib, Endpoint& ep, uint16_t slid, const uint8_t* mad, size_t len) {
  if (len < mad::kMadSize || mad[1] != uint8_t(mad::MgmtClass::kCommMgt) ||
      mad[3] != uint8_t(mad::Method::kSend))
    return;
  cm::Attr attr = cm::attr_of(mad);
  if (attr == cm::Attr::kReq) return on_req(lib, ep, mad);
  if (attr == cm::Attr::kSidrReq) return on_sidr_req(lib, ep, slid, mad);
  // Every other message names the receiver's communication ID (SIDR_REP: the
  // RequestID it answers).
  const uint32_t receiver =
      attr == cm::Attr::kSidrRep ? mad::load_be32(mad + 24) : mad::load_be32(mad + 28);
  CmId* id = lib.id_by_comm_id(receiver);
  if (!id) {
    if (attr == cm::Attr::kDreq) {
      // IBA 12.9.6: a DREQ for a connection no longer here still gets a DREP.
      cm::Drep drep;
      drep.set_local_comm_id(receiver);
      drep.set_remote_comm_id(mad::load_be32(mad + 24));
      lib.send_mad(ep, false, slid, cm::build_mad(cm::Attr::kDrep, mad::load_be64(mad + 8), drep));
    }
    return;
  }
  switch (attr) {
    case cm::Attr::kRep:
      on_rep(lib, id, mad);
      break;
    case cm::Attr::kRtu:
      if (id->state == IdState::kRepSent) {
        stop_resending(id);
        id->state = IdState::kEstablished;
        post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
      }
      break;
    case cm::Attr::kRej:
      on_rej(lib, id, mad);
      break;
    case cm::Attr::kMra:
      // The peer needs longer: wait its service timeout before resending.
      if (!id->pending_mad.empty()) {
        auto mra = cm::parse_message<cm::Mra>(mad);
        id->retry_interval = cm_timeout(kCmResponseTimeout) + cm_timeout(mra.service_timeout());
      }
      break;
    case cm::Attr::kDreq:
      if (id->state == IdState::kEstablished || id->state == IdState::kRepSent ||
          id->state == IdState::kDreqSent) {
        send_drep(lib, id, mad::load_be64(mad + 8));
        disconnected(lib, id);
      } else if (id->state == IdState::kDisconnected) {
        send_drep(lib, id, mad::load_be64(mad + 8));
      }
      break;
    case cm::Attr::kDrep:
      if (id->state == IdState::kDreqSent) disconnected(lib, id);
      break;
    case cm::Attr::kSidrRep:
      on_sidr_rep(lib, id, mad);
      break;
    default:
      break;
  }
}

void end_connection(Library& lib, CmId* id) {
  switch (id->state) {
    case IdState::kEstablished:
    case IdState::kRepSent:
    case IdState::kRepReceived:
      send_to_peer(lib, id, make_dreq(lib, id));
      break;
    case IdState::kConnectRequestReceived:
      if (id->pub.qp_type == IBV_QPT_UD) {
        cm::SidrRep rep;
        rep.set_request_id(id->remote_comm_id);
        rep.set_status(uint8_t(cm::SidrStatus::kRejected));
        rep.set_service_id(id->service_id);
        send_to_peer(lib, id, cm::build_mad(cm::Attr::kSidrRep, id->tid, rep));
      } else {
        send_to_peer(lib, id, make_rej(id, cm::MessageKind::kReq, cm::RejectReason::kTimeout));
      }
      break;
    case IdState::kReqSent:
      send_to_peer(lib, id, make_rej(id, cm::MessageKind::kReq, cm::RejectReason::kTimeout));
      break;
    default:
      break;
  }
  stop_resending(id);
}

void destroy_unclaimed(Library& lib, CmId* id) {
  end_connection(lib, id);
  id->state = IdState::kDestroying;
  lib.remove_id(id);
  delete id;
}

/// REQ or SIDR_REQ of the active side. Caller holds the mutex.
static int connect_locked(Library& lib, CmId* id, const rdma_conn_param* param) {
  if (id->state != IdState::kRouteResolved) return EINVAL;
  Endpoint* ep = endpoint_of(lib, id);
  if (!ep) return errno;
  const bool ud = id->pub.qp_type == IBV_QPT_UD;
  const size_t user_len = param ? param->private_data_len : 0;
  const size_t room =
      (ud ? cm::SidrReq::kPrivateDataSize : cm::Req::kPrivateDataSize) - kIpCmHeaderSize;
  if (user_len > room) return EINVAL;
  uint8_t data[cm::SidrReq::kPrivateDataSize] = {};
  write_ip_cm_header(data, &id->pub.route.addr.src_addr, &id->pub.route.addr.dst_addr);
  if (user_len) std::memcpy(data + kIpCmHeaderSize, param->private_data, user_len);

  id->remote_lid = ntohs(id->path.dlid);
  id->local_comm_id = lib.new_comm_id(*ep);
  id->service_id = mad::cm::ip_service_id(id->pub.ps, port_of(&id->pub.route.addr.dst_addr));
  id->tid = new_tid(lib);
  if (ud) {
    cm::SidrReq req;
    req.set_request_id(id->local_comm_id);
    req.set_partition_key(id->pkey);
    req.set_service_id(id->service_id);
    cm::set_private_data(req, data, kIpCmHeaderSize + user_len);
    id->state = IdState::kSidrReqSent;
    send_awaiting_answer(lib, id, cm::build_mad(cm::Attr::kSidrReq, id->tid, req));
    return 0;
  }

  const Device& dev = lib.devices[id->device];
  uint8_t resources = param ? param->responder_resources : 0;
  uint8_t depth = param ? param->initiator_depth : 0;
  if (resources == RDMA_MAX_RESP_RES) resources = max_responder_resources(dev);
  if (depth == RDMA_MAX_INIT_DEPTH) depth = max_initiator_depth(dev);
  if (resources > max_responder_resources(dev) || depth > max_initiator_depth(dev)) return EINVAL;
  id->responder_resources = resources;
  id->initiator_depth = depth;
  id->retry_count = param ? std::min<uint8_t>(param->retry_count, 7) : 7;
  id->rnr_retry_count = param ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7;
  id->local_psn = random_psn();
  id->qp_num_param = id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0);

  const ibv_sa_path_rec& p = id->path;
  cm::Req req;
  req.set_local_comm_id(id->local_comm_id);
  req.set_service_id(id->service_id);
  req.set_local_ca_guid(node_guid(lib, id));
  req.set_local_qpn(id->qp_num_param);
  req.set_responder_resources(resources);
  req.set_initiator_depth(depth);
  req.set_remote_cm_response_timeout(kCmResponseTimeout);
  req.set_transport_service_type(id->pub.qp_type == IBV_QPT_UC ? 1 : 0);
  req.set_end_to_end_flow_control(param && param->flow_control);
  req.set_starting_psn(id->local_psn);
  req.set_local_cm_response_timeout(kCmResponseTimeout);
  req.set_retry_count(id->retry_count);
  req.set_partition_key(id->pkey);
  req.set_path_mtu(p.mtu);
  req.set_rnr_retry_count(id->rnr_retry_count);
  req.set_max_cm_retries(kMaxCmRetries);
  req.set_srq(id->pub.qp ? id->pub.qp->srq != nullptr : (param && param->srq));
  req.set_primary_local_lid(ntohs(p.slid));
  req.set_primary_remote_lid(ntohs(p.dlid));
  std::memcpy(req.primary_local_gid(), p.sgid.raw, 16);
  std::memcpy(req.primary_remote_gid(), p.dgid.raw, 16);
  req.set_primary_flow_label(ntohl(p.flow_label));
  req.set_primary_packet_rate(p.rate);
  req.set_primary_traffic_class(p.traffic_class);
  req.set_primary_hop_limit(p.hop_limit);
  req.set_primary_sl(p.sl);
  req.set_primary_subnet_local(true);
  req.set_primary_local_ack_timeout(id->ack_timeout);
  cm::set_private_data(req, data, kIpCmHeaderSize + user_len);
  id->state = IdState::kReqSent;
  send_awaiting_answer(lib, id, cm::build_mad(cm::Attr::kReq, id->tid, req));
  return 0;
}

/// REP or SIDR_REP of the passive side. Caller holds the mutex.
static int accept_locked(Library& lib, CmId* id, const rdma_conn_param* param) {
  if (id->state != IdState::kConnectRequestReceived) return EINVAL;
  const size_t len = param ? param->private_data_len : 0;
  if (id->pub.qp_type == IBV_QPT_UD) {
    if (len > cm::SidrRep::kPrivateDataSize) return EINVAL;
    cm::SidrRep rep;
    rep.set_request_id(id->remote_comm_id);
    rep.set_status(uint8_t(cm::SidrStatus::kValid));
    rep.set_qpn(id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0));
    rep.set_service_id(id->service_id);
    rep.set_qkey(kUdpQkey);
    if (len) cm::set_private_data(rep, param->private_data, len);
    send_to_peer(lib, id, cm::build_mad(cm::Attr::kSidrRep, id->tid, rep));
    id->state = IdState::kUdReady;
    return 0;
  }
  if (len > cm::Rep::kPrivateDataSize) return EINVAL;
  Endpoint* ep = endpoint_of(lib, id);
  if (!ep) return errno;
  if (param) {
    id->responder_resources = std::min(id->responder_resources, param->responder_resources);
    id->initiator_depth = std::min(id->initiator_depth, param->initiator_depth);
  }
  id->local_comm_id = lib.new_comm_id(*ep);
  id->local_psn = random_psn();
  if (id->pub.qp && (qp_to_rtr(id) || qp_to_rts(id))) return errno;
  cm::Rep rep;
  rep.set_local_comm_id(id->local_comm_id);
  rep.set_remote_comm_id(id->remote_comm_id);
  rep.set_local_qpn(id->pub.qp ? id->pub.qp->qp_num : (param ? param->qp_num : 0));
  rep.set_starting_psn(id->local_psn);
  rep.set_responder_resources(id->responder_resources);
  rep.set_initiator_depth(id->initiator_depth);
  rep.set_target_ack_delay(15);
  rep.set_end_to_end_flow_control(param && param->flow_control);
  rep.set_rnr_retry_count(param ? std::min<uint8_t>(param->rnr_retry_count, 7) : 7);
  rep.set_srq(id->pub.qp ? id->pub.qp->srq != nullptr : (param && param->srq));
  rep.set_local_ca_guid(node_guid(lib, id));
  if (len) cm::set_private_data(rep, param->private_data, len);
  id->state = IdState::kRepSent;
  send_awaiting_answer(lib, id, cm::build_mad(cm::Attr::kRep, id->tid, rep));
  return 0;
}

}  // namespace ibemu::rdmacm

using namespace ibemu;
using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    if (int err = connect_locked(*lib, id, param)) return fail(err);
  }
  if (!id->sync) return 0;
  return wait_sync_event(id, id->pub.qp || id->pub.qp_type == IBV_QPT_UD
                                 ? RDMA_CM_EVENT_ESTABLISHED
                                 : RDMA_CM_EVENT_CONNECT_RESPONSE);
}

IBEMU_EXPORT int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    if (int err = accept_locked(*lib, id, param)) return fail(err);
  }
  if (!id->sync || id->pub.qp_type == IBV_QPT_UD) return 0;
  return wait_sync_event(id, RDMA_CM_EVENT_ESTABLISHED);
}

IBEMU_EXPORT int rdma_reject(rdma_cm_id* pub, const void* private_data, uint8_t len) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  if (id->state != IdState::kConnectRequestReceived) return fail(EINVAL);
  if (id->pub.qp_type == IBV_QPT_UD) {
    if (len > cm::SidrRep::kPrivateDataSize) return fail(EINVAL);
    cm::SidrRep rep;
    rep.set_request_id(id->remote_comm_id);
    rep.set_status(uint8_t(cm::SidrStatus::kRejected));
    rep.set_service_id(id->service_id);
    cm::set_private_data(rep, private_data, len);
    send_to_peer(*lib, id, cm::build_mad(cm::Attr::kSidrRep, id->tid, rep));
  } else {
    if (len > cm::Rej::kPrivateDataSize) return fail(EINVAL);
    send_to_peer(
        *lib, id,
        make_rej(id, cm::MessageKind::kReq, cm::RejectReason::kConsumerReject, private_data, len));
  }
  id->state = IdState::kIdle;
  return 0;
}

IBEMU_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, uint8_t len) {
  return rdma_reject(id, private_data, len);
}

IBEMU_EXPORT int rdma_disconnect(rdma_cm_id* pub) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  switch (id->state) {
    case IdState::kEstablished:
    case IdState::kRepSent:
    case IdState::kRepReceived:
      qp_to_error(id);
      id->state = IdState::kDreqSent;
      send_awaiting_answer(*lib, id, make_dreq(*lib, id));
      return 0;
    case IdState::kDreqSent:
    case IdState::kDisconnected:
      qp_to_error(id);
      return 0;
    case IdState::kUdReady:
      return 0;
    default:
      return fail(EINVAL);
  }
}

IBEMU_EXPORT int rdma_establish(rdma_cm_id* pub) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  if (id->state != IdState::kRepReceived) return fail(EINVAL);
  send_rtu(*lib, id);
  id->state = IdState::kEstablished;
  return 0;
}

IBEMU_EXPORT int rdma_notify(rdma_cm_id* pub, ibv_event_type event) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  // IBA 12.9.6: data arriving before the RTU establishes the connection.
  if (event == IBV_EVENT_COMM_EST && id->state == IdState::kRepSent) {
    stop_resending(id);
    id->state = IdState::kEstablished;
    post_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
  }
  return 0;
}

// Enhanced Connection Establishment is a vendor extension of ConnectX
// devices; an emulated HCA offers no options, as a device without ECE.
IBEMU_EXPORT int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (!id || !ece) return fail(EINVAL);
  return fail(EOPNOTSUPP);
}

IBEMU_EXPORT int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  if (!id || !ece) return fail(EINVAL);
  std::memset(ece, 0, sizeof *ece);
  return 0;
}

}  // extern "C"
