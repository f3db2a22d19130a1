#include "emulator-daemon/mad_router.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/mad/cm.h"
#include "common/mad/mad.h"
#include "emulator-daemon/mad_packet.h"

namespace ibemu {

namespace {
constexpr uint32_t kQp1Qkey = 0x80010000;   // IBA 13.5.1: the GSI's well-known Q_Key
constexpr uint32_t kMaxAgentsPerFile = 32;  // ib_umad's IB_UMAD_MAX_AGENTS
constexpr uint8_t kMaxClassVersion = 8;     // ib_mad's MAX_MGMT_VERSION

// What the MAD layer treats as a response (ib_response_mad): the R bit, and
// TrapRepress, which answers a Trap.
bool is_response(const uint8_t* m) {
  return (m[3] & mad::kMethodResponseBit) || m[3] == uint8_t(mad::Method::kTrapRepress);
}

bool method_bit(const std::array<uint64_t, 2>& mask, uint8_t method) {
  return method < 128 && (mask[method / 64] >> (method % 64)) & 1;
}

ib_user_mad_hdr header_of(const uint8_t* msg) {
  ib_user_mad_hdr h;
  std::memcpy(&h, msg, sizeof h);
  return h;
}
}  // namespace

MadRouter::MadRouter(Subnet& subnet, Deliver deliver)
    : subnet_(subnet), deliver_(std::move(deliver)) {}

void MadRouter::set_local_agent(uint8_t mgmt_class, LocalAgent agent) {
  local_agents_[mgmt_class] = std::move(agent);
}

int MadRouter::register_agent(UmadClientId client, PortRef port, const AgentRegistration& reg,
                              uint32_t* id) {
  if (reg.qpn > 1 || reg.class_version >= kMaxClassVersion) return EINVAL;
  // A class of 0 registers an agent that only sends (and gets responses).
  if (reg.mgmt_class != 0 && mad::is_smp_class(reg.mgmt_class) != (reg.qpn == 0)) return EINVAL;
  const bool serves = reg.method_mask[0] || reg.method_mask[1];
  if (serves && reg.mgmt_class == 0) return EINVAL;
  for (const Agent& a : agents_) {
    // One server per port, class, version and method (ib_mad's method_in_use).
    if (!serves || !(a.port == port) || a.reg.qpn != reg.qpn ||
        a.reg.mgmt_class != reg.mgmt_class || a.reg.class_version != reg.class_version)
      continue;
    if ((a.reg.method_mask[0] & reg.method_mask[0]) || (a.reg.method_mask[1] & reg.method_mask[1]))
      return EINVAL;
  }
  uint32_t used = 0;
  for (const Agent& a : agents_)
    if (a.client == client) used |= 1u << a.id;
  uint32_t free_id = 0;
  while (free_id < kMaxAgentsPerFile && (used >> free_id) & 1) ++free_id;
  if (free_id == kMaxAgentsPerFile) return ENOMEM;
  agents_.push_back(Agent{client, free_id, port, reg, next_hi_tid_++});
  *id = free_id;
  return 0;
}

int MadRouter::unregister_agent(UmadClientId client, uint32_t id) {
  auto it = std::find_if(agents_.begin(), agents_.end(),
                         [&](const Agent& a) { return a.client == client && a.id == id; });
  if (it == agents_.end()) return EINVAL;
  const uint32_t hi = it->hi_tid;
  std::erase_if(outstanding_, [&](const Outstanding& o) { return o.hi_tid == hi; });
  agents_.erase(it);
  return 0;
}

int MadRouter::register_cm_endpoint(UmadClientId client, PortRef port, uint32_t* id,
                                    uint32_t* comm_id_base) {
  for (const Agent& a : agents_)
    if (a.client == client && a.cm_tag) return EINVAL;
  uint16_t tag = 0;
  for (int tries = 0; tries < 0xffff && !tag; ++tries) {
    const uint16_t candidate = next_cm_tag_;
    next_cm_tag_ = candidate == 0xffff ? 1 : uint16_t(candidate + 1);
    if (std::none_of(agents_.begin(), agents_.end(),
                     [&](const Agent& a) { return a.cm_tag == candidate; }))
      tag = candidate;
  }
  if (!tag) return ENOSPC;
  AgentRegistration reg;
  reg.qpn = 1;
  reg.mgmt_class = uint8_t(mad::MgmtClass::kCommMgt);
  reg.class_version = mad::cm::kClassVersion;
  if (int err = register_agent(client, port, reg, id)) return err;
  agents_.back().cm_tag = tag;
  *comm_id_base = uint32_t(tag) << 16;
  return 0;
}

const MadRouter::Agent* MadRouter::cm_endpoint(PortRef port, UmadClientId client) const {
  for (const Agent& a : agents_)
    if (a.cm_tag && a.client == client && a.port == port) return &a;
  return nullptr;
}

int MadRouter::cm_listen(UmadClientId client, uint64_t service_id, uint64_t mask, bool listen) {
  auto endpoint = std::find_if(agents_.begin(), agents_.end(),
                               [&](const Agent& a) { return a.client == client && a.cm_tag; });
  if (endpoint == agents_.end()) return EINVAL;
  const PortRef port = endpoint->port;
  if (!listen) {
    const size_t gone = std::erase_if(cm_listens_, [&](const CmListen& l) {
      return l.client == client && l.service_id == service_id && l.mask == mask;
    });
    return gone ? 0 : EINVAL;
  }
  for (const CmListen& l : cm_listens_)
    if (l.port == port && ((l.service_id ^ service_id) & l.mask & mask) == 0) return EADDRINUSE;
  cm_listens_.push_back({client, port, service_id, mask});
  return 0;
}

bool MadRouter::cm_listening(uint64_t service_id) const {
  return std::any_of(cm_listens_.begin(), cm_listens_.end(), [&](const CmListen& l) {
    return ((l.service_id ^ service_id) & l.mask) == 0;
  });
}

void MadRouter::drop_client(UmadClientId client) {
  std::erase_if(cm_listens_, [&](const CmListen& l) { return l.client == client; });
  for (const Agent& a : agents_)
    if (a.client == client)
      std::erase_if(outstanding_, [&](const Outstanding& o) { return o.hi_tid == a.hi_tid; });
  std::erase_if(agents_, [&](const Agent& a) { return a.client == client; });
}

MadRouter::Agent* MadRouter::find_agent(UmadClientId client, uint32_t id) {
  for (Agent& a : agents_)
    if (a.client == client && a.id == id) return &a;
  return nullptr;
}

MadRouter::Agent* MadRouter::agent_by_hi_tid(uint32_t hi_tid) {
  for (Agent& a : agents_)
    if (a.hi_tid == hi_tid) return &a;
  return nullptr;
}

const MadRouter::Agent* MadRouter::server_for(PortRef port, uint8_t mgmt_class, uint8_t version,
                                              uint8_t method) const {
  for (const Agent& a : agents_)
    if (a.port == port && a.reg.mgmt_class == mgmt_class && a.reg.class_version == version &&
        method_bit(a.reg.method_mask, method))
      return &a;
  return nullptr;
}

void MadRouter::send(UmadClientId client, const uint8_t* msg, size_t len, Clock::time_point now) {
  const size_t mad_len = len - std::min(len, kUmadHeaderSize);
  const Agent* sender = len >= kUmadHeaderSize ? find_agent(client, header_of(msg).id) : nullptr;
  if (!sender || mad_len < mad::kMadHeaderSize || mad_len > kMaxUmadMad) {
    ++counters_.malformed;
    return;
  }
  ++counters_.sent;
  const ib_user_mad_hdr hdr = header_of(msg);
  UmadMessage out(msg, msg + len);
  uint8_t* m = out.data() + kUmadHeaderSize;
  // The TransactionIDs of a CM endpoint's Sends are the CM's own, as the
  // kernel's CM chooses them; other requests (a ClassPortInfo Get) get the
  // agent's upper half so that their responses find their way back.
  const bool cm_send = sender->cm_tag && m[3] == uint8_t(mad::Method::kSend);
  if (!is_response(m) && !cm_send) {
    // The MAD layer owns the TransactionID's upper half: it names the agent
    // that the response must come back to.
    mad::store_be32(m + 8, sender->hi_tid);
    if (hdr.timeout_ms) {
      Outstanding o;
      o.hi_tid = sender->hi_tid;
      o.tid = mad::load_be64(m + 8);
      o.request = out;
      o.retries_left = hdr.retries;
      o.timeout = std::chrono::milliseconds(hdr.timeout_ms);
      o.deadline = now + o.timeout;
      outstanding_.push_back(std::move(o));
    }
  }
  dispatch(sender->port, sender->reg.qpn, m, mad_len, ntohs(hdr.lid));
}

void MadRouter::send_from_port(PortRef port, uint32_t qpn, uint16_t dlid, const uint8_t* mad,
                               size_t len) {
  if (len < mad::kMadHeaderSize || qpn > 1) {
    ++counters_.malformed;
    return;
  }
  ++counters_.sent;
  dispatch(port, qpn, mad, len, dlid);
}

void MadRouter::dispatch(PortRef sender, uint32_t qpn, const uint8_t* mad, size_t len,
                         uint16_t dlid) {
  if (qpn == 0) return send_smp(sender, mad, len, dlid);
  // GMPs travel as data packets on QP1: both ports must be Active (IBA 7.2).
  const PortAttributes from = subnet_.port(sender);
  const auto to = subnet_.port_by_lid(dlid);
  if (from.state == PortState::kActive && !to && send_remote(from.lid, dlid, mad, len)) {
    if (tap_) tap_(sender, from.lid, dlid, 1, 1, mad, len);
    return;
  }
  if (from.state != PortState::kActive || !to || subnet_.port(*to).state != PortState::kActive) {
    ++counters_.unreachable;
    return;
  }
  if (tap_) tap_(sender, from.lid, dlid, 1, 1, mad, len);
  arrive(*to, Source{from.lid, 1}, mad, len);
}

// SMPs go through the subnet's SMI; the SMA's answer comes straight back.
void MadRouter::send_smp(PortRef sender, const uint8_t* mad, size_t len, uint16_t dlid) {
  if (len != mad::kMadSize || is_response(mad)) {
    ++counters_.malformed;
    return;
  }
  const bool directed = mad[1] == uint8_t(mad::MgmtClass::kSubnDirected);
  const uint16_t own_lid = directed ? uint16_t{0xffff} : subnet_.port(sender).lid;
  if (tap_) tap_(sender, own_lid, dlid, 0, 0, mad, len);
  bool departed = false;
  auto resp = subnet_.process_smp(sender, mad, len, dlid, &departed);
  if (departed) return;  // the response, if any, comes back from the other host
  if (!resp) {
    ++counters_.unreachable;
    return;
  }
  if (tap_) tap_(sender, dlid, own_lid, 0, 0, resp->data(), resp->size());
  arrive_response(sender, Source{directed ? uint16_t{0xffff} : dlid, 0}, resp->data(),
                  resp->size());
}

void MadRouter::arrive(PortRef port, const Source& src, const uint8_t* mad, size_t len) {
  if (sink_) return arrive_at_kernel(port, src, mad, len);
  if (is_response(mad)) return arrive_response(port, src, mad, len);
  if (mad[1] == uint8_t(mad::MgmtClass::kCommMgt) && mad[3] == uint8_t(mad::Method::kSend) &&
      len >= mad::kMadSize)
    return arrive_cm(port, src, mad, len);
  if (const Agent* server = server_for(port, mad[1], mad[2], mad[3]))
    return give(*server, src, mad, len);
  if (auto local = local_agents_.find(mad[1]); local != local_agents_.end()) {
    if (auto resp = local->second(port, mad, len)) respond(port, src, resp->data(), resp->size());
    return;
  }
  answer_unsupported(port, src, mad);
}

void MadRouter::arrive_cm(PortRef port, const Source& src, const uint8_t* mad, size_t len) {
  namespace cm = mad::cm;
  const cm::Attr attr = cm::attr_of(mad);
  if (attr == cm::Attr::kReq || attr == cm::Attr::kSidrReq) {
    const uint64_t service_id = mad::load_be64(mad + 32);  // same place in both
    for (const CmListen& l : cm_listens_) {
      if (!(l.port == port) || ((l.service_id ^ service_id) & l.mask) != 0) continue;
      if (const Agent* a = cm_endpoint(port, l.client)) {
        ++counters_.cm_routed;
        return give(*a, src, mad, len);
      }
    }
    return answer_cm(port, src, mad);
  }
  // Every other message names its receiver's communication ID; a SIDR_REP
  // the RequestID it answers.
  const uint32_t receiver =
      attr == cm::Attr::kSidrRep ? mad::load_be32(mad + 24) : mad::load_be32(mad + 28);
  for (const Agent& a : agents_) {
    if (a.cm_tag && a.cm_tag == receiver >> 16 && a.port == port) {
      ++counters_.cm_routed;
      return give(a, src, mad, len);
    }
  }
  answer_cm(port, src, mad);
}

void MadRouter::answer_cm(PortRef port, const Source& src, const uint8_t* mad) {
  namespace cm = mad::cm;
  ++counters_.cm_unmatched;
  const uint64_t tid = mad::load_be64(mad + 8);
  std::vector<uint8_t> answer;
  switch (cm::attr_of(mad)) {
    case cm::Attr::kReq: {
      // IBA 12.6.7.2: nobody listens on the ServiceID.
      cm::Rej rej;
      rej.set_remote_comm_id(cm::parse_message<cm::Req>(mad).local_comm_id());
      rej.set_message_rejected(uint8_t(cm::MessageKind::kReq));
      rej.set_reason(uint16_t(cm::RejectReason::kInvalidServiceId));
      answer = cm::build_mad(cm::Attr::kRej, tid, rej);
      break;
    }
    case cm::Attr::kSidrReq: {
      const auto req = cm::parse_message<cm::SidrReq>(mad);
      cm::SidrRep rep;
      rep.set_request_id(req.request_id());
      rep.set_status(uint8_t(cm::SidrStatus::kServiceIdNotSupported));
      rep.set_service_id(req.service_id());
      answer = cm::build_mad(cm::Attr::kSidrRep, tid, rep);
      break;
    }
    case cm::Attr::kDreq: {
      // IBA 12.9.6: a DREQ for a connection that is gone still gets a DREP.
      const auto dreq = cm::parse_message<cm::Dreq>(mad);
      cm::Drep drep;
      drep.set_local_comm_id(dreq.remote_comm_id());
      drep.set_remote_comm_id(dreq.local_comm_id());
      answer = cm::build_mad(cm::Attr::kDrep, tid, drep);
      break;
    }
    default:
      return;  // dropped, as a CM drops a message for no connection of its
  }
  respond(port, src, answer.data(), answer.size());
}

void MadRouter::arrive_at_kernel(PortRef port, const Source& src, const uint8_t* mad, size_t len) {
  if (!is_response(mad)) {
    if (auto local = local_agents_.find(mad[1]); local != local_agents_.end()) {
      if (auto resp = local->second(port, mad, len)) respond(port, src, resp->data(), resp->size());
      return;
    }
    // ibemu-sm's SA serves on the daemon's umad file of its port, not on
    // the kernel's: the requests it registered for are its own.
    if (const Agent* server = server_for(port, mad[1], mad[2], mad[3]))
      return give(*server, src, mad, len);
  }
  ++counters_.delivered;
  sink_(port, src.slid, src.qpn, mad::is_smp_class(mad[1]) ? 0 : 1, mad, len);
}

void MadRouter::arrive_response(PortRef port, const Source& src, const uint8_t* mad, size_t len) {
  if (sink_) return arrive_at_kernel(port, src, mad, len);
  const uint64_t tid = mad::load_be64(mad + 8);
  const Agent* agent = agent_by_hi_tid(uint32_t(tid >> 32));
  auto it = std::find_if(outstanding_.begin(), outstanding_.end(), [&](const Outstanding& o) {
    return o.hi_tid == uint32_t(tid >> 32) && o.tid == tid;
  });
  // A response to nothing outstanding (late, or to a request sent without a
  // timeout) is dropped, as the MAD layer drops it.
  if (!agent || !(agent->port == port) || it == outstanding_.end()) {
    ++counters_.unsolicited_responses;
    return;
  }
  outstanding_.erase(it);
  give(*agent, src, mad, len);
}

// ib_mad's generate_unmatched_resp: a Get or Set that no agent serves gets a
// GetResp with status "unsupported method/attribute"; anything else is dropped.
void MadRouter::answer_unsupported(PortRef port, const Source& src, const uint8_t* mad) {
  ++counters_.unmatched_requests;
  const uint8_t method = mad[3];
  if (method != uint8_t(mad::Method::kGet) && method != uint8_t(mad::Method::kSet)) return;
  std::array<uint8_t, mad::kMadSize> resp{};
  std::memcpy(resp.data(), mad, mad::kMadHeaderSize);
  resp[3] = uint8_t(mad::Method::kGetResp);
  mad::store_be16(resp.data() + 4, uint16_t(mad::MadStatus::kUnsupportedMethodAttr));
  respond(port, src, resp.data(), resp.size());
}

void MadRouter::respond(PortRef port, const Source& src, const uint8_t* resp, size_t len) {
  const auto back = subnet_.port_by_lid(src.slid);
  const uint16_t lid = subnet_.port(port).lid;
  if (!back) {
    if (send_remote(lid, src.slid, resp, len) && tap_) tap_(port, lid, src.slid, 1, 1, resp, len);
    return;
  }
  if (tap_) tap_(port, lid, src.slid, 1, 1, resp, len);
  arrive(*back, Source{lid, 1}, resp, len);
}

void MadRouter::give(const Agent& to, const Source& src, const uint8_t* mad, size_t len,
                     uint32_t status) {
  ib_user_mad_hdr h{};
  h.id = to.id;
  h.status = status;
  h.length = uint32_t(kUmadHeaderSize + len);
  h.qpn = htonl(src.qpn);
  h.qkey = htonl(src.qpn == 1 ? kQp1Qkey : 0);
  h.lid = htons(src.slid);
  UmadMessage out(kUmadHeaderSize + len);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + kUmadHeaderSize, mad, len);
  ++counters_.delivered;
  deliver_(to.client, std::move(out));
}

