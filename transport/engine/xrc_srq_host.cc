// The SRQ owner's half of XRC requests that a receive QP of another context
// forwarded (see xrc_forwarding.h): each is executed against this context's
// SRQ, the SRQ's PD and CQ and this context's memory, step for step as
// responder.cc executes a request for an SRQ of the QP's own context, and
// answered with a verdict. The receive QP's transport state travels with the
// request; nothing of it stays here.
#include <chrono>
#include <cstring>
#include <thread>

#include "transport/engine/atomics.h"
#include "transport/engine/hca_engine.h"

namespace ibemu::engine {

namespace {

using wire::NakCode;

// A verdict must arrive: without it the QP waits as long as this context
// lives. The link retries a full inbox briefly; this retries the link.
constexpr int kVerdictAttempts = 1000;
constexpr auto kVerdictRetryPause = std::chrono::microseconds(100);

// One forwarded request packet and what came of it.
struct Execution {
  const XrcRequest& r;
  const wire::PacketView& pkt;
  SharedReceiveQueue& srq;
  MrTable& mrs;
  XrcVerdict& v;

  uint32_t pd() const { return srq.xrc().pd; }
  uint32_t flags() const { return pkt.info->flags; }

  void fail(NakCode nak, WcStatus status) {
    v.outcome = XrcOutcome::kFailed;
    v.nak = static_cast<uint8_t>(nak);
    v.status = status;
  }

  // On the SRQ's CQ, naming the receive QP (IBA annex A14), with what the
  // receive QP's own completion would carry.
  void complete(const RecvWqe& wqe, WcStatus status, WcOpcode op, uint32_t byte_len, uint32_t imm,
                uint32_t wc_flags, bool solicited, uint16_t slid) {
    Completion c = recv_completion(wqe, status, op, byte_len, imm, wc_flags, slid);
    c.qp_num = r.qpn;
    c.src_qp = r.src_qp;
    c.sl = r.sl;
    CompletionQueue* cq = srq.xrc().cq;
    if (cq && !cq->push(c, solicited)) v.flags |= kVerdictCqOverrun;
  }
  // A message that fails holding a WQE completes it with the local error.
  void fail_with(const RecvWqe& wqe, NakCode nak, WcStatus status) {
    complete(wqe, status, WcOpcode::kRecv, 0, 0, 0, false, 0);
    fail(nak, status);
  }

