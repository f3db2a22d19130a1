#pragma once
// The requester (IBA 9.7.4.1): turns send WQEs into request packets. It owns
// its position in the send queue and its PSNs; the completer moves it only
// through resume_at / skip_retired and the window calls below.
#include <cstdint>
#include <optional>

#include "transport/engine/dc_initiator.h"
#include "transport/engine/qp_core.h"

namespace ibemu::engine {

class Completer;
class DatagramPath;

class Requester {
 public:
  // The packets that may await acknowledgement. A real fabric is lossless
  // and its credits hold a sender back; the emulated one is made of rings
  // and sockets that a sender can fill until packets wait longer than the
  // local ACK timeout. So the window acts as a congestion window: full at
  // first, halved by each retransmission, one packet larger per window
  // acknowledged. Go-back-N then resends little after a loss, and a slow
  // receiver is not buried under copies of what it already refused.
  static constexpr uint32_t kMaxWindow = 128;
  static constexpr uint32_t kMinWindow = 16;

  Requester(QpCore& qp, Completer& completer);
  /// A UD QP's WQEs leave as datagrams (datagram.cc).
  void attach(DatagramPath* datagram) noexcept { datagram_ = datagram; }

  // --- from the verbs side (qp.cc) ---
  /// RESET: back to the state of a new QP (a DCI keeps its connection count).
  void reset() noexcept;
  /// The QP's sq_psn: the first packet sent.
  void start_at(uint32_t psn) noexcept;
  /// Sends what the window, the link and the QP state allow.
  void pump() noexcept;
  /// ERR: every send WQE completes with a flush error.
  void flush() noexcept;
  /// In SQD: whether the messages begun before are all done.
  bool drained() const noexcept;
  /// SQD entered with en_sqd_async_notify: raise SQ_DRAINED once drained.
  void notify_when_drained(bool on) noexcept { drained_event_ = on; }
  void check_drained() noexcept;
  uint32_t next_psn() const noexcept { return req_.next_psn; }
  uint32_t sent_end_psn() const noexcept { return req_.sent_end_psn; }

  // --- from the completer (completer.cc) ---
  /// SQ position of the WQE being packetized, and whether part of it is sent.
  uint64_t cursor() const noexcept { return req_.cursor; }
  bool inside_wqe() const noexcept { return req_.cursor_offset != 0; }
  void resume_at(uint32_t psn) noexcept;
  void skip_retired() noexcept;
  void window_grow(uint32_t acknowledged) noexcept;
  void window_shrink() noexcept;

  // --- from the datagram path (datagram.cc) ---
  /// The WQE at the cursor went out as one datagram with PSN next_psn().
  void datagram_sent() noexcept;
  void fail_wqe(WcStatus status) noexcept;

 private:
  bool send_packet(SendWqe& wqe) noexcept;
  void send_rd_atomic(SendWqe& wqe) noexcept;
  bool may_start(const SendWqe& wqe) const noexcept;
  void execute_local(SendWqe& wqe) noexcept;
  /// Carries out a local operation: kSuccess or the status it fails with.
  WcStatus run_local_operation(const SendWqe& wqe) noexcept;
  void advance_to(uint32_t psn) noexcept;
  uint32_t in_flight() const noexcept;
  size_t build_headers(uint8_t* buf, uint8_t opcode, uint32_t psn, bool ack_req,
                       bool solicited) noexcept;

  QpCore& qp_;
  Completer& completer_;
  DatagramPath* datagram_ = nullptr;
  std::optional<DcInitiator> dci_;  // a DCI's choice of target

  struct State {
    uint64_t cursor = 0;         // SQ position of the WQE being packetized
    uint32_t cursor_offset = 0;  // bytes of that WQE already sent
    uint32_t next_psn = 0;       // PSN of the next packet to send (or resend)
    uint32_t sent_end_psn = 0;   // one past the newest PSN ever sent: a rewind
                                 // does not take back what is on the wire
    uint32_t window = kMaxWindow;
    uint32_t window_growth = 0;  // packets acknowledged towards the next step
  } req_;
  bool drained_event_ = false;  // SQD entered with en_sqd_async_notify, not drained yet
};

}  // namespace ibemu::engine
