// The completer (IBA 9.7.5.1, 9.7.6): matches ACKs and NAKs to outstanding
// send WQEs, completes them in order, and drives retransmission: after a PSN
// sequence NAK, after an RNR NAK once its timer ran out, and when no progress
// came for the local ACK timeout (retry_cnt / rnr_retry bound both). It
// rewinds the requester by asking it (Requester::resume_at), never by
// writing its cursor.
#include <cstring>

#include "transport/engine/completer.h"

#include "transport/engine/requester.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

Completer::Completer(QpCore& qp, Requester& requester) : qp_(qp), requester_(requester) {}

void Completer::start_at(uint32_t sq_psn) noexcept {
  comp_.acked_psn = wire::psn_add(sq_psn, wire::kPsnMask);  // sq_psn - 1
}

void Completer::restore_retries() noexcept {
  comp_.retries_left = qp_.attr.retry_cnt;
  comp_.rnr_retries_left = qp_.attr.rnr_retry;
}

void Completer::receive(const wire::PacketView& pkt) noexcept {
  if (!qp_.reliable() || !qp_.sq_can_send()) return;
  if (pkt.lrh().slid() != qp_.peer.av.dlid) return;
  // A response must be for a PSN sent and not yet acknowledged; anything else
  // is a duplicate or a ghost and is dropped (IBA 9.7.5.1.1). PSNs sent before
  // a rewind count: their packets may still be on the wire.
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, requester_.sent_end_psn()) >= 0) return;
  const uint32_t flags = pkt.info->flags;
  if ((flags & wire::kIsReadResponse) || (flags & wire::kIsAtomicAck)) {
    // A NAK may come in the AETH of a first/only READ response too.
    if ((flags & wire::kHasAeth) && wire::aeth_type(pkt.aeth().syndrome()) != wire::AckType::kAck) {
      nak(psn, wire::aeth_type(pkt.aeth().syndrome()), wire::aeth_value(pkt.aeth().syndrome()));
      return;
    }
    if (flags & wire::kIsReadResponse)
      read_response(pkt);
    else
      atomic_ack(pkt);
    return;
  }
  if (!(flags & wire::kIsAck)) return;
  const wire::Aeth aeth = pkt.aeth();
  const wire::AckType type = wire::aeth_type(aeth.syndrome());
  if (type == wire::AckType::kAck) {
    if (wire::psn_diff(psn, comp_.acked_psn) > 0) ack(psn);
    return;
  }
  // A NAK names the PSN the responder expects; one at or before the last
  // acknowledged PSN was overtaken by later ACKs (a stale NAK).
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;
  nak(psn, type, wire::aeth_value(aeth.syndrome()));
}

// Everything up to `psn` is acknowledged now.
void Completer::acknowledged(uint32_t psn) noexcept {
  const uint32_t acked_before = comp_.acked_psn;
  comp_.acked_psn = psn;
  progress(static_cast<uint32_t>(wire::psn_diff(psn, acked_before)));
  // Packets sent before a rewind arrived after all (the requester went back
  // to ask for them again): the resend starts after them, else the cursor
  // would stay behind what is acknowledged and the window never open.
  if (wire::psn_diff(psn, requester_.next_psn()) >= 0) requester_.resume_at(wire::psn_add(psn, 1));
}

// Forward progress restores the retry budgets (IBA 9.7.6.1.3) and restarts
// the local ACK timer.
void Completer::progress(uint32_t acknowledged) noexcept {
  requester_.window_grow(acknowledged);
  comp_.last_progress = comp_.heard_at = qp_.env.clock->now();
  comp_.retries_left = qp_.attr.retry_cnt;
  comp_.rnr_retries_left = qp_.attr.rnr_retry;
  comp_.resending_after_nak = false;
}

// Everything up to and including `psn` arrived: complete the WQEs it covers.
void Completer::ack(uint32_t psn) noexcept {
  const uint32_t acked_before = comp_.acked_psn;
  acknowledged(psn);
  while (!qp_.sq.empty() &&
         qp_.sq.head() < requester_.cursor() + (requester_.inside_wqe() ? 1 : 0)) {
    SendWqe& w = qp_.sq.at(qp_.sq.head());
    if (!w.started || wire::psn_diff(w.last_psn, psn) > 0) break;
    if (expects_response(w.opcode)) {
      // An ACK beyond a READ or atomic whose response did not all arrive:
      // the responses were lost (IBA 9.7.5.1.4, implied NAK). Ask again for
      // what is missing.
      uint32_t resume = wire::psn_diff(acked_before, w.first_psn) >= 0
                            ? wire::psn_add(acked_before, 1)
                            : w.first_psn;
      comp_.acked_psn = wire::psn_add(resume, wire::kPsnMask);
      requester_.resume_at(resume);
      requester_.pump();
      return;
    }
    qp_.complete_send(w, WcStatus::kSuccess);
    qp_.sq.pop();
  }
  requester_.skip_retired();
  if (qp_.sq.empty() || !qp_.sq.at(qp_.sq.head()).started)
    comp_.last_progress = 0;  // nothing in flight
  requester_.pump();
}

