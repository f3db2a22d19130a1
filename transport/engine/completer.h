#pragma once
// The completer (IBA 9.7.5.1, 9.7.6): matches responses to send WQEs,
// completes them, and decides on retransmission. It owns the acknowledged
// PSN and the retry budgets; it moves the requester only by asking it
// (Requester::resume_at, skip_retired, window_shrink, pump).
#include <cstdint>

#include "transport/engine/qp_core.h"

namespace ibemu::engine {

class Requester;

class Completer {
 public:
  Completer(QpCore& qp, Requester& requester);

  // --- from the verbs side (qp.cc) ---
  void reset() noexcept { comp_ = State{}; }
  /// The QP's sq_psn: nothing before it is outstanding.
  void start_at(uint32_t sq_psn) noexcept;
  /// RTR → RTS: the retry budgets from the attributes.
  void restore_retries() noexcept;
  /// Last PSN known delivered.
  uint32_t acked_psn() const noexcept { return comp_.acked_psn; }

  // --- progress thread ---
  void receive(const wire::PacketView& pkt) noexcept;
  /// Retransmission and RNR timers; the next deadline or 0.
  Nanos on_timer(Nanos now) noexcept;

  // --- from the requester (requester.cc) ---
  /// Waiting out an RNR NAK: the requester sends nothing until then.
  bool rnr_waiting() const noexcept { return comp_.rnr_wait_until != 0; }
  void packets_left() noexcept;
  void retire_local_operations() noexcept;
  void error(WcStatus status) noexcept;

 private:
  void ack(uint32_t psn) noexcept;
  void progress(uint32_t acknowledged) noexcept;
  bool spend_retry(Nanos now) noexcept;
  void read_response(const wire::PacketView& pkt) noexcept;
  void atomic_ack(const wire::PacketView& pkt) noexcept;
  void nak(uint32_t psn, wire::AckType type, uint8_t value) noexcept;
  void acknowledged(uint32_t psn) noexcept;

  QpCore& qp_;
  Requester& requester_;

  struct State {
    uint32_t acked_psn = 0;  // last PSN known delivered
    uint8_t retries_left = 0;
    uint8_t rnr_retries_left = 0;
    Nanos last_progress = 0;   // for the local ACK timeout
    Nanos heard_at = 0;        // last progress, or the first send after none
    Nanos rnr_wait_until = 0;  // after an RNR NAK: resend then
    uint32_t rnr_psn = 0;
    // The PSN a sequence NAK restarted the requester from, until progress.
    bool resending_after_nak = false;
    uint32_t nak_psn = 0;
  } comp_;
};

}  // namespace ibemu::engine
