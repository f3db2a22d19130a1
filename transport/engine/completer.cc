// The completer (IBA 9.7.5.1, 9.7.6): matches ACKs and NAKs to outstanding
// send WQEs, completes them in order, and drives retransmission: after a PSN
// sequence NAK, after an RNR NAK once its timer ran out, and when no progress
// came for the local ACK timeout (retry_cnt / rnr_retry bound both).
#include <cstring>

#include "transport/engine/qp.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

void Qp::completer_receive(const wire::PacketView& pkt) noexcept {
  if (!reliable() || !sq_can_send()) return;
  if (pkt.lrh().slid() != peer_.av.dlid) return;
  // A response must be for a PSN sent and not yet acknowledged; anything else
  // is a duplicate or a ghost and is dropped (IBA 9.7.5.1.1). PSNs sent before
  // a rewind count: their packets may still be on the wire.
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, req_.sent_end_psn) >= 0) return;
  const uint32_t flags = pkt.info->flags;
  if ((flags & wire::kIsReadResponse) || (flags & wire::kIsAtomicAck)) {
    // A NAK may come in the AETH of a first/only READ response too.
    if ((flags & wire::kHasAeth) && wire::aeth_type(pkt.aeth().syndrome()) != wire::AckType::kAck) {
      completer_nak(psn, wire::aeth_type(pkt.aeth().syndrome()),
                    wire::aeth_value(pkt.aeth().syndrome()));
      return;
    }
    if (flags & wire::kIsReadResponse)
      completer_read_response(pkt);
    else
      completer_atomic_ack(pkt);
    return;
  }
  if (!(flags & wire::kIsAck)) return;
  const wire::Aeth aeth = pkt.aeth();
  const wire::AckType type = wire::aeth_type(aeth.syndrome());
  if (type == wire::AckType::kAck) {
    if (wire::psn_diff(psn, comp_.acked_psn) > 0) completer_ack(psn);
    return;
  }
  // A NAK names the PSN the responder expects; one at or before the last
  // acknowledged PSN was overtaken by later ACKs (a stale NAK).
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;
  completer_nak(psn, type, wire::aeth_value(aeth.syndrome()));
}

// Everything up to `psn` is acknowledged now.
void Qp::completer_acknowledged(uint32_t psn) noexcept {
  const uint32_t acked_before = comp_.acked_psn;
  comp_.acked_psn = psn;
  completer_progress(static_cast<uint32_t>(wire::psn_diff(psn, acked_before)));
  // Packets sent before a rewind arrived after all (the requester went back
  // to ask for them again): the resend starts after them, else the cursor
  // would stay behind what is acknowledged and the window never open.
  if (wire::psn_diff(psn, req_.next_psn) >= 0) requester_resume_at(wire::psn_add(psn, 1));
}

// Forward progress restores the retry budgets (IBA 9.7.6.1.3) and restarts
// the local ACK timer.
void Qp::completer_progress(uint32_t acknowledged) noexcept {
  requester_window_grow(acknowledged);
  comp_.last_progress = comp_.heard_at = env_.clock->now();
  comp_.retries_left = attr_.retry_cnt;
  comp_.rnr_retries_left = attr_.rnr_retry;
  comp_.resending_after_nak = false;
}

// Everything up to and including `psn` arrived: complete the WQEs it covers.
void Qp::completer_ack(uint32_t psn) noexcept {
  const uint32_t acked_before = comp_.acked_psn;
  completer_acknowledged(psn);
  while (!sq_.empty() && sq_.head() < req_.cursor + (req_.cursor_offset ? 1 : 0)) {
    SendWqe& w = sq_.at(sq_.head());
    if (!w.started || wire::psn_diff(w.last_psn, psn) > 0) break;
    if (expects_response(w.opcode)) {
      // An ACK beyond a READ or atomic whose response did not all arrive:
      // the responses were lost (IBA 9.7.5.1.4, implied NAK). Ask again for
      // what is missing.
      uint32_t resume = wire::psn_diff(acked_before, w.first_psn) >= 0
                            ? wire::psn_add(acked_before, 1)
                            : w.first_psn;
      comp_.acked_psn = wire::psn_add(resume, wire::kPsnMask);
      requester_resume_at(resume);
      requester_pump();
      return;
    }
    complete_send(w, WcStatus::kSuccess);
    sq_.pop();
  }
  requester_skip_retired();
  if (sq_.empty() || !sq_.at(sq_.head()).started) comp_.last_progress = 0;  // nothing in flight
  requester_pump();
}