bool MadRouter::send_remote(uint16_t slid, uint16_t dlid, const uint8_t* mad, size_t len) {
  const auto uplink = subnet_.uplink_for_lid(dlid);
  if (!remote_ || !uplink || !subnet_.uplink_up(*uplink)) return false;
  if (len == mad::kMadSize) {
    remote_(*uplink, build_mad_packet({slid, dlid, 1, 1}, mad, len));
    return true;
  }
  // RMPP transfers are handed over whole on this host; between hosts they
  // travel as segments.
  if (!needs_rmpp_segments(mad, len)) return false;
  for (const MadSegment& seg : rmpp_segments(mad, len))
    remote_(*uplink, build_mad_packet({slid, dlid, 1, 1}, seg.data(), seg.size()));
  return true;
}

void MadRouter::receive_gmp(uint16_t slid, uint16_t dlid, uint32_t src_qp, const uint8_t* mad,
                            size_t len) {
  const auto to = subnet_.port_by_lid(dlid);
  if (!to || subnet_.port(*to).state != PortState::kActive || len < mad::kMadHeaderSize) {
    ++counters_.unreachable;
    return;
  }
  if (tap_) tap_(*to, slid, dlid, src_qp, 1, mad, len);
  // The kernel's MAD layer reassembles RMPP segments itself.
  if (!sink_ && RmppReassembly::is_partial_segment(mad, len)) {
    auto whole = rmpp_.add(slid, mad, len, Clock::now());
    if (whole) arrive(*to, Source{slid, src_qp}, whole->data(), whole->size());
    return;
  }
  arrive(*to, Source{slid, src_qp}, mad, len);
}