void Completer::nak(uint32_t psn, wire::AckType type, uint8_t value) noexcept {
  // A NAK for PSN p implicitly acknowledges everything before p (C9-?).
  uint32_t before = wire::psn_add(psn, wire::kPsnMask);
  if (wire::psn_diff(before, comp_.acked_psn) > 0) ack(before);
  if (type == wire::AckType::kRnrNak) {
    if (qp_.attr.rnr_retry != kInfiniteRnrRetry) {
      if (comp_.rnr_retries_left == 0) {
        error(WcStatus::kRnrRetryExcErr);
        return;
      }
      --comp_.rnr_retries_left;
    }
    comp_.rnr_wait_until = qp_.env.clock->now() + rnr_timer_ns(value);
    comp_.rnr_psn = psn;
    return;
  }
  if (type != wire::AckType::kNak) return;
  switch (static_cast<wire::NakCode>(value)) {
    case wire::NakCode::kPsnSequenceError:
      // Go back to the PSN the responder expects (IBA 9.7.5.2.1). This is a
      // retry: it draws on retry_cnt like a timeout does. The responder NAKs
      // a gap once (C9-98), so a second NAK for the PSN already being resent,
      // with no progress since, is a copy from the wire and changes nothing.
      if (comp_.resending_after_nak && comp_.nak_psn == psn) return;
      if (!spend_retry(qp_.env.clock->now())) {
        error(WcStatus::kRetryExcErr);
        return;
      }
      comp_.resending_after_nak = true;
      comp_.nak_psn = psn;
      requester_.window_shrink();
      requester_.resume_at(psn);
      requester_.pump();
      return;
    case wire::NakCode::kInvalidRequest:
      error(WcStatus::kRemInvReqErr);
      return;
    case wire::NakCode::kRemoteAccessError:
      error(WcStatus::kRemAccessErr);
      return;
    case wire::NakCode::kRemoteOperationalError:
      error(WcStatus::kRemOpErr);
      return;
    default:
      error(WcStatus::kBadRespErr);
      return;
  }
}

// The oldest outstanding WQE fails with `status`; the QP enters the error
// state and every other WQE is flushed (IBA 10.7.2.2, 11.6.2).
void Completer::error(WcStatus status) noexcept {
  if (!qp_.sq.empty()) {
    qp_.complete_send(qp_.sq.at(qp_.sq.head()), status);
    qp_.sq.pop();
  }
  comp_.rnr_wait_until = 0;
  comp_.last_progress = 0;
  // The failure is reported by the completion; no async event (that is for
  // errors a completion cannot carry, IBA 11.6.3).
  qp_.enter_error();
}

// Binds and local invalidates that the requester executed complete as soon as
// every WQE before them has: they wait for nothing from the peer.
void Completer::retire_local_operations() noexcept {
  while (!qp_.sq.empty() && qp_.sq.head() < requester_.cursor()) {
    SendWqe& w = qp_.sq.at(qp_.sq.head());
    if (!is_local_operation(w.opcode) || !w.started) return;
    qp_.complete_send(w, WcStatus::kSuccess);
    qp_.sq.pop();
  }
}

Nanos Completer::on_timer(Nanos now) noexcept {
  if (!qp_.reliable() || !qp_.sq_can_send()) return 0;
  if (comp_.rnr_wait_until) {
    if (now < comp_.rnr_wait_until) return comp_.rnr_wait_until;
    comp_.rnr_wait_until = 0;
    requester_.resume_at(comp_.rnr_psn);
    comp_.last_progress = now;
    requester_.pump();
  }
  if (!comp_.last_progress) return 0;
  Nanos timeout = local_ack_timeout_ns(qp_.attr.timeout);
  if (!timeout) return 0;
  if (qp_.link_busy.load(std::memory_order_relaxed)) {
    // A packet of this QP waits for room on the link: it has not left the
    // HCA, and a hardware transport timer starts when a packet is sent.
    comp_.last_progress = now;
    return now + timeout;
  }
  Nanos deadline = comp_.last_progress + timeout;
  if (now < deadline) return deadline;
  // Local ACK timeout (IBA 9.7.6.1.3): resend everything not acknowledged.
  if (!spend_retry(now)) {
    error(WcStatus::kRetryExcErr);
    return 0;
  }
  requester_.window_shrink();
  requester_.resume_at(wire::psn_add(comp_.acked_psn, 1));
  comp_.last_progress = now;
  requester_.pump();
  return now + timeout;
}

