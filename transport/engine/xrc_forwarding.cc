// The XRC receive QP's half of requests for SRQs of other contexts (see
// xrc_forwarding.h): the responder has checked the request as for any SRQ;
// here it hands the request to the SRQ's owner, holds back the packets
// behind it (XrcForwarder), and finishes the request when the verdict comes
// (Responder::apply_verdict) — with the same acknowledgements, NAKs, MSN and
// state changes as responder.cc's own execution.
#include <cstring>

#include "transport/engine/responder.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

namespace {
// Packets that may wait behind a forwarded request. The requester keeps at
// most 128 unacknowledged; beyond these, a packet is dropped as a full link
// would drop it, and the requester resends it.
constexpr size_t kMaxParked = 256;
// How long a verdict may take before the QP asks whether the SRQ's owner is
// still there. As long as it is, the QP waits on: giving up on a request the
// owner may yet execute would execute its resend twice.
constexpr Nanos kVerdictPatience = 200'000'000;
}  // namespace

XrcForwarder::XrcForwarder(QpCore& qp, Responder& responder) : qp_(qp), responder_(responder) {}

// A verdict still owed belongs to the QP's past: its sequence number will
// not match again.
void XrcForwarder::reset() noexcept {
  const uint32_t seq = fwd_.seq;
  fwd_ = Forwarding{};
  fwd_.seq = seq;
}

Delivery XrcForwarder::forward(const wire::PacketView& pkt, bool replay) noexcept {
  const ResponderContext& resp = responder_.context();
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.bth().psn();
  alignas(8) uint8_t buf[kMaxMessage];
  XrcRequest r;
  r.header.kind = MessageKind::kXrcRequest;
  r.header.size = static_cast<uint32_t>(sizeof(r) + pkt.len);
  r.header.from = qp_.env.context_id;
  r.seq = ++fwd_.seq;
  r.qpn = qp_.init.qpn;
  r.xrcd = qp_.init.xrcd;
  // The middle and last packets of a SEND go where its WQE came from.
  r.srqn = resp.in_send && resp.held_srqn ? resp.held_srqn : fwd_.srqn;
  r.access = qp_.attr.qp_access_flags;
  r.src_qp = qp_.peer.qpn;
  r.sl = qp_.peer.av.sl;
  r.replay = replay;
  r.recv_offset = resp.recv_offset;
  r.has_wqe = resp.srq_wqe_held;
  if (r.has_wqe) r.wqe = resp.srq_wqe;
  r.write_va = resp.write_va;
  r.write_rkey = resp.write_rkey;
  r.write_remaining = resp.write_remaining;
  r.write_total = resp.write_total;
  if (flags & wire::kIsReadRequest) {
    // A new READ's responses carry its own MSN; a duplicate's the current one
    // (responder.cc does the same).
    r.path = responder_.response_path(qp_.env.ports->port(qp_.attr.port_num));
    if (!replay) r.path.msn = wire::psn_add(resp.msn, 1);
    r.response_psn = psn;
  }
  r.mtu = qp_.mtu_bytes();
  r.packet_len = static_cast<uint32_t>(pkt.len);
  std::memcpy(buf, &r, sizeof(r));
  std::memcpy(buf + sizeof(r), pkt.data, pkt.len);

  const Delivery delivery = qp_.env.contexts->to_srq_owner(r.srqn, buf, r.header.size);
  // kNoRoute: the responder answers as for an SRQ that does not exist here.
  // kDropped: lost like a packet on a full link: the requester resends it.
  if (delivery != Delivery::kDelivered) return delivery;
  fwd_.waiting = true;
  fwd_.replay = replay;
  fwd_.pending_srqn = r.srqn;
  fwd_.deadline = qp_.env.clock->now() + kVerdictPatience;
  fwd_.request.assign(pkt.data, pkt.data + pkt.len);
  return delivery;
}

void XrcForwarder::receive_verdict(const XrcVerdict& v) noexcept {
  if (!fwd_.waiting || v.seq != fwd_.seq) {
    drop_verdict(qp_, v);
    return;
  }
  fwd_.waiting = false;
  wire::PacketView pkt;
  if (wire::parse_packet(fwd_.request.data(), fwd_.request.size(), &pkt, false) ==
      wire::ParseError::kOk)
    responder_.apply_verdict(pkt, v, fwd_.replay);
  resume();
}

void XrcForwarder::drop_verdict(QpCore& qp, const XrcVerdict& v) noexcept {
  // The QP stopped waiting (error, reset): a WQE the request took is
  // flushed, as the error state flushes the WQE of a message in progress.
  if (v.flags & kVerdictHoldsWqe) {
    Completion c;
    c.wr_id = v.wqe.wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = WcOpcode::kRecv;
    c.qp_num = qp.init.qpn;
    c.src_qp = qp.peer.qpn;
    send_completion(qp, v.srqn, c, false);
  }
}