void MadRouter::receive_smp_response(PortRef port, uint16_t slid, const uint8_t* mad, size_t len) {
  if (len != mad::kMadSize) return;
  arrive_response(port, Source{slid, 0}, mad, len);
}

std::optional<MadRouter::Clock::time_point> MadRouter::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const Outstanding& o : outstanding_)
    if (!next || o.deadline < *next) next = o.deadline;
  return next;
}

void MadRouter::expire(Clock::time_point now) {
  std::vector<Outstanding> due;
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (it->deadline <= now) {
      due.push_back(std::move(*it));
      it = outstanding_.erase(it);
    } else {
      ++it;
    }
  }
  for (Outstanding& o : due) {
    const Agent* agent = agent_by_hi_tid(o.hi_tid);
    if (!agent) continue;
    const ib_user_mad_hdr hdr = header_of(o.request.data());
    const uint8_t* m = o.request.data() + kUmadHeaderSize;
    const size_t mad_len = o.request.size() - kUmadHeaderSize;
    if (o.retries_left > 0) {
      --o.retries_left;
      o.deadline = now + o.timeout;
      outstanding_.push_back(o);
      dispatch(agent->port, agent->reg.qpn, m, mad_len, ntohs(hdr.lid));
      continue;
    }
    // ib_umad hands the request back: its MAD header, status ETIMEDOUT.
    ++counters_.timeouts;
    give(*agent, Source{ntohs(hdr.lid), ntohl(hdr.qpn)}, m, mad::kMadHeaderSize, ETIMEDOUT);
  }
}

}  // namespace ibemu