void Qp::completer_nak(uint32_t psn, wire::AckType type, uint8_t value) noexcept {
  // A NAK for PSN p implicitly acknowledges everything before p (C9-?).
  uint32_t before = wire::psn_add(psn, wire::kPsnMask);
  if (wire::psn_diff(before, comp_.acked_psn) > 0) completer_ack(before);
  if (type == wire::AckType::kRnrNak) {
    if (attr_.rnr_retry != kInfiniteRnrRetry) {
      if (comp_.rnr_retries_left == 0) {
        completer_error(WcStatus::kRnrRetryExcErr);
        return;
      }
      --comp_.rnr_retries_left;
    }
    comp_.rnr_wait_until = env_.clock->now() + rnr_timer_ns(value);
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
      if (comp_.retries_left == 0) {
        completer_error(WcStatus::kRetryExcErr);
        return;
      }
      --comp_.retries_left;
      comp_.resending_after_nak = true;
      comp_.nak_psn = psn;
      requester_window_shrink();
      requester_resume_at(psn);
      requester_pump();
      return;
    case wire::NakCode::kInvalidRequest:
      completer_error(WcStatus::kRemInvReqErr);
      return;
    case wire::NakCode::kRemoteAccessError:
      completer_error(WcStatus::kRemAccessErr);
      return;
    case wire::NakCode::kRemoteOperationalError:
      completer_error(WcStatus::kRemOpErr);
      return;
    default:
      completer_error(WcStatus::kBadRespErr);
      return;
  }
}

// The oldest outstanding WQE fails with `status`; the QP enters the error
// state and every other WQE is flushed (IBA 10.7.2.2, 11.6.2).
void Qp::completer_error(WcStatus status) noexcept {
  if (!sq_.empty()) {
    complete_send(sq_.at(sq_.head()), status);
    sq_.pop();
  }
  comp_.rnr_wait_until = 0;
  comp_.last_progress = 0;
  // The failure is reported by the completion; no async event (that is for
  // errors a completion cannot carry, IBA 11.6.3).
  enter_error();
}

// Binds and local invalidates that the requester executed complete as soon as
// every WQE before them has: they wait for nothing from the peer.
void Qp::completer_retire_local_operations() noexcept {
  while (!sq_.empty() && sq_.head() < req_.cursor) {
    SendWqe& w = sq_.at(sq_.head());
    if (!is_local_operation(w.opcode) || !w.started) return;
    complete_send(w, WcStatus::kSuccess);
    sq_.pop();
  }
}

