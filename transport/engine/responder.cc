// The responder (IBA 9.7.5): checks each incoming request (source, PSN,
// opcode sequence), executes it against this QP's receive queue or memory
// regions, and acknowledges it. A DCT's DcTarget loads the context of the
// packet's connection first; an XRC receive QP's XrcForwarder takes the
// requests for other contexts' SRQs.
#include <cstring>

#include "transport/engine/atomics.h"
#include "transport/engine/responder.h"

#include "transport/engine/dc_target.h"
#include "transport/engine/requester.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

using wire::NakCode;

namespace {
// IBA 9.7.5.1.1: credit count 31 means "no end-to-end flow control credits".
constexpr uint8_t kNoCredits = wire::kAethCreditInvalid;

// Payload lengths a requester may send (IBA 9.7.5.1): first and middle
// packets carry exactly one PMTU, last packets 1 to PMTU bytes, only packets
// at most one PMTU.
bool payload_length_ok(uint32_t flags, size_t n, uint32_t mtu) {
  const bool first = flags & wire::kIsFirst, last = flags & wire::kIsLast;
  if (first && last) return n <= mtu;
  if (last) return n >= 1 && n <= mtu;
  return n == mtu;
}
}  // namespace

Responder::Responder(QpCore& qp) : qp_(qp) {}

void Responder::reset() noexcept {
  resp_ = ResponderContext{};
  responses_out_.clear();
  held_acks_.clear();
}

RecvWqe* Responder::placing_into() noexcept {
  RecvWqe* w = recv_current();
  return w && resp_.in_send ? w : nullptr;
}

bool Responder::failed() const noexcept {
  return qp_.attr.qp_state == QpState::kErr || (dct_ && !dct_->loaded());
}

void Responder::complete_recv(const RecvWqe& wqe, WcStatus status, WcOpcode op, uint32_t byte_len,
                              uint32_t imm, uint32_t wc_flags, bool solicited,
                              uint16_t slid) noexcept {
  Completion c = recv_completion(wqe, status, op, byte_len, imm, wc_flags, slid);
  c.qp_num = qp_.init.qpn;
  c.src_qp = qp_.peer.qpn;
  c.sl = qp_.peer.av.sl;
  push_recv_completion(c, solicited);
}

void Responder::push_recv_completion(const Completion& c, bool solicited) noexcept {
  // A WQE taken from another context's SRQ completes on that SRQ's CQ, which
  // only its owner may touch.
  if (resp_.held_srqn) {
    XrcForwarder::send_completion(qp_, resp_.held_srqn, c, solicited);
    return;
  }
  if (qp_.init.recv_cq && !qp_.init.recv_cq->push(c, solicited)) qp_.on_cq_overrun();
}

void Responder::flush() noexcept {
  // With an SRQ only the WQE of a message in progress is this QP's; the rest
  // stay for the other QPs (IBA 10.2.9.5.3).
  while (RecvWqe* w = recv_current()) {
    complete_recv(*w, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, false, 0);
    recv_done();
  }
  resp_.in_send = false;
  // In ERR the responder sends nothing more (IBA 10.3.1): READ responses
  // and ACKs still owed are dropped with it.
  responses_out_.clear();
}

// An XRC receive QP has no receive queue: a WQE it holds came from an SRQ,
// here or in another context.
bool Responder::recv_ready() noexcept {
  if (uses_srq()) return qp_.init.srq && !qp_.init.srq->empty();
  return !qp_.rq.empty();
}

RecvWqe* Responder::recv_take() noexcept {
  if (!uses_srq()) return qp_.rq.empty() ? nullptr : &qp_.rq.at(qp_.rq.head());
  if (!resp_.srq_wqe_held && qp_.init.srq) resp_.srq_wqe_held = qp_.init.srq->take(&resp_.srq_wqe);
  return resp_.srq_wqe_held ? &resp_.srq_wqe : nullptr;
}

RecvWqe* Responder::recv_current() noexcept {
  if (uses_srq()) return resp_.srq_wqe_held ? &resp_.srq_wqe : nullptr;
  return qp_.rq.empty() ? nullptr : &qp_.rq.at(qp_.rq.head());
}

void Responder::recv_done() noexcept {
  if (uses_srq()) {
    resp_.srq_wqe_held = false;
    resp_.held_srqn = 0;
  } else {
    qp_.rq.pop();
  }
}

