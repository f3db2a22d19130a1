// The completer (IBA 9.7.5.1, 9.7.6): matches ACKs and NAKs to outstanding
// send WQEs, completes them in order, and drives retransmission: after a PSN
// sequence NAK, after an RNR NAK once its timer ran out, and when no progress
// came for the local ACK timeout (retry_cnt / rnr_retry bound both).
#include "transport/engine/qp.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

void Qp::completer_receive(const wire::PacketView& pkt) noexcept {
  if (init_.type != QpType::kRc || !sq_can_send()) return;
  if (!(pkt.info->flags & wire::kIsAck)) return;  // READ/atomic responses: not offered yet
  if (pkt.lrh().slid() != attr_.ah.dlid) return;
  const uint32_t psn = pkt.bth().psn();
  // Only ACKs for PSNs we sent and that are not yet acknowledged count
  // (IBA 9.7.5.1.3: stale or ghost ACKs are ignored).
  if (wire::psn_diff(psn, req_.next_psn) >= 0) return;
  const wire::Aeth aeth = pkt.aeth();
  const wire::AckType type = wire::aeth_type(aeth.syndrome());
  if (type == wire::AckType::kAck) {
    if (wire::psn_diff(psn, comp_.acked_psn) > 0) completer_ack(psn);
    return;
  }
  completer_nak(psn, type, wire::aeth_value(aeth.syndrome()));
}

// Everything up to and including `psn` arrived: complete the WQEs it covers.
void Qp::completer_ack(uint32_t psn) noexcept {
  const int32_t advanced = wire::psn_diff(psn, comp_.acked_psn);
  comp_.acked_psn = psn;
  req_.unacked = advanced >= static_cast<int32_t>(req_.unacked) ? 0 : req_.unacked - advanced;
  comp_.last_progress = now_ns();
  // Forward progress restores the retry budgets (IBA 9.7.6.1.3).
  comp_.retries_left = attr_.retry_cnt;
  comp_.rnr_retries_left = attr_.rnr_retry;
  while (!sq_.empty() && sq_.head() < req_.cursor + (req_.cursor_offset ? 1 : 0)) {
    SendWqe& w = sq_.at(sq_.head());
    if (!w.started || wire::psn_diff(w.last_psn, psn) > 0) break;
    complete_send(w, WcStatus::kSuccess);
    sq_.pop();
  }
  if (sq_.head() > req_.cursor) {
    req_.cursor = sq_.head();
    req_.cursor_offset = 0;
  }
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
    comp_.rnr_wait_until = now_ns() + rnr_timer_ns(value);
    comp_.rnr_psn = psn;
    return;
  }
  if (type != wire::AckType::kNak) return;
  switch (static_cast<wire::NakCode>(value)) {
    case wire::NakCode::kPsnSequenceError:
      // Go back to the PSN the responder expects (IBA 9.7.5.2.1). This is a
      // retry: it draws on retry_cnt like a timeout does.
      if (comp_.retries_left == 0) {
        completer_error(WcStatus::kRetryExcErr);
        return;
      }
      --comp_.retries_left;
      requester_rewind(psn);
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

Nanos Qp::completer_timer(Nanos now) noexcept {
  if (init_.type != QpType::kRc || !sq_can_send()) return 0;
  if (comp_.rnr_wait_until) {
    if (now < comp_.rnr_wait_until) return comp_.rnr_wait_until;
    comp_.rnr_wait_until = 0;
    requester_rewind(comp_.rnr_psn);
    comp_.last_progress = now;
    requester_pump();
  }
  if (!comp_.last_progress) return 0;
  Nanos timeout = local_ack_timeout_ns(attr_.timeout);
  if (!timeout) return 0;
  Nanos deadline = comp_.last_progress + timeout;
  if (now < deadline) return deadline;
  // Local ACK timeout (IBA 9.7.6.1.3): resend everything not acknowledged.
  if (comp_.retries_left == 0) {
    completer_error(WcStatus::kRetryExcErr);
    return 0;
  }
  --comp_.retries_left;
  requester_rewind(wire::psn_add(comp_.acked_psn, 1));
  comp_.last_progress = now;
  requester_pump();
  return now + timeout;
}

}  // namespace ibemu::engine