// What responder.cc does after its own execution of the same packet.
void Responder::apply_verdict(const wire::PacketView& pkt, const XrcVerdict& v,
                              bool replay) noexcept {
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.bth().psn();
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (v.outcome == XrcOutcome::kNoWqe) {
    // IBA 9.7.5.2.8: no receive WQE, RNR NAK; the PSN is not consumed.
    rnr_nak(psn);
    return;
  }
  if (v.outcome == XrcOutcome::kFailed) {
    // The owner completed the WQE of the message, if it had one, with the
    // local error; the QP reports the rest.
    if (flags & wire::kIsSend) recv_done();
    resp_.in_write = false;
    fail(psn, static_cast<wire::NakCode>(v.nak), v.status);
    return;
  }
  if (replay) return;  // a duplicate READ changes nothing here
  if (flags & wire::kIsSend) {
    if (flags & wire::kIsFirst) {
      resp_.in_send = true;
      resp_.recv_offset = 0;
    }
    if (v.flags & kVerdictHoldsWqe) {
      resp_.srq_wqe = v.wqe;
      resp_.srq_wqe_held = true;
      resp_.held_srqn = v.srqn;
    }
    resp_.recv_offset += n;
    if (flags & wire::kIsLast) {
      recv_done();
      resp_.in_send = false;
      resp_.msn = wire::psn_add(resp_.msn, 1);
    }
  } else if (flags & wire::kIsWrite) {
    if (flags & wire::kIsFirst) {
      const wire::Reth reth = pkt.reth();
      resp_.in_write = true;
      resp_.write_va = reth.va();
      resp_.write_rkey = reth.rkey();
      resp_.write_total = reth.dma_len();
      resp_.write_remaining = reth.dma_len();
    }
    resp_.write_va += n;
    resp_.write_remaining -= n;
    if (flags & wire::kIsLast) {
      resp_.in_write = false;
      resp_.msn = wire::psn_add(resp_.msn, 1);
    }
  } else if (flags & wire::kIsReadRequest) {
    // The owner sent the responses; their PSNs run on from the request's.
    const uint32_t len = pkt.reth().dma_len();
    resp_.msn = wire::psn_add(resp_.msn, 1);
    resp_.epsn = wire::psn_add(psn, len ? (len + qp_.mtu_bytes() - 1) / qp_.mtu_bytes() : 1);
    return;
  } else if (flags & wire::kIsAtomic) {
    atomic_done(psn, v.atomic_orig);
    return;
  }
  // A completion the SRQ's CQ could not take: the CQ is in error and so is
  // the QP (QP_FATAL, IBA 11.6.3.1), as when its own CQ overruns.
  if (v.flags & kVerdictCqOverrun) qp_.on_cq_overrun();
  finish(pkt);
}

void XrcForwarder::park(const wire::PacketView& pkt) noexcept {
  if (fwd_.parked.size() >= kMaxParked) return;
  fwd_.parked.emplace_back(pkt.data, pkt.data + pkt.len);
}

// The packets that waited go through the responder in their order, until
// one of them is forwarded in turn.
void XrcForwarder::resume() noexcept {
  while (!fwd_.waiting && !fwd_.parked.empty()) {
    std::vector<uint8_t> bytes = std::move(fwd_.parked.front());
    fwd_.parked.pop_front();
    wire::PacketView pkt;
    if (wire::parse_packet(bytes.data(), bytes.size(), &pkt, false) == wire::ParseError::kOk)
      responder_.receive(pkt);
  }
}

// The QP leaves the states that receive: no verdict is awaited any more and
// the packets that waited are dropped with the rest.
void XrcForwarder::abandon() noexcept {
  fwd_.waiting = false;
  fwd_.parked.clear();
}

void XrcForwarder::send_completion(QpCore& qp, uint32_t srqn, const Completion& c,
                                   bool solicited) noexcept {
  if (!qp.env.contexts) return;
  XrcCompletion m;
  m.header.kind = MessageKind::kXrcCompletion;
  m.header.size = sizeof(m);
  m.header.from = qp.env.context_id;
  m.srqn = srqn;
  m.xrcd = qp.init.xrcd;
  m.completion = c;
  m.solicited = solicited;
  qp.env.contexts->to_srq_owner(srqn, reinterpret_cast<const uint8_t*>(&m), sizeof(m));
}

Nanos XrcForwarder::timer(Nanos now) noexcept {
  if (!fwd_.waiting) return 0;
  if (now < fwd_.deadline) return fwd_.deadline;
  if (qp_.env.contexts->srq_owner_alive(fwd_.pending_srqn)) {
    fwd_.deadline = now + kVerdictPatience;
    return fwd_.deadline;
  }
  // The SRQ's process is gone and will not answer. The request counts as
  // lost; its resend (and whatever waited) finds no SRQ now.
  fwd_.waiting = false;
  resume();
  return 0;
}

}  // namespace ibemu::engine