// IBA 11.6.3.1 / 10.3.1: a QP on an SRQ in the error state will take no
// further WQE from it; the consumer learns so before it destroys the QP.
void Responder::last_wqe_reached() noexcept {
  if ((qp_.init.srq || (xrc_ && xrc_->remote())) && qp_.env.on_event)
    qp_.env.on_event(qp_.init.qpn, QpEvent::kLastWqeReached);
}

// The request's SRQ is another context's (xrc_forwarding.cc).
void Responder::xrc_forward(const wire::PacketView& pkt, bool replay) noexcept {
  if (xrc_->forward(pkt, replay) == Delivery::kNoRoute)
    // No context has that SRQ: as for an SRQ that does not exist here.
    fail(pkt.bth().psn(), NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
}

void Responder::send_ack(uint32_t psn, uint8_t syndrome) noexcept {
  send_response(static_cast<uint8_t>(wire::Opcode::kRcAcknowledge), psn, syndrome, nullptr, 0, 0);
}

Nanos Responder::resend_held_acks(Nanos now) noexcept {
  if (held_acks_.empty()) return 0;
  return held_acks_.offer(now, [this](uint16_t dlid, uint32_t dest_qp, const uint8_t* p, size_t n) {
    return qp_.transmit(dlid, dest_qp, p, n);
  });
}

ResponsePath Responder::response_path(const PortAddress& me) const noexcept {
  return ResponsePath{qp_.peer.av,  qp_.attr.port_num, static_cast<uint8_t>(qp_.transport()),
                      qp_.peer.qpn, resp_.msn,         me.pkey(qp_.attr.pkey_index)};
}

void Responder::send_response(uint8_t opcode, uint32_t psn, uint8_t syndrome,
                              const uint8_t* payload, uint32_t len, uint64_t atomic_orig) noexcept {
  // One read of the port (a copy from the state page) per response.
  const PortAddress me = qp_.env.ports->port(qp_.attr.port_num);
  const size_t total = write_response(qp_.tx_buf, response_path(me), me, opcode, psn, syndrome,
                                      payload, len, atomic_orig, qp_.env.sink->wants_crcs());
  if (!responses_out_.empty()) {
    // Behind a READ still being answered: responses go in PSN order.
    QueuedResponse q;
    q.packet.assign(qp_.tx_buf, qp_.tx_buf + total);
    q.psn = psn;
    if (dct_) q.dc = dct_->loaded_id();
    responses_out_.push_back(std::move(q));
    return;
  }
  if (qp_.transmit(qp_.peer.av.dlid, qp_.peer.qpn, qp_.tx_buf, total))
    held_acks_.delivered(qp_.peer.av.dlid, qp_.peer.qpn);
  else if (opcode == static_cast<uint8_t>(wire::Opcode::kRcAcknowledge))
    held_acks_.hold(qp_.peer.av.dlid, qp_.peer.qpn, qp_.tx_buf, total, qp_.env.clock->now());
}

// IBA 9.7.5.2.x: a request the responder cannot carry out. An RC QP goes to
// the error state; the requester learns why through the NAK.
void Responder::fail(uint32_t psn, NakCode code, WcStatus local_status) noexcept {
  if (!qp_.reliable()) {
    // UC (IBA 9.8) has no NAK to send: the message is dropped silently, the
    // QP carries on and its receive WQE serves the next message.
    resp_.in_send = false;
    resp_.in_write = false;
    return;
  }
  send_ack(psn, wire::make_nak_syndrome(code));
  if (resp_.in_send && recv_current()) {
    complete_recv(*recv_current(), local_status, WcOpcode::kRecv, 0, 0, 0, false, 0);
    recv_done();
  }
  resp_.in_send = false;
  // A DCT serves every DCI that knows its key: an error ends the offending
  // connection only, the DCT stays in RTR for the others (docs/dc.md).
  if (dct_) {
    dct_->close_connection();
    return;
  }
  qp_.enter_error();
  // IBA 11.6.3.1: errors the responder finds in a request, that no
  // completion of this QP reports, are affiliated asynchronous errors.
  if (qp_.env.on_event && code == NakCode::kInvalidRequest &&
      local_status == WcStatus::kRemInvReqErr)
    qp_.env.on_event(qp_.init.qpn, QpEvent::kReqErr);
  if (qp_.env.on_event && code == NakCode::kRemoteAccessError)
    qp_.env.on_event(qp_.init.qpn, QpEvent::kAccessErr);
}

// IBA 9.6.1.1 (C9-40…): an RC/UC responder only takes packets from the QP it
// is connected to: the source LID (and GID when a GRH is used).
bool Responder::accepts_source(const wire::PacketView& pkt) noexcept {
  if (pkt.lrh().slid() != qp_.peer.av.dlid) return false;
  if (qp_.peer.av.is_global && pkt.has_grh) {
    uint8_t sgid[16];
    pkt.grh().sgid(sgid);
    if (std::memcmp(sgid, qp_.peer.av.dgid.data(), 16) != 0) return false;
  }
  return true;
}

void Responder::receive(const wire::PacketView& pkt) noexcept {
  // Nothing passes a request whose verdict another context still owes
  // (xrc_forwarding.cc): the packets behind it wait their turn.
  if (xrc_ && xrc_->waiting()) {
    xrc_->park(pkt);
    return;
  }
  if (!qp_.rq_can_receive()) return;              // C9-..: packets to a QP not ready are dropped
  if (qp_.init.type == QpType::kXrcSend) return;  // an initiator only sends
  // IBA 9.6.1: the opcode's transport must be the QP's service type.
  if (pkt.info->transport != qp_.transport()) return;
  if (!accepts_source(pkt)) return;
  if (qp_.init.type == QpType::kXrcRecv && !xrc_select_srq(pkt)) return;
  const uint32_t flags = pkt.info->flags;
  const bool rc = qp_.reliable();
  const uint32_t psn = pkt.bth().psn();
  const int32_t diff = wire::psn_diff(psn, resp_.epsn);

  if (rc && diff != 0) check_first_psn(psn, diff);
  if (rc && diff < 0) {
    // Duplicate (IBA 9.7.5.1.3): already executed. A READ is executed again
    // from its PSN (the requester asks only for what it is missing); an
    // atomic gets its saved result (C9-102); anything else is acknowledged
    // again so a requester whose ACK was lost can make progress.
    if (flags & wire::kIsReadRequest) {
      if (xrc_ && xrc_->remote())
        xrc_forward(pkt, /*replay=*/true);
      else if (qp_.attr.qp_state != QpState::kErr) {
        abandon_responses_from(psn);
        execute_read(pkt, psn);
      }
      return;
    }
    if (flags & wire::kIsAtomic) {
      replay_atomic(pkt);
      return;
    }
    if (pkt.bth().ack_req() || (flags & wire::kIsLast))
      send_ack(wire::psn_add(resp_.epsn, wire::kPsnMask), wire::make_ack_syndrome(kNoCredits));
    return;
  }
  if (diff != 0) {
    if (!rc) {
      // UC (IBA 9.8): nothing is retransmitted, so there are no duplicates
      // to recognise — any PSN but the expected one, earlier or later, ends
      // the message in progress silently; only a first/only packet may start
      // the next one (the opcode check below).
      resp_.epsn = psn;
      resp_.in_send = false;
      resp_.in_write = false;
    } else {
      // PSN sequence error: NAK once until the expected packet arrives (C9-98).
      if (!resp_.nak_sent) {
        resp_.nak_sent = true;
        send_ack(resp_.epsn, wire::make_nak_syndrome(NakCode::kPsnSequenceError));
      }
      return;
    }
  }
  resp_.nak_sent = false;
  resp_.accepted_any = true;
  if (rc && (flags & wire::kIsFirst) && forced_nak(psn)) return;

  // Opcode sequence (IBA 9.7.5.1.2 / C9-89): inside a multi-packet message
  // only its middle/last packets may come.
  const bool first = flags & wire::kIsFirst;
  if ((resp_.in_send && !((flags & wire::kIsSend) && !first)) ||
      (resp_.in_write && !((flags & wire::kIsWrite) && !first)) ||
      (!resp_.in_send && !resp_.in_write && !first)) {
    if (rc) fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  // A malformed length is an invalid request (class C: NAK, QP to error) on
  // RC; on UC the message is dropped silently.
  if ((flags & (wire::kIsSend | wire::kIsWrite)) &&
      !payload_length_ok(flags, pkt.payload_len, qp_.mtu_bytes())) {
    fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  // The request's SRQ is another context's: its owner executes it and the
  // verdict finishes it here.
  if (xrc_ && xrc_->remote() &&
      (flags & (wire::kIsSend | wire::kIsWrite | wire::kIsReadRequest | wire::kIsAtomic))) {
    xrc_forward(pkt, /*replay=*/false);
    return;
  }
  if (flags & wire::kIsSend) {
    execute_send(pkt);
  } else if (flags & wire::kIsWrite) {
    execute_write(pkt);
  } else if (rc && (flags & wire::kIsReadRequest)) {
    // The responses carry the acknowledgement and the READ's PSNs run on
    // through them (IBA 9.7.5.1.2).
    uint32_t len = pkt.reth().dma_len();
    uint32_t npkts = len ? (len + qp_.mtu_bytes() - 1) / qp_.mtu_bytes() : 1;
    const uint32_t msn = resp_.msn;
    resp_.msn = wire::psn_add(msn, 1);  // the responses carry the READ's own MSN
    execute_read(pkt, psn);
    if (failed()) {
      resp_.msn = msn;
      return;
    }
    resp_.epsn = wire::psn_add(psn, npkts);
    return;
  } else if (rc && (flags & wire::kIsAtomic)) {
    execute_atomic(pkt);
    return;
  } else {
    if (rc) fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  finish(pkt);
}

// A SEND or WRITE packet was executed: it consumes its PSN and is
// acknowledged when the requester asked or the message ended (IBA 9.7.5.1.2).
void Responder::finish(const wire::PacketView& pkt) noexcept {
  if (failed()) return;
  if (resp_.nak_sent) return;  // an RNR NAK went out; the PSN is not consumed
  const uint32_t psn = pkt.bth().psn();
  resp_.epsn = wire::psn_add(psn, 1);
  if (qp_.reliable() && (pkt.bth().ack_req() || (pkt.info->flags & wire::kIsLast)))
    send_ack(psn, wire::make_ack_syndrome(kNoCredits));
}

// IBA 9.7.5.2.8: no receive WQE for the request at `psn`. The PSN is not
// consumed: the requester resends it after the RNR timer.
void Responder::rnr_nak(uint32_t psn) noexcept {
  send_ack(psn, wire::make_rnr_nak_syndrome(qp_.attr.min_rnr_timer));
  resp_.nak_sent = true;
  if (qp_.env.spec) qp_.env.spec->rnr_nak_sent(qp_.init.qpn, psn);
}

// The first request since RTR is `diff` PSNs off rq_psn. Behind it, it is
// taken for a duplicate of something never received; ahead by more than a requester may send
// unacknowledged, no loss explains it: the requester started from another PSN (IBA 9.7.1).
void Responder::check_first_psn(uint32_t psn, int32_t diff) noexcept {
  if (!qp_.env.spec || resp_.accepted_any || qp_.is_dc()) return;
  if (diff > 0 && diff <= static_cast<int32_t>(Requester::kMaxWindow)) return;
  resp_.accepted_any = true;  // one report per connection
  qp_.env.spec->psn_mismatch(qp_.init.qpn, qp_.attr.rq_psn, psn);
}

// ibemu fault nak: a new request answered as if the responder had no receive
// WQE (RNR NAK) or had missed a packet (PSN sequence error NAK), without
// executing it; the requester's retry paths do the rest.
bool Responder::forced_nak(uint32_t psn) noexcept {
  if (!qp_.env.forced_naks) return false;
  switch (qp_.env.forced_naks->take(qp_.init.qpn)) {
    case ForcedNak::kRnr:
      send_ack(psn, wire::make_rnr_nak_syndrome(qp_.attr.min_rnr_timer));
      break;
    case ForcedNak::kPsnSequence:
      send_ack(resp_.epsn, wire::make_nak_syndrome(NakCode::kPsnSequenceError));
      break;
    default:
      return false;
  }
  resp_.nak_sent = true;
  return true;
}

// An XRC receive QP has no PD, CQ or receive queue of its own: each request
// names, in its XRCETH, the XRC SRQ whose WQEs, protection domain and CQ it
// uses; the SRQ must belong to the QP's XRC domain (IBA annex A14). An SRQ
// this context does not have may be another process's: its owner checks the
// domain and executes the request (xrc_forwarding.cc).
bool Responder::xrc_select_srq(const wire::PacketView& pkt) noexcept {
  const uint32_t srqn = pkt.xrceth().srqn();
  SharedReceiveQueue* srq = qp_.env.srqs ? qp_.env.srqs->find(srqn) : nullptr;
  if (!srq && srqn && qp_.env.contexts) {
    xrc_->set_remote(srqn);
    qp_.init.srq = nullptr;
    qp_.init.pd = 0;
    qp_.init.recv_cq = nullptr;
    return true;
  }
  xrc_->set_remote(0);
  if (!srq || srq->xrc().xrcd != qp_.init.xrcd) {
    fail(pkt.bth().psn(), NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return false;
  }
  qp_.init.srq = srq;
  qp_.init.pd = srq->xrc().pd;
  qp_.init.recv_cq = srq->xrc().cq;
  return true;
}

void Responder::execute_send(const wire::PacketView& pkt) noexcept {
  const uint32_t flags = pkt.info->flags;
  const bool rc = qp_.reliable();
  const uint32_t psn = pkt.bth().psn();
  if (flags & wire::kIsFirst) {
    if (!recv_ready()) {
      // No receive WQE: RNR NAK on RC (IBA 9.7.5.2.8), silent drop on UC.
      if (rc) rnr_nak(psn);
      return;
    }
    recv_take();
    resp_.in_send = true;
    resp_.recv_offset = 0;
  }
  RecvWqe* current = recv_current();
  if (!current) return;  // a middle packet of a message whose start was dropped (UC)
  RecvWqe& wqe = *current;
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (uint64_t(resp_.recv_offset) + n > wqe.length) {
    // Message longer than the receive buffer: local length error here,
    // invalid request at the requester (IBA 9.7.5.2.4, C9-?).
    fail(psn, NakCode::kInvalidRequest, WcStatus::kLocLenErr);
    return;
  }
  if (n && copy_to_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, resp_.recv_offset,
                        pkt.payload(), n) != MrCheck::kOk) {
    fail(psn, NakCode::kRemoteOperationalError, WcStatus::kLocProtErr);
    return;
  }
  resp_.recv_offset += n;
  if (flags & wire::kIsLast) {
    uint32_t wc_flags = 0, imm = 0;
    if (flags & wire::kHasImmDt) {
      wc_flags |= kWcWithImm;
      imm = pkt.immdt().imm();
    }
    if (flags & wire::kHasIeth) {
      // SEND with Invalidate (IBA 9.4.4.1): the named fast-registered
      // region, or window bound through this QP, is invalid once the
      // message completes. A key that names neither is an invalid request.
      imm = pkt.ieth().rkey();
      if (qp_.env.mrs->invalidate(imm, qp_.init.pd, qp_.init.qpn) != MrCheck::kOk) {
        fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
        return;
      }
      wc_flags |= kWcWithInv;
    }
    if (pkt.has_grh) wc_flags |= kWcGrh;
    complete_recv(wqe, WcStatus::kSuccess, WcOpcode::kRecv, resp_.recv_offset, imm, wc_flags,
                  pkt.bth().se(), pkt.lrh().slid());
    recv_done();
    resp_.in_send = false;
    resp_.msn = wire::psn_add(resp_.msn, 1);
  }
}

void Responder::execute_write(const wire::PacketView& pkt) noexcept {
  const uint32_t flags = pkt.info->flags;
  const uint32_t psn = pkt.bth().psn();
  // WRITE with immediate consumes a receive WQE (IBA 9.4.3); without one the
  // last packet is RNR NAK'd before anything of it is executed.
  if ((flags & wire::kIsLast) && (flags & wire::kHasImmDt) && !recv_ready()) {
    if (qp_.reliable()) rnr_nak(psn);
    return;
  }
  if (flags & wire::kIsFirst) {
    wire::Reth reth = pkt.reth();
    resp_.in_write = true;
    resp_.write_va = reth.va();
    resp_.write_rkey = reth.rkey();
    resp_.write_total = reth.dma_len();
    resp_.write_remaining = reth.dma_len();
    // IBA 9.7.5.2.3 / C9-?: the whole range is checked when the message starts.
    MemorySpan dst;
    if (!(qp_.attr.qp_access_flags & kAccessRemoteWrite) ||
        (resp_.write_total &&
         qp_.env.mrs->remote(resp_.write_rkey, qp_.init.pd, qp_.init.qpn, resp_.write_va,
                             resp_.write_total, kAccessRemoteWrite, &dst) != MrCheck::kOk)) {
      resp_.in_write = false;
      fail(psn, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      return;
    }
  }
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  // The packets of an RDMA WRITE add up to exactly its DMA length (IBA 9.7.5.1).
  if (n > resp_.write_remaining || ((flags & wire::kIsLast) && n != resp_.write_remaining)) {
    resp_.in_write = false;
    fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  if (n) {
    MemorySpan dst;
    // The region, or the device memory under it, went away mid-message.
    if (qp_.env.mrs->remote(resp_.write_rkey, qp_.init.pd, qp_.init.qpn, resp_.write_va, n,
                            kAccessRemoteWrite, &dst) != MrCheck::kOk ||
        !dst.write(0, pkt.payload(), n)) {
      resp_.in_write = false;
      fail(psn, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      return;
    }
  }
  resp_.write_va += n;
  resp_.write_remaining -= n;
  if (flags & wire::kIsLast) {
    resp_.in_write = false;
    if (flags & wire::kHasImmDt) {
      // recv_ready() held before the message was executed: a WQE is there.
      if (RecvWqe* wqe = recv_take()) {
        complete_recv(*wqe, WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, resp_.write_total,
                      pkt.immdt().imm(), kWcWithImm | (pkt.has_grh ? uint32_t{kWcGrh} : 0u),
                      pkt.bth().se(), pkt.lrh().slid());
        recv_done();
      }
    }
    resp_.msn = wire::psn_add(resp_.msn, 1);
  }
}

// RDMA READ (IBA 9.7.5.2.2): the whole range is checked first; then the
// responses go out, one PMTU each, with PSNs from the request's on, as the
// link takes them (responder_output.cc). A READ re-requested from a later
// PSN (after lost responses) starts there.
void Responder::execute_read(const wire::PacketView& pkt, uint32_t psn) noexcept {
  const wire::Reth reth = pkt.reth();
  const uint32_t len = reth.dma_len();
  MemorySpan src;
  if (!(qp_.attr.qp_access_flags & kAccessRemoteRead) ||
      (len && qp_.env.mrs->remote(reth.rkey(), qp_.init.pd, qp_.init.qpn, reth.va(), len,
                                  kAccessRemoteRead, &src) != MrCheck::kOk)) {
    fail(psn, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
    return;
  }
  queue_read(reth.va(), reth.rkey(), len, psn);
}

// Atomics (IBA 9.4.5, 9.7.5.2.3): the address must be 8-byte aligned and
// the region must allow remote atomics (atomics.h executes them).
void Responder::execute_atomic(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  const wire::AtomicEth a = pkt.atomic_eth();
  if (a.va() % 8 != 0) {  // C9-87: a misaligned atomic is an invalid request
    fail(psn, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  MemorySpan word;
  uint64_t orig;
  // 8-byte aligned: checked above.
  if (!(qp_.attr.qp_access_flags & kAccessRemoteAtomic) ||
      qp_.env.mrs->remote(a.rkey(), qp_.init.pd, qp_.init.qpn, a.va(), 8, kAccessRemoteAtomic,
                          &word) != MrCheck::kOk ||
      !engine::execute_atomic(pkt.opcode(), a, word, &orig)) {
    fail(psn, NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
    return;
  }
  atomic_done(psn, orig);
}

// An executed atomic is remembered for its duplicates (C9-102), consumes its
// PSN and is answered with the original value.
void Responder::atomic_done(uint32_t psn, uint64_t orig) noexcept {
  auto& slot = resp_.atomics[resp_.next_atomic++ % DeviceLimits::kMaxQpRdAtom];
  slot = {psn, orig, true};
  resp_.msn = wire::psn_add(resp_.msn, 1);
  resp_.epsn = wire::psn_add(psn, 1);
  send_response(static_cast<uint8_t>(wire::Opcode::kRcAtomicAcknowledge), psn,
                wire::make_ack_syndrome(kNoCredits), nullptr, 0, orig);
}

void Responder::replay_atomic(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  for (const auto& slot : resp_.atomics)
    if (slot.valid && slot.psn == psn) {
      send_response(static_cast<uint8_t>(wire::Opcode::kRcAtomicAcknowledge), psn,
                    wire::make_ack_syndrome(kNoCredits), nullptr, 0, slot.orig);
      return;
    }
  // Too old to remember: the requester cannot still be waiting for it.
}

}  // namespace ibemu::engine
