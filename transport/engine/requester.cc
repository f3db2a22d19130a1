// The requester (IBA 9.7.4.1): turns send WQEs into request packets of at most
// the path MTU, assigns PSNs, asks for ACKs, and resends from a PSN when the
// completer rewinds it (resume_at). Its cursor and PSNs are its own; the
// completer reads them through requester.h and the shared state is QpCore.
#include <algorithm>
#include <cstring>

#include "transport/engine/requester.h"

#include "transport/engine/completer.h"
#include "transport/engine/datagram.h"
#include "transport/engine/response_path.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

namespace {

using wire::Opcode;

// Ask for an ACK at least this often inside long messages (IBA 9.7.5.1.2
// allows coalescing; the requester decides with AckReq).
constexpr uint32_t kAckReqInterval = 16;

uint8_t pick_opcode(WrOpcode op, bool first, bool last) {
  auto o = [](Opcode x) { return static_cast<uint8_t>(x); };
  switch (op) {
    case WrOpcode::kSend:
      return first ? (last ? o(Opcode::kRcSendOnly) : o(Opcode::kRcSendFirst))
                   : (last ? o(Opcode::kRcSendLast) : o(Opcode::kRcSendMiddle));
    case WrOpcode::kSendWithImm:
      return first ? (last ? o(Opcode::kRcSendOnlyImm) : o(Opcode::kRcSendFirst))
                   : (last ? o(Opcode::kRcSendLastImm) : o(Opcode::kRcSendMiddle));
    case WrOpcode::kSendWithInv:
      return first ? (last ? o(Opcode::kRcSendOnlyInv) : o(Opcode::kRcSendFirst))
                   : (last ? o(Opcode::kRcSendLastInv) : o(Opcode::kRcSendMiddle));
    case WrOpcode::kRdmaWrite:
      return first ? (last ? o(Opcode::kRcWriteOnly) : o(Opcode::kRcWriteFirst))
                   : (last ? o(Opcode::kRcWriteLast) : o(Opcode::kRcWriteMiddle));
    case WrOpcode::kRdmaWriteWithImm:
      return first ? (last ? o(Opcode::kRcWriteOnlyImm) : o(Opcode::kRcWriteFirst))
                   : (last ? o(Opcode::kRcWriteLastImm) : o(Opcode::kRcWriteMiddle));
    default:
      return o(Opcode::kRcSendOnly);
  }
}

}  // namespace

Requester::Requester(QpCore& qp, Completer& completer) : qp_(qp), completer_(completer) {
  if (qp.init.type == QpType::kDci) dci_.emplace(qp);
}

void Requester::reset() noexcept {
  req_ = State{};
  if (dci_) dci_->disconnect();
}

void Requester::start_at(uint32_t psn) noexcept {
  req_.next_psn = psn;
  req_.sent_end_psn = psn;
}

void Requester::flush() noexcept {
  while (!qp_.sq.empty()) {
    qp_.complete_send(qp_.sq.at(qp_.sq.head()), WcStatus::kWrFlushErr);
    qp_.sq.pop();
  }
  req_.cursor = qp_.sq.head();
  req_.cursor_offset = 0;
}

// IBA 10.3.1.4: in SQD the messages already begun are finished; the send
// queue is drained when none is left outstanding.
bool Requester::drained() const noexcept {
  return (qp_.sq.empty() || !qp_.sq.at(qp_.sq.head()).started) && req_.cursor_offset == 0;
}

// The consumer that asked for it hears once that the drain is over
// (IBV_EVENT_SQ_DRAINED, IBA 11.6.3.2).
void Requester::check_drained() noexcept {
  if (!drained_event_ || qp_.attr.qp_state != QpState::kSqd || !drained()) return;
  drained_event_ = false;
  if (qp_.env.on_event) qp_.env.on_event(qp_.init.qpn, QpEvent::kSqDrained);
}