  void send();
  void write();
  void atomic();
};

// SEND (IBA 9.7.5.2.1): the first packet takes a WQE for the whole message;
// the later ones come with it.
void Execution::send() {
  RecvWqe wqe;
  uint32_t offset = 0;
  if (flags() & wire::kIsFirst) {
    if (!srq.take(&wqe)) {
      v.outcome = XrcOutcome::kNoWqe;
      return;
    }
  } else if (r.has_wqe) {
    wqe = r.wqe;
    offset = r.recv_offset;
  } else {
    fail(NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (uint64_t(offset) + n > wqe.length) {
    // Longer than the receive buffer (IBA 9.7.5.2.4).
    fail_with(wqe, NakCode::kInvalidRequest, WcStatus::kLocLenErr);
    return;
  }
  if (n &&
      copy_to_sges(mrs, pd(), wqe.sge, wqe.num_sge, offset, pkt.payload(), n) != MrCheck::kOk) {
    fail_with(wqe, NakCode::kRemoteOperationalError, WcStatus::kLocProtErr);
    return;
  }
  if (!(flags() & wire::kIsLast)) {
    v.flags |= kVerdictHoldsWqe;
    v.wqe = wqe;
    return;
  }
  uint32_t wc_flags = 0, imm = 0;
  if (flags() & wire::kHasImmDt) {
    wc_flags |= kWcWithImm;
    imm = pkt.immdt().imm();
  }
  if (flags() & wire::kHasIeth) {
    // SEND with Invalidate (IBA 9.4.4.1), of a fast-registered region or
    // of a window bound through the receive QP.
    imm = pkt.ieth().rkey();
    if (mrs.invalidate(imm, pd(), r.qpn) != MrCheck::kOk) {
      fail_with(wqe, NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
      return;
    }
    wc_flags |= kWcWithInv;
  }
  if (pkt.has_grh) wc_flags |= kWcGrh;
  complete(wqe, WcStatus::kSuccess, WcOpcode::kRecv, offset + n, imm, wc_flags, pkt.bth().se(),
           pkt.lrh().slid());
}

// RDMA WRITE (IBA 9.7.5.2.3): the whole range is checked when the message
// starts; WRITE with immediate consumes a WQE, and without one its last
// packet is RNR NAK'd before anything of it is executed.
void Execution::write() {
  if ((flags() & wire::kIsLast) && (flags() & wire::kHasImmDt) && srq.empty()) {
    v.outcome = XrcOutcome::kNoWqe;
    return;
  }
  uint64_t va = r.write_va;
  uint32_t rkey = r.write_rkey, remaining = r.write_remaining, total = r.write_total;
  MemorySpan dst;
  if (flags() & wire::kIsFirst) {
    const wire::Reth reth = pkt.reth();
    va = reth.va();
    rkey = reth.rkey();
    total = remaining = reth.dma_len();
    if (!(r.access & kAccessRemoteWrite) ||
        (total &&
         mrs.remote(rkey, pd(), r.qpn, va, total, kAccessRemoteWrite, &dst) != MrCheck::kOk)) {
      fail(NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      return;
    }
  }
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (n > remaining || ((flags() & wire::kIsLast) && n != remaining)) {
    fail(NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  if (n) {
    if (mrs.remote(rkey, pd(), r.qpn, va, n, kAccessRemoteWrite, &dst) != MrCheck::kOk ||
        !dst.write(0, pkt.payload(), n)) {
      fail(NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      return;
    }
  }
  if ((flags() & wire::kIsLast) && (flags() & wire::kHasImmDt)) {
    RecvWqe wqe;
    if (srq.take(&wqe))
      complete(wqe, WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, total, pkt.immdt().imm(),
               kWcWithImm | (pkt.has_grh ? uint32_t{kWcGrh} : 0u), pkt.bth().se(),
               pkt.lrh().slid());
  }
}

// Atomics (IBA 9.4.5, 9.7.5.2.3; C9-87 for the alignment).
void Execution::atomic() {
  const wire::AtomicEth a = pkt.atomic_eth();
  if (a.va() % 8 != 0) {
    fail(NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    return;
  }
  MemorySpan word;
  if (!(r.access & kAccessRemoteAtomic) ||
      mrs.remote(a.rkey(), pd(), r.qpn, a.va(), 8, kAccessRemoteAtomic, &word) != MrCheck::kOk ||
      !execute_atomic(pkt.opcode(), a, word, &v.atomic_orig))
    fail(NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
}

}  // namespace

void HcaEngine::serve_xrc_request(const uint8_t* data, size_t len) noexcept {
  if (!contexts_ || len < sizeof(XrcRequest)) return;
  XrcRequest r;
  std::memcpy(&r, data, sizeof(r));
  if (sizeof(r) + r.packet_len != len) return;
  XrcVerdict v;
  v.header.kind = MessageKind::kXrcVerdict;
  v.header.size = sizeof(v);
  v.header.from = context_id_;
  v.seq = r.seq;
  v.qpn = r.qpn;
  v.srqn = r.srqn;
  wire::PacketView pkt;
  SharedReceiveQueue* srq = srqs_.find(r.srqn);
  if (wire::parse_packet(data + sizeof(r), r.packet_len, &pkt, false) != wire::ParseError::kOk ||
      !srq || srq->xrc().xrcd != r.xrcd) {
    // No SRQ of that number here any more, or one of another XRC domain.
    v.outcome = XrcOutcome::kFailed;
    v.nak = static_cast<uint8_t>(NakCode::kInvalidRequest);
    v.status = WcStatus::kRemInvReqErr;
  } else {
    Execution e{r, pkt, *srq, mrs_, v};
    const uint32_t flags = pkt.info->flags;
    if (flags & wire::kIsSend) {
      e.send();
    } else if (flags & wire::kIsWrite) {
      e.write();
    } else if (flags & wire::kIsAtomic) {
      e.atomic();
    } else if (flags & wire::kIsReadRequest) {
      // RDMA READ (IBA 9.7.5.2.2): the whole range is checked first; the
      // responses go straight to the requester, from the receive QP's port
      // and with its PSNs and MSN, before the verdict lets the QP go on.
      const wire::Reth reth = pkt.reth();
      MemorySpan src;
      if (!(r.access & kAccessRemoteRead) ||
          (reth.dma_len() &&
           mrs_.remote(reth.rkey(), srq->xrc().pd, r.qpn, reth.va(), reth.dma_len(),
                       kAccessRemoteRead, &src) != MrCheck::kOk)) {
        e.fail(NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      } else {
        const PortAddress me = ports_->port(r.path.port_num);
        PortCounters& c = counters_->at(r.path.port_num);
        const uint8_t ack = wire::make_ack_syndrome(wire::kAethCreditInvalid);
        uint8_t buf[wire::kMaxPacket];
        uint8_t bounce[wire::kMaxPayload];
        // Memory that fails on the first response is refused with a NAK in
        // its place; midway, it ends the responses, and the requester's
        // retries find it refused.
        bool answered = false;
        if (!for_each_read_response(
                src, reth.dma_len(), r.mtu, r.response_psn, bounce,
                [&](uint8_t op, uint32_t psn, const uint8_t* bytes, uint32_t n) {
                  const size_t total = write_response(buf, r.path, me, op, psn, ack, bytes, n, 0,
                                                      sink_->wants_crcs());
                  if (!total) return false;
                  const TxResult sent = sink_->transmit(r.path.av.dlid, r.path.dest_qp, buf, total);
                  c.xmit_packets++;
                  c.xmit_bytes += total;
                  if (sent == TxResult::kNoRoute) c.xmit_discards++;
                  answered = true;
                  return true;
                }) &&
            !answered)
          e.fail(NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
      }
    } else {
      e.fail(NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    }
  }
  for (int i = 0; i < kVerdictAttempts; ++i) {
    if (contexts_->to_context(r.header.from, reinterpret_cast<const uint8_t*>(&v), sizeof(v)) !=
        Delivery::kDropped)
      return;
    std::this_thread::sleep_for(kVerdictRetryPause);
  }
}

// A WQE that a receive QP took from one of this context's SRQs and completes
// itself: its message broke off, or the QP went to the error state.
void HcaEngine::serve_xrc_completion(const uint8_t* data, size_t len) noexcept {
  if (len != sizeof(XrcCompletion)) return;
  XrcCompletion m;
  std::memcpy(&m, data, sizeof(m));
  SharedReceiveQueue* srq = srqs_.find(m.srqn);
  if (!srq || srq->xrc().xrcd != m.xrcd || !srq->xrc().cq) return;
  srq->xrc().cq->push(m.completion, m.solicited);  // an overrun raises the CQ's own error
}

}  // namespace ibemu::engine