// One retry (a timeout or a PSN sequence NAK) draws on retry_cnt. Out of
// retries, the QP still resends while no progress has come for less than the
// host's stalls may last (QpEnv::stall_tolerance): a stall spends the budget
// on timeouts the link did not cause, and what it held up may also have been
// lost (a link taken for down). False: the retries are exceeded.
bool Completer::spend_retry(Nanos now) noexcept {
  if (comp_.retries_left > 0) {
    --comp_.retries_left;
    return true;
  }
  return now - comp_.heard_at < qp_.env.stall_tolerance;
}

// Finds the started WQE whose PSN range holds `psn` (nullptr if none).
static SendWqe* wqe_for_psn(WorkRing<SendWqe>& sq, uint64_t end, uint32_t psn) {
  for (uint64_t pos = sq.head(); pos < end && pos < sq.tail(); ++pos) {
    SendWqe& w = sq.at(pos);
    if (!w.started) return nullptr;
    if (wire::psn_diff(psn, w.first_psn) >= 0 && wire::psn_diff(psn, w.last_psn) <= 0) return &w;
  }
  return nullptr;
}

// A READ response (IBA 9.7.5.1.2): its data lands at the PSN's offset in the
// WQE's local buffers. The first response also acknowledges every earlier
// WQE; responses must come in order, a gap waits for the retry.
void Completer::read_response(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;  // duplicate
  SendWqe* w = wqe_for_psn(qp_.sq, requester_.cursor() + 1, psn);
  if (!w || w->opcode != WrOpcode::kRdmaRead) return;  // ghost
  if (psn == w->first_psn) {
    const uint32_t before = wire::psn_add(psn, wire::kPsnMask);
    if (wire::psn_diff(before, comp_.acked_psn) > 0) ack(before);
    if (qp_.attr.qp_state == QpState::kErr) return;
  } else if (psn != wire::psn_add(comp_.acked_psn, 1)) {
    return;  // a response went missing: the timeout asks again from there
  }
  SendWqe& wqe = qp_.sq.at(qp_.sq.head());
  if (&wqe != w) return;
  const uint32_t offset =
      static_cast<uint32_t>(wire::psn_diff(psn, wqe.first_psn)) * qp_.mtu_bytes();
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (uint64_t(offset) + n > wqe.length) {
    error(WcStatus::kBadRespErr);
    return;
  }
  if (n && copy_to_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, offset, pkt.payload(),
                        n) != MrCheck::kOk) {
    error(WcStatus::kLocProtErr);
    return;
  }
  acknowledged(psn);
  if (psn == wqe.last_psn) {
    qp_.complete_send(wqe, WcStatus::kSuccess, wqe.length);
    qp_.sq.pop();
    retire_local_operations();
    requester_.skip_retired();
    if (qp_.sq.empty() || !qp_.sq.at(qp_.sq.head()).started) comp_.last_progress = 0;
  }
  requester_.pump();
}

// An atomic's acknowledgement (IBA 9.4.6): the original remote value goes to
// the WQE's local buffer, in host order.
void Completer::atomic_ack(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;
  SendWqe* w = wqe_for_psn(qp_.sq, requester_.cursor() + 1, psn);
  if (!w || !expects_response(w->opcode) || w->opcode == WrOpcode::kRdmaRead) return;
  const uint32_t before = wire::psn_add(psn, wire::kPsnMask);
  if (wire::psn_diff(before, comp_.acked_psn) > 0) ack(before);
  if (qp_.attr.qp_state == QpState::kErr || qp_.sq.empty() || &qp_.sq.at(qp_.sq.head()) != w)
    return;
  uint64_t orig = pkt.atomic_ack_eth().orig_data();
  uint8_t bytes[8];
  std::memcpy(bytes, &orig, sizeof(bytes));
  if (copy_to_sges(*qp_.env.mrs, qp_.init.pd, w->sge, w->num_sge, 0, bytes, 8) != MrCheck::kOk) {
    error(WcStatus::kLocProtErr);
    return;
  }
  acknowledged(psn);
  qp_.complete_send(*w, WcStatus::kSuccess, 8);
  qp_.sq.pop();
  retire_local_operations();
  requester_.skip_retired();
  comp_.last_progress =
      qp_.sq.empty() || !qp_.sq.at(qp_.sq.head()).started ? 0 : qp_.env.clock->now();
  requester_.pump();
}

// The requester sent packets: with nothing in flight before, the local ACK
// timer starts now.
void Completer::packets_left() noexcept {
  if (comp_.last_progress == 0) comp_.last_progress = comp_.heard_at = qp_.env.clock->now();
}

}  // namespace ibemu::engine