size_t Requester::build_headers(uint8_t* buf, uint8_t opcode, uint32_t psn, bool ack_req,
                                bool solicited) noexcept {
  wire::PacketHeaders h;
  qp_.fill_address_headers(h, qp_.peer.av);
  h.bth.set_opcode(opcode);
  h.bth.set_se(solicited);
  h.bth.set_dest_qp(qp_.peer.qpn);
  h.bth.set_ack_req(ack_req);
  h.bth.set_psn(psn);
  SendWqe* w = qp_.sq.empty() || req_.cursor >= qp_.sq.tail() ? nullptr : &qp_.sq.at(req_.cursor);
  if (w) {
    h.reth.set_va(w->remote_addr + req_.cursor_offset);
    h.reth.set_rkey(w->rkey);
    h.reth.set_dma_len(w->length - req_.cursor_offset);
    h.immdt.set_imm(w->imm_or_rkey);
    h.ieth.set_rkey(w->imm_or_rkey);
    // IBA 9.4.5: CmpSwap carries swap and compare; FetchAdd the addend in
    // SwapAdd (its Compare field is unused).
    h.atomic_eth.set_va(w->remote_addr);
    h.atomic_eth.set_rkey(w->rkey);
    h.atomic_eth.set_swap_add(w->opcode == WrOpcode::kAtomicCmpAndSwp ? w->swap : w->compare_add);
    h.atomic_eth.set_compare(w->opcode == WrOpcode::kAtomicCmpAndSwp ? w->compare_add : 0);
    h.xrceth.set_srqn(w->remote_srqn);
  }
  if (dci_) dci_->fill_dceth(h.dceth, psn);
  return wire::write_headers(buf, h);
}

// A READ or atomic is one request packet; its PSNs run on through the
// response packets it asks for (IBA 9.7.4.1.3), so next_psn jumps past them.
// Resent after a partial response, it asks only for what is missing: the
// cursor offset says how much arrived.
void Requester::send_rd_atomic(SendWqe& wqe) noexcept {
  const uint32_t mtu = qp_.mtu_bytes();
  const bool read = wqe.opcode == WrOpcode::kRdmaRead;
  if (!wqe.started) {
    wqe.started = true;
    wqe.first_psn = req_.next_psn;
    const uint32_t npkts = read ? packets_for(wqe.length, mtu) : 1;
    wqe.last_psn = wire::psn_add(wqe.first_psn, npkts - 1);
  }
  const uint32_t psn = req_.next_psn;
  const uint8_t opcode = qp_.for_transport(
      static_cast<uint8_t>(read                                       ? wire::Opcode::kRcReadRequest
                           : wqe.opcode == WrOpcode::kAtomicCmpAndSwp ? wire::Opcode::kRcCompareSwap
                                                                      : wire::Opcode::kRcFetchAdd));
  size_t hlen = build_headers(qp_.tx_buf, opcode, psn, false, false);
  qp_.emit(qp_.tx_buf, hlen, 0);
  advance_to(wire::psn_add(wqe.last_psn, 1));
  req_.cursor_offset = wqe.length;
}

// IBA 9.7.4.1.3 / C9-49: at most max_rd_atomic READs and atomics may wait for
// their responses; a fenced WQE (IBV_SEND_FENCE) waits until none does.
bool Requester::may_start(const SendWqe& wqe) const noexcept {
  const bool rd_atomic = expects_response(wqe.opcode);
  if (!rd_atomic && !(wqe.flags & kSendFence)) return true;
  uint32_t outstanding = 0;
  for (uint64_t pos = qp_.sq.head(); pos < req_.cursor; ++pos)
    outstanding += expects_response(qp_.sq.at(pos).opcode);
  if (wqe.flags & kSendFence && outstanding) return false;
  return !rd_atomic || outstanding < qp_.attr.max_rd_atomic;
}