Nanos Qp::completer_timer(Nanos now) noexcept {
  if (!reliable() || !sq_can_send()) return 0;
  if (comp_.rnr_wait_until) {
    if (now < comp_.rnr_wait_until) return comp_.rnr_wait_until;
    comp_.rnr_wait_until = 0;
    requester_resume_at(comp_.rnr_psn);
    comp_.last_progress = now;
    requester_pump();
  }
  if (!comp_.last_progress) return 0;
  Nanos timeout = local_ack_timeout_ns(attr_.timeout);
  if (!timeout) return 0;
  if (link_busy_.load(std::memory_order_relaxed)) {
    // A packet of this QP waits for room on the link: it has not left the
    // HCA, and a hardware transport timer starts when a packet is sent.
    comp_.last_progress = now;
    return now + timeout;
  }
  Nanos deadline = comp_.last_progress + timeout;
  if (now < deadline) return deadline;
  // Local ACK timeout (IBA 9.7.6.1.3): resend everything not acknowledged.
  if (comp_.retries_left > 0) {
    --comp_.retries_left;
  } else if (now - comp_.heard_at >= env_.stall_tolerance) {
    completer_error(WcStatus::kRetryExcErr);
    return 0;
  }
  // else: out of retries, but the peer has been silent for less than the
  // host's stalls may last (QpEnv::stall_tolerance). What a stall held up
  // may also have been lost (a link taken for down), so keep resending.
  requester_window_shrink();
  requester_resume_at(wire::psn_add(comp_.acked_psn, 1));
  comp_.last_progress = now;
  requester_pump();
  return now + timeout;
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
void Qp::completer_read_response(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;  // duplicate
  SendWqe* w = wqe_for_psn(sq_, req_.cursor + 1, psn);
  if (!w || w->opcode != WrOpcode::kRdmaRead) return;  // ghost
  if (psn == w->first_psn) {
    const uint32_t before = wire::psn_add(psn, wire::kPsnMask);
    if (wire::psn_diff(before, comp_.acked_psn) > 0) completer_ack(before);
    if (attr_.qp_state == QpState::kErr) return;
  } else if (psn != wire::psn_add(comp_.acked_psn, 1)) {
    return;  // a response went missing: the timeout asks again from there
  }
  SendWqe& wqe = sq_.at(sq_.head());
  if (&wqe != w) return;
  const uint32_t offset = static_cast<uint32_t>(wire::psn_diff(psn, wqe.first_psn)) * mtu_bytes();
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  if (uint64_t(offset) + n > wqe.length) {
    completer_error(WcStatus::kBadRespErr);
    return;
  }
  if (n && copy_to_sges(*env_.mrs, init_.pd, wqe.sge, wqe.num_sge, offset, pkt.payload(), n) !=
               MrCheck::kOk) {
    completer_error(WcStatus::kLocProtErr);
    return;
  }
  completer_acknowledged(psn);
  if (psn == wqe.last_psn) {
    complete_send(wqe, WcStatus::kSuccess, wqe.length);
    sq_.pop();
    completer_retire_local_operations();
    requester_skip_retired();
    if (sq_.empty() || !sq_.at(sq_.head()).started) comp_.last_progress = 0;
  }
  requester_pump();
}

// An atomic's acknowledgement (IBA 9.4.6): the original remote value goes to
// the WQE's local buffer, in host order.
void Qp::completer_atomic_ack(const wire::PacketView& pkt) noexcept {
  const uint32_t psn = pkt.bth().psn();
  if (wire::psn_diff(psn, comp_.acked_psn) <= 0) return;
  SendWqe* w = wqe_for_psn(sq_, req_.cursor + 1, psn);
  if (!w || !expects_response(w->opcode) || w->opcode == WrOpcode::kRdmaRead) return;
  const uint32_t before = wire::psn_add(psn, wire::kPsnMask);
  if (wire::psn_diff(before, comp_.acked_psn) > 0) completer_ack(before);
  if (attr_.qp_state == QpState::kErr || sq_.empty() || &sq_.at(sq_.head()) != w) return;
  uint64_t orig = pkt.atomic_ack_eth().orig_data();
  uint8_t bytes[8];
  std::memcpy(bytes, &orig, sizeof(bytes));
  if (copy_to_sges(*env_.mrs, init_.pd, w->sge, w->num_sge, 0, bytes, 8) != MrCheck::kOk) {
    completer_error(WcStatus::kLocProtErr);
    return;
  }
  completer_acknowledged(psn);
  complete_send(*w, WcStatus::kSuccess, 8);
  sq_.pop();
  completer_retire_local_operations();
  requester_skip_retired();
  comp_.last_progress = sq_.empty() || !sq_.at(sq_.head()).started ? 0 : env_.clock->now();
  requester_pump();
}

// The requester sent packets: with nothing in flight before, the local ACK
// timer starts now.
void Qp::completer_packets_left() noexcept {
  if (comp_.last_progress == 0) comp_.last_progress = comp_.heard_at = env_.clock->now();
}

}  // namespace ibemu::engine
