// The requester (IBA 9.7.4.1): turns send WQEs into request packets of at most
// the path MTU, assigns PSNs, asks for ACKs, and resends from a PSN when the
// completer rewinds it.
#include <algorithm>
#include <cstring>

#include "transport/engine/qp.h"
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

// UC and XRC use RC's opcode layout with their own transport bits (IBA 9.2.1,
// table 35; annex A14).
uint8_t Qp::for_transport(uint8_t rc_opcode) const noexcept {
  return static_cast<uint8_t>(rc_opcode | static_cast<uint8_t>(transport()) << 5);
}

wire::Transport Qp::transport() const noexcept {
  switch (init_.type) {
    case QpType::kUc:
      return wire::Transport::kUc;
    case QpType::kUd:
      return wire::Transport::kUd;
    case QpType::kXrcSend:
    case QpType::kXrcRecv:
      return wire::Transport::kXrc;
    case QpType::kDci:
    case QpType::kDct:
      return wire::Transport::kDc;
    default:
      return wire::Transport::kRc;
  }
}

// LRH and, for a global address vector, GRH toward the connected peer
// (IBA 7.7, 8.3): both engines' packets leave through here.
void Qp::fill_address_headers(wire::PacketHeaders& h, const AddressVector& av) const noexcept {
  const PortAddress me = env_.ports->port(attr_.port_num);
  engine::fill_address_headers(h, av, me);
  h.bth.set_pkey(me.pkey(attr_.pkey_index));  // the QP's partition (IBA 10.9.2)
}

size_t Qp::build_headers(uint8_t* buf, uint8_t opcode, uint32_t psn, bool ack_req,
                         bool solicited) noexcept {
  wire::PacketHeaders h;
  fill_address_headers(h, peer_.av);
  h.bth.set_opcode(opcode);
  h.bth.set_se(solicited);
  h.bth.set_dest_qp(peer_.qpn);
  h.bth.set_ack_req(ack_req);
  h.bth.set_psn(psn);
  SendWqe* w = sq_.empty() || req_.cursor >= sq_.tail() ? nullptr : &sq_.at(req_.cursor);
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
  if (init_.type == QpType::kDci) dci_fill_dceth(h.dceth, psn);
  return wire::write_headers(buf, h);
}

void Qp::emit(uint8_t* buf, size_t header_len, size_t payload_len) noexcept {
  size_t len = wire::finalize_packet(buf, header_len, payload_len, env_.sink->wants_crcs());
  transmit(peer_.av.dlid, peer_.qpn, buf, len);
}

bool Qp::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) noexcept {
  const TxResult result = env_.sink->transmit(dlid, dest_qp, packet, len);
  if (result == TxResult::kQueued && !link_busy_.exchange(true, std::memory_order_relaxed) &&
      env_.link_waiters)
    env_.link_waiters->add(init_.qpn);
  if (env_.counters) {
    PortCounters& c = env_.counters->at(attr_.port_num);
    c.xmit_packets++;
    c.xmit_bytes += len;
    if (result == TxResult::kNoRoute) c.xmit_discards++;
  }
  return result == TxResult::kSent || result == TxResult::kQueued;
}