// Sends the next packet of `wqe` at the requester cursor. Returns true when
// that was the WQE's last packet.
bool Requester::send_packet(SendWqe& wqe) noexcept {
  if (expects_response(wqe.opcode)) {
    send_rd_atomic(wqe);
    return true;
  }
  const uint32_t mtu = qp_.mtu_bytes();
  if (!wqe.started) {
    wqe.started = true;
    wqe.first_psn = req_.next_psn;
    uint32_t npkts = packets_for(wqe.length, mtu);
    wqe.last_psn = wire::psn_add(wqe.first_psn, npkts - 1);
  }
  const uint32_t off = req_.cursor_offset;
  const uint32_t payload = std::min(mtu, wqe.length - off);
  const bool first = off == 0;
  const bool last = off + payload >= wqe.length;
  const uint32_t psn = req_.next_psn;
  const uint32_t index = static_cast<uint32_t>(wire::psn_diff(psn, wqe.first_psn));
  // The packet that fills the window asks too: nothing more goes out until
  // an ACK comes, and a responder may hold back ACKs for packets that do not
  // ask (it coalesces).
  const bool fills_window = in_flight() + 1 >= req_.window;
  const bool ack_req = qp_.reliable() && (last || index % kAckReqInterval == 0 || fills_window);
  const bool solicited = last && (wqe.flags & kSendSolicited);
  uint8_t opcode = qp_.for_transport(pick_opcode(wqe.opcode, first, last));
  size_t hlen = build_headers(qp_.tx_buf, opcode, psn, ack_req, solicited);
  uint8_t* data = qp_.tx_buf + hlen;
  if (wqe.is_inline) {
    std::memcpy(data, wqe.inline_data + off, payload);
  } else if (copy_from_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, off, data, payload) !=
             MrCheck::kOk) {
    // IBA 10.7.2.2: a bad lkey on the send side is a local protection error.
    fail_wqe(WcStatus::kLocProtErr);
    return true;
  }
  qp_.emit(qp_.tx_buf, hlen, payload);
  advance_to(wire::psn_add(psn, 1));
  req_.cursor_offset = off + payload;
  return last;
}

// The WQE at the cursor failed before anything of it left. The QP goes to the
// error state, so the WQEs before it, sent but not yet acknowledged, are
// flushed ahead of it (completions stay in order) and the error lands on the
// WQE that caused it.
void Requester::fail_wqe(WcStatus status) noexcept {
  while (qp_.sq.head() < req_.cursor) {
    qp_.complete_send(qp_.sq.at(qp_.sq.head()), WcStatus::kWrFlushErr);
    qp_.sq.pop();
  }
  completer_.error(status);
}

// A bind, fast registration or local invalidate takes effect when the
// requester reaches it, in send-queue order (a fence makes it wait for
// earlier READs and atomics). It sends nothing; its PSN range is empty and
// sits just before the next packet, so it completes once every WQE before it
// has (IBA 10.6.7.2). A WQE resent after a rewind is not executed twice.
void Requester::execute_local(SendWqe& wqe) noexcept {
  if (!wqe.started) {
    if (const WcStatus failed = run_local_operation(wqe); failed != WcStatus::kSuccess) {
      fail_wqe(failed);
      return;
    }
    wqe.started = true;
    wqe.first_psn = wqe.last_psn = wire::psn_add(req_.next_psn, wire::kPsnMask);
  }
  ++req_.cursor;
  req_.cursor_offset = 0;
  completer_.retire_local_operations();
}

// A bind that breaks a rule is a bind error; a registration or invalidation
// that cannot be carried out (a region already valid, a key that names
// nothing invalidatable, another PD) is an invalid operation on the QP.
WcStatus Requester::run_local_operation(const SendWqe& wqe) noexcept {
  MrTable& mrs = *qp_.env.mrs;
  switch (wqe.opcode) {
    case WrOpcode::kBindMw:
      return mrs.bind_window(wqe.bind, qp_.init.pd, qp_.init.qpn) == MrCheck::kOk
                 ? WcStatus::kSuccess
                 : WcStatus::kMwBindErr;
    case WrOpcode::kRegMr:
      return mrs.fast_register(wqe.fast_reg, qp_.init.pd) == MrCheck::kOk ? WcStatus::kSuccess
                                                                          : WcStatus::kLocQpOpErr;
    default:  // kLocalInv
      return mrs.invalidate(wqe.imm_or_rkey, qp_.init.pd, 0) == MrCheck::kOk
                 ? WcStatus::kSuccess
                 : WcStatus::kLocQpOpErr;
  }
}

