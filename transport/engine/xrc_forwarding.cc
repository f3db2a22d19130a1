// The XRC receive QP's half of requests for SRQs of other contexts (see
// xrc_forwarding.h): the responder has checked the request as for any SRQ;
// here it hands the request to the SRQ's owner, holds back the packets
// behind it, and finishes the request when the verdict comes — with the
// same acknowledgements, NAKs, MSN and state changes as responder.cc's own
// execution.
#include <cstring>

#include "transport/engine/qp.h"
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

void Qp::xrc_forward(const wire::PacketView& pkt, bool replay) noexcept {
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.bth().psn();
  alignas(8) uint8_t buf[kMaxMessage];
  XrcRequest r;
  r.header.kind = MessageKind::kXrcRequest;
  r.header.size = static_cast<uint32_t>(sizeof(r) + pkt.len);
  r.header.from = env_.context_id;
  r.seq = ++fwd_.seq;
  r.qpn = init_.qpn;
  r.xrcd = init_.xrcd;
  // The middle and last packets of a SEND go where its WQE came from.
  r.srqn = resp_.in_send && fwd_.held_srqn ? fwd_.held_srqn : fwd_.srqn;
  r.access = attr_.qp_access_flags;
  r.src_qp = peer_.qpn;
  r.sl = peer_.av.sl;
  r.replay = replay;
  r.recv_offset = resp_.recv_offset;
  r.has_wqe = resp_.srq_wqe_held;
  if (r.has_wqe) r.wqe = resp_.srq_wqe;
  r.write_va = resp_.write_va;
  r.write_rkey = resp_.write_rkey;
  r.write_remaining = resp_.write_remaining;
  r.write_total = resp_.write_total;
  if (flags & wire::kIsReadRequest) {
    // A new READ's responses carry its own MSN; a duplicate's the current one
    // (responder.cc does the same).
    r.path = response_path(env_.ports->port(attr_.port_num));
    if (!replay) r.path.msn = wire::psn_add(resp_.msn, 1);
    r.response_psn = psn;
  }
  r.mtu = mtu_bytes();
  r.packet_len = static_cast<uint32_t>(pkt.len);
  std::memcpy(buf, &r, sizeof(r));
  std::memcpy(buf + sizeof(r), pkt.data, pkt.len);

  switch (env_.contexts->to_srq_owner(r.srqn, buf, r.header.size)) {
    case Delivery::kNoRoute:
      // No context has that SRQ: as for an SRQ that does not exist here.
      responder_fail(psn, wire::NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
      return;
    case Delivery::kDropped:
      return;  // lost like a packet on a full link: the requester resends it
    case Delivery::kDelivered:
      break;
  }
  fwd_.waiting = true;
  fwd_.replay = replay;
  fwd_.pending_srqn = r.srqn;
  fwd_.deadline = env_.clock->now() + kVerdictPatience;
  fwd_.request.assign(pkt.data, pkt.data + pkt.len);
}

void Qp::receive_verdict(const XrcVerdict& v) noexcept {
  std::lock_guard lock(mutex_);
  if (!fwd_.waiting || v.seq != fwd_.seq) {
    // The QP stopped waiting (error, reset): a WQE the request took is
    // flushed, as the error state flushes the WQE of a message in progress.
    if (v.flags & kVerdictHoldsWqe) {
      Completion c;
      c.wr_id = v.wqe.wr_id;
      c.status = WcStatus::kWrFlushErr;
      c.opcode = WcOpcode::kRecv;
      c.qp_num = init_.qpn;
      c.src_qp = peer_.qpn;
      xrc_send_completion(v.srqn, c, false);
    }
    return;
  }
  fwd_.waiting = false;
  wire::PacketView pkt;
  if (wire::parse_packet(fwd_.request.data(), fwd_.request.size(), &pkt, false) ==
      wire::ParseError::kOk)
    xrc_apply(pkt, v);
  xrc_resume();
}

// What responder.cc does after its own execution of the same packet.
void Qp::xrc_apply(const wire::PacketView& pkt, const XrcVerdict& v) noexcept {
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.bth().psn();
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (v.outcome == XrcOutcome::kNoWqe) {
    // IBA 9.7.5.2.8: no receive WQE, RNR NAK; the PSN is not consumed.
    responder_rnr_nak(psn);
    return;
  }
  if (v.outcome == XrcOutcome::kFailed) {
    // The owner completed the WQE of the message, if it had one, with the
    // local error; the QP reports the rest.
    if (flags & wire::kIsSend) recv_done();
    resp_.in_write = false;
    responder_fail(psn, static_cast<wire::NakCode>(v.nak), v.status);
    return;
  }
  if (fwd_.replay) return;  // a duplicate READ changes nothing here
  if (flags & wire::kIsSend) {
    if (flags & wire::kIsFirst) {
      resp_.in_send = true;
      resp_.recv_offset = 0;
    }
    if (v.flags & kVerdictHoldsWqe) {
      resp_.srq_wqe = v.wqe;
      resp_.srq_wqe_held = true;
      fwd_.held_srqn = v.srqn;
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
    resp_.epsn = wire::psn_add(psn, len ? (len + mtu_bytes() - 1) / mtu_bytes() : 1);
    return;
  } else if (flags & wire::kIsAtomic) {
    responder_atomic_done(psn, v.atomic_orig);
    return;
  }
  // A completion the SRQ's CQ could not take: the CQ is in error and so is
  // the QP (QP_FATAL, IBA 11.6.3.1), as when its own CQ overruns.
  if (v.flags & kVerdictCqOverrun) on_cq_overrun();
  responder_finish(pkt);
}

void Qp::xrc_park(const wire::PacketView& pkt) noexcept {
  if (fwd_.parked.size() >= kMaxParked) return;
  fwd_.parked.emplace_back(pkt.data, pkt.data + pkt.len);
}

// The packets that waited go through the responder in their order, until
// one of them is forwarded in turn.
void Qp::xrc_resume() noexcept {
  while (!fwd_.waiting && !fwd_.parked.empty()) {
    std::vector<uint8_t> bytes = std::move(fwd_.parked.front());
    fwd_.parked.pop_front();
    wire::PacketView pkt;
    if (wire::parse_packet(bytes.data(), bytes.size(), &pkt, false) == wire::ParseError::kOk)
      responder_receive(pkt);
  }
}

// The QP leaves the states that receive: no verdict is awaited any more and
// the packets that waited are dropped with the rest.
void Qp::xrc_abandon() noexcept {
  fwd_.waiting = false;
  fwd_.parked.clear();
}

void Qp::xrc_send_completion(uint32_t srqn, const Completion& c, bool solicited) noexcept {
  if (!env_.contexts) return;
  XrcCompletion m;
  m.header.kind = MessageKind::kXrcCompletion;
  m.header.size = sizeof(m);
  m.header.from = env_.context_id;
  m.srqn = srqn;
  m.xrcd = init_.xrcd;
  m.completion = c;
  m.solicited = solicited;
  env_.contexts->to_srq_owner(srqn, reinterpret_cast<const uint8_t*>(&m), sizeof(m));
}

Nanos Qp::xrc_timer(Nanos now) noexcept {
  if (!fwd_.waiting) return 0;
  if (now < fwd_.deadline) return fwd_.deadline;
  if (env_.contexts->srq_owner_alive(fwd_.pending_srqn)) {
    fwd_.deadline = now + kVerdictPatience;
    return fwd_.deadline;
  }
  // The SRQ's process is gone and will not answer. The request counts as
  // lost; its resend (and whatever waited) finds no SRQ now.
  fwd_.waiting = false;
  xrc_resume();
  return 0;
}

}  // namespace ibemu::engine