void Qp::resume_sending() noexcept {
  if (!link_busy_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(mutex_);
  link_busy_.store(false, std::memory_order_relaxed);
  responder_send_queued();
  requester_pump();
}

// A READ or atomic is one request packet; its PSNs run on through the
// response packets it asks for (IBA 9.7.4.1.3), so next_psn jumps past them.
// Resent after a partial response, it asks only for what is missing: the
// cursor offset says how much arrived.
void Qp::requester_send_rd_atomic(SendWqe& wqe) noexcept {
  const uint32_t mtu = mtu_bytes();
  const bool read = wqe.opcode == WrOpcode::kRdmaRead;
  if (!wqe.started) {
    wqe.started = true;
    wqe.first_psn = req_.next_psn;
    const uint32_t npkts = read && wqe.length ? (wqe.length + mtu - 1) / mtu : 1;
    wqe.last_psn = wire::psn_add(wqe.first_psn, npkts - 1);
  }
  const uint32_t psn = req_.next_psn;
  const uint8_t opcode = for_transport(
      static_cast<uint8_t>(read                                       ? wire::Opcode::kRcReadRequest
                           : wqe.opcode == WrOpcode::kAtomicCmpAndSwp ? wire::Opcode::kRcCompareSwap
                                                                      : wire::Opcode::kRcFetchAdd));
  size_t hlen = build_headers(tx_buf_, opcode, psn, false, false);
  emit(tx_buf_, hlen, 0);
  requester_advance_to(wire::psn_add(wqe.last_psn, 1));
  req_.cursor_offset = wqe.length;
}

// IBA 9.7.4.1.3 / C9-49: at most max_rd_atomic READs and atomics may wait for
// their responses; a fenced WQE (IBV_SEND_FENCE) waits until none does.
bool Qp::requester_may_start(const SendWqe& wqe) const noexcept {
  const bool rd_atomic = expects_response(wqe.opcode);
  if (!rd_atomic && !(wqe.flags & kSendFence)) return true;
  uint32_t outstanding = 0;
  for (uint64_t pos = sq_.head(); pos < req_.cursor; ++pos)
    outstanding += expects_response(sq_.at(pos).opcode);
  if (wqe.flags & kSendFence && outstanding) return false;
  return !rd_atomic || outstanding < attr_.max_rd_atomic;
}

// Sends the next packet of `wqe` at the requester cursor. Returns true when
// that was the WQE's last packet.
bool Qp::requester_send_packet(SendWqe& wqe) noexcept {
  if (expects_response(wqe.opcode)) {
    requester_send_rd_atomic(wqe);
    return true;
  }
  const uint32_t mtu = mtu_bytes();
  if (!wqe.started) {
    wqe.started = true;
    wqe.first_psn = req_.next_psn;
    uint32_t npkts = wqe.length == 0 ? 1 : (wqe.length + mtu - 1) / mtu;
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
  const bool fills_window = requester_in_flight() + 1 >= req_.window;
  const bool ack_req = reliable() && (last || index % kAckReqInterval == 0 || fills_window);
  const bool solicited = last && (wqe.flags & kSendSolicited);
  uint8_t opcode = for_transport(pick_opcode(wqe.opcode, first, last));
  size_t hlen = build_headers(tx_buf_, opcode, psn, ack_req, solicited);
  uint8_t* data = tx_buf_ + hlen;
  if (wqe.is_inline) {
    std::memcpy(data, wqe.inline_data + off, payload);
  } else if (copy_from_sges(*env_.mrs, init_.pd, wqe.sge, wqe.num_sge, off, data, payload) !=
             MrCheck::kOk) {
    // IBA 10.7.2.2: a bad lkey on the send side is a local protection error.
    requester_fail_wqe(WcStatus::kLocProtErr);
    return true;
  }
  emit(tx_buf_, hlen, payload);
  requester_advance_to(wire::psn_add(psn, 1));
  req_.cursor_offset = off + payload;
  return last;
}

// The WQE at the cursor failed before anything of it left. The QP goes to the
// error state, so the WQEs before it, sent but not yet acknowledged, are
// flushed ahead of it (completions stay in order) and the error lands on the
// WQE that caused it.
void Qp::requester_fail_wqe(WcStatus status) noexcept {
  while (sq_.head() < req_.cursor) {
    complete_send(sq_.at(sq_.head()), WcStatus::kWrFlushErr);
    sq_.pop();
  }
  completer_error(status);
}

// A bind or local invalidate takes effect when the requester reaches it, in
// send-queue order (a fence makes it wait for earlier READs and atomics). It
// sends nothing; its PSN range is empty and sits just before the next packet,
// so it completes once every WQE before it has (IBA 10.6.7.2). A WQE resent
// after a rewind is not executed twice.
void Qp::requester_execute_local(SendWqe& wqe) noexcept {
  if (!wqe.started) {
    const MrCheck result = wqe.opcode == WrOpcode::kBindMw
                               ? env_.mrs->bind_window(wqe.bind, init_.pd, init_.qpn)
                               : env_.mrs->invalidate_window(wqe.imm_or_rkey, init_.pd, 0);
    if (result != MrCheck::kOk) {
      requester_fail_wqe(wqe.opcode == WrOpcode::kBindMw ? WcStatus::kMwBindErr
                                                         : WcStatus::kLocQpOpErr);
      return;
    }
    wqe.started = true;
    wqe.first_psn = wqe.last_psn = wire::psn_add(req_.next_psn, wire::kPsnMask);
  }
  ++req_.cursor;
  req_.cursor_offset = 0;
  completer_retire_local_operations();
}

void Qp::requester_pump() noexcept {
  // Every path that completes send WQEs ends here: the place to see an SQD
  // drain finish, whichever way the pump returns.
  struct DrainCheck {
    Qp* qp;
    ~DrainCheck() { qp->check_sq_drained(); }
  } drain_check{this};
  if (!sq_can_send() || comp_.rnr_wait_until) return;
  bool sent = false;
  while (req_.cursor < sq_.tail() && (!reliable() || requester_in_flight() < req_.window) &&
         !link_busy_.load(std::memory_order_relaxed)) {
    SendWqe& wqe = sq_.at(req_.cursor);
    if (attr_.qp_state == QpState::kErr) return;
    // IBA 10.3.1: in SQD the messages already begun are finished (and resent
    // if need be), no new one starts until the QP is back in RTS.
    if (attr_.qp_state == QpState::kSqd && !wqe.started) break;
    if (req_.cursor_offset == 0 && !requester_may_start(wqe)) break;
    if (init_.type == QpType::kDci && !wqe.started && !is_local_operation(wqe.opcode) &&
        !dci_select_target(wqe))
      break;
    if (is_local_operation(wqe.opcode)) {
      requester_execute_local(wqe);
      continue;
    }
    if (init_.type == QpType::kUd) {
      datagram_send(wqe);
      continue;
    }
    bool done = requester_send_packet(wqe);
    if (attr_.qp_state == QpState::kErr) return;
    sent = true;
    if (done) {
      ++req_.cursor;
      req_.cursor_offset = 0;
      // UC has no responses (IBA 9.8): a send WQE is complete as soon as its
      // last request packet is on the wire. Every earlier one already is, so
      // it is the head of the send queue.
      if (init_.type == QpType::kUc) {
        complete_send(sq_.at(sq_.head()), WcStatus::kSuccess);
        sq_.pop();
      }
    }
  }
  if (sent && reliable()) completer_packets_left();
}

// Packets between the oldest unacknowledged PSN and the cursor: the go-back-N
// window. Counted from the cursor, not from the newest PSN sent, so a
// retransmission may always resend a whole window.
uint32_t Qp::requester_in_flight() const noexcept {
  return static_cast<uint32_t>(wire::psn_diff(req_.next_psn, comp_.acked_psn) - 1);
}

void Qp::requester_window_grow(uint32_t acknowledged) noexcept {
  if (req_.window >= Requester::kMaxWindow) return;
  req_.window_growth += acknowledged;
  while (req_.window_growth >= req_.window && req_.window < Requester::kMaxWindow) {
    req_.window_growth -= req_.window;
    ++req_.window;
  }
}

void Qp::requester_window_shrink() noexcept {
  req_.window = std::max(Requester::kMinWindow, req_.window / 2);
  req_.window_growth = 0;
}

void Qp::requester_advance_to(uint32_t psn) noexcept {
  req_.next_psn = psn;
  if (wire::psn_diff(psn, req_.sent_end_psn) > 0) req_.sent_end_psn = psn;
}

// Moves the cursor to the packet with `psn`: back, to resend from there, or
// forward past packets sent before a rewind that an ACK has since covered.
// The completer retired WQEs the cursor had not passed (their responses
// arrived while the requester was rewound): it goes on after them.
void Qp::requester_skip_retired() noexcept {
  if (sq_.head() <= req_.cursor) return;
  req_.cursor = sq_.head();
  req_.cursor_offset = 0;
}

void Qp::requester_resume_at(uint32_t psn) noexcept {
  for (uint64_t pos = sq_.head(); pos < sq_.tail(); ++pos) {
    SendWqe& w = sq_.at(pos);
    if (!w.started || wire::psn_diff(psn, w.first_psn) < 0) break;
    if (wire::psn_diff(psn, w.last_psn) <= 0) {
      req_.cursor = pos;
      req_.cursor_offset = static_cast<uint32_t>(wire::psn_diff(psn, w.first_psn)) * mtu_bytes();
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

}  // namespace ibemu::engine