void Requester::pump() noexcept {
  // Every path that completes send WQEs ends here: the place to see an SQD
  // drain finish, whichever way the pump returns.
  struct DrainCheck {
    Requester* requester;
    ~DrainCheck() { requester->check_drained(); }
  } drain_check{this};
  if (!qp_.sq_can_send() || completer_.rnr_waiting()) return;
  bool sent = false;
  while (req_.cursor < qp_.sq.tail() && (!qp_.reliable() || in_flight() < req_.window) &&
         !qp_.link_busy.load(std::memory_order_relaxed)) {
    SendWqe& wqe = qp_.sq.at(req_.cursor);
    if (qp_.attr.qp_state == QpState::kErr) return;
    // IBA 10.3.1: in SQD the messages already begun are finished (and resent
    // if need be), no new one starts until the QP is back in RTS.
    if (qp_.attr.qp_state == QpState::kSqd && !wqe.started) break;
    if (req_.cursor_offset == 0 && !may_start(wqe)) break;
    if (dci_ && !wqe.started && !is_local_operation(wqe.opcode) &&
        !dci_->select_target(wqe, qp_.sq.head() < req_.cursor, req_.next_psn))
      break;
    if (is_local_operation(wqe.opcode)) {
      execute_local(wqe);
      continue;
    }
    if (datagram_) {
      datagram_->send(wqe);
      continue;
    }
    bool done = send_packet(wqe);
    if (qp_.attr.qp_state == QpState::kErr) return;
    sent = true;
    if (done) {
      ++req_.cursor;
      req_.cursor_offset = 0;
      // UC has no responses (IBA 9.8): a send WQE is complete as soon as its
      // last request packet is on the wire. Every earlier one already is, so
      // it is the head of the send queue.
      if (qp_.init.type == QpType::kUc) {
        qp_.complete_send(qp_.sq.at(qp_.sq.head()), WcStatus::kSuccess);
        qp_.sq.pop();
      }
    }
  }
  if (sent && qp_.reliable()) completer_.packets_left();
}

// Packets between the oldest unacknowledged PSN and the cursor: the go-back-N
// window. Counted from the cursor, not from the newest PSN sent, so a
// retransmission may always resend a whole window.
uint32_t Requester::in_flight() const noexcept {
  return static_cast<uint32_t>(wire::psn_diff(req_.next_psn, completer_.acked_psn()) - 1);
}

void Requester::window_grow(uint32_t acknowledged) noexcept {
  if (req_.window >= kMaxWindow) return;
  req_.window_growth += acknowledged;
  while (req_.window_growth >= req_.window && req_.window < kMaxWindow) {
    req_.window_growth -= req_.window;
    ++req_.window;
  }
}

void Requester::window_shrink() noexcept {
  req_.window = std::max(kMinWindow, req_.window / 2);
  req_.window_growth = 0;
}

void Requester::advance_to(uint32_t psn) noexcept {
  req_.next_psn = psn;
  if (wire::psn_diff(psn, req_.sent_end_psn) > 0) req_.sent_end_psn = psn;
}

// Moves the cursor to the packet with `psn`: back, to resend from there, or
// forward past packets sent before a rewind that an ACK has since covered.
// The completer retired WQEs the cursor had not passed (their responses
// arrived while the requester was rewound): it goes on after them.
void Requester::skip_retired() noexcept {
  if (qp_.sq.head() <= req_.cursor) return;
  req_.cursor = qp_.sq.head();
  req_.cursor_offset = 0;
}

void Requester::resume_at(uint32_t psn) noexcept {
  for (uint64_t pos = qp_.sq.head(); pos < qp_.sq.tail(); ++pos) {
    SendWqe& w = qp_.sq.at(pos);
    if (!w.started || wire::psn_diff(psn, w.first_psn) < 0) break;
    if (wire::psn_diff(psn, w.last_psn) <= 0) {
      req_.cursor = pos;
      req_.cursor_offset =
          static_cast<uint32_t>(wire::psn_diff(psn, w.first_psn)) * qp_.mtu_bytes();
      req_.next_psn = psn;
      return;
    }
    if (psn == wire::psn_add(w.last_psn, 1)) {
      // Just past this WQE: the next one starts there.
      req_.cursor = pos + 1;
      req_.cursor_offset = 0;
      req_.next_psn = psn;
    }
  }
}

void Requester::datagram_sent() noexcept {
  req_.next_psn = wire::psn_add(req_.next_psn, 1);
  ++req_.cursor;
}

}  // namespace ibemu::engine
