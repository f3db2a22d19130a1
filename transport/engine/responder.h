#pragma once
// The responder (IBA 9.7.5): checks incoming requests, executes them against
// the receive queue and memory, and answers them (responder.cc), with its
// responses paced by the link (responder_output.cc). It owns its context
// (expected PSN, MSN, the message in progress), the responses still owed
// and the ACKs the link refused. A DC target swaps contexts per DCI
// connection (dc_target.h); an XRC receive QP hands requests for other
// contexts' SRQs to its forwarder (xrc_forwarding.h).
#include <cstdint>
#include <deque>
#include <vector>

#include "transport/engine/held_acks.h"
#include "transport/engine/qp_core.h"
#include "transport/engine/response_path.h"
#include "transport/engine/xrc_forwarding.h"

namespace ibemu::engine {

class DcTarget;
class XrcForwarder;

/// One DCI connection of a DC target (dc_target.h): its DCI (source LID and
/// DCI number) and the connection's number.
struct DcConnectionId {
  bool valid = false;
  uint64_t source = 0;
  uint32_t number = 0;
  bool operator==(const DcConnectionId&) const = default;
};

/// A response the responder still owes (responder_output.cc): an RDMA READ
/// being answered, one PMTU at a time, or a finished packet waiting behind one.
struct QueuedResponse {
  std::vector<uint8_t> packet;  // a finished packet; empty for a READ
  uint64_t va = 0;              // READ: what is read ...
  uint32_t rkey = 0;
  uint32_t len = 0;
  uint32_t psn = 0;   // the (READ's first) response's PSN
  uint32_t msn = 0;   // ... the MSN its responses carry (the READ's own)
  uint32_t sent = 0;  // ... and how many responses left
  DcConnectionId dc;  // a DCT's: the DCI connection it answers
};

/// What the responder knows of the requester it serves. A DC target keeps
/// one per DCI connection; an XRC request carries the message's part of it.
struct ResponderContext {
  uint32_t epsn = 0;          // expected PSN
  uint32_t msn = 0;           // message sequence number
  bool nak_sent = false;      // one PSN sequence NAK per gap (C9-98)
  bool accepted_any = false;  // since RTR: a request in sequence, or a mismatch reported
  bool in_send = false;       // inside a multi-packet SEND
  uint32_t recv_offset = 0;
  bool in_write = false;  // inside a multi-packet RDMA WRITE
  uint64_t write_va = 0;
  uint32_t write_rkey = 0;
  uint32_t write_remaining = 0;
  uint32_t write_total = 0;
  // Atomics already executed, by PSN: a duplicate request gets the saved
  // result, never a second execution (IBA 9.7.5.1.3, C9-102).
  struct AtomicResult {
    uint32_t psn;
    uint64_t orig;
    bool valid;
  } atomics[DeviceLimits::kMaxQpRdAtom] = {};
  uint32_t next_atomic = 0;
  bool srq_wqe_held = false;  // the message in progress holds srq_wqe
  RecvWqe srq_wqe;
  uint32_t held_srqn = 0;  // XRC: srq_wqe came from that SRQ of another context (0: from one here)
};

class Responder {
 public:
  explicit Responder(QpCore& qp);
  /// The components that extend a DCT's and an XRC receive QP's responder.
  void attach(DcTarget* dc_target, XrcForwarder* xrc) noexcept {
    dct_ = dc_target;
    xrc_ = xrc;
  }

  // --- from the verbs side (qp.cc) ---
  /// RESET: no context, no responses owed, no ACKs held.
  void reset() noexcept;
  /// The QP's rq_psn.
  void expect(uint32_t psn) noexcept { resp_.epsn = psn; }
  uint32_t epsn() const noexcept { return resp_.epsn; }
  /// ERR: the receive WQE of a message in progress completes with a flush error.
  void flush() noexcept;
  void last_wqe_reached() noexcept;
  /// The receive WQE a message is being placed into, if any.
  RecvWqe* placing_into() noexcept;

  // --- progress thread ---
  void receive(const wire::PacketView& pkt) noexcept;
  /// The link has room: the responses that waited go on.
  void send_queued() noexcept;
  /// Offers the held ACKs again (held_acks.h); the next retry time or 0.
  Nanos resend_held_acks(Nanos now) noexcept;

  // --- the receive queue, for the datagram path and the DC target ---
  // The receive WQE of an inbound message (IBA 10.2.9.5): from the QP's own
  // receive queue or, with an SRQ, taken from it when the message begins.
  bool recv_ready() noexcept;
  RecvWqe* recv_take() noexcept;
  RecvWqe* recv_current() noexcept;
  void recv_done() noexcept;
  void complete_recv(const RecvWqe& wqe, WcStatus status, WcOpcode op, uint32_t byte_len,
                     uint32_t imm, uint32_t wc_flags, bool solicited, uint16_t slid) noexcept;
  void push_recv_completion(const Completion& c, bool solicited) noexcept;

  // --- for the DC target (dc_target.cc) ---
  void send_ack(uint32_t psn, uint8_t syndrome) noexcept;
  const ResponderContext& context() const noexcept { return resp_; }
  void load_context(const ResponderContext& c) noexcept { resp_ = c; }

  // --- for the XRC forwarder (xrc_forwarding.cc) ---
  /// The way back to the requester, from port `me` (the QP's port).
  ResponsePath response_path(const PortAddress& me) const noexcept;
  /// Finishes a request another context executed, as receive() finishes its own.
  void apply_verdict(const wire::PacketView& pkt, const XrcVerdict& v, bool replay) noexcept;

 private:
  bool uses_srq() const noexcept { return qp_.init.srq || qp_.init.type == QpType::kXrcRecv; }
  bool xrc_select_srq(const wire::PacketView& pkt) noexcept;
  void xrc_forward(const wire::PacketView& pkt, bool replay) noexcept;
  bool accepts_source(const wire::PacketView& pkt) noexcept;
  void execute_send(const wire::PacketView& pkt) noexcept;
  void execute_write(const wire::PacketView& pkt) noexcept;
  void execute_read(const wire::PacketView& pkt, uint32_t psn) noexcept;
  void execute_atomic(const wire::PacketView& pkt) noexcept;
  void replay_atomic(const wire::PacketView& pkt) noexcept;
  void finish(const wire::PacketView& pkt) noexcept;
  void atomic_done(uint32_t psn, uint64_t orig) noexcept;
  /// One response packet (ACK, READ response, atomic ACK) back to the
  /// requester; behind the responses still waiting to go (responder_output.cc).
  void send_response(uint8_t opcode, uint32_t psn, uint8_t syndrome, const uint8_t* payload,
                     uint32_t len, uint64_t atomic_orig) noexcept;
  // responder_output.cc: responses leave in PSN order and as the link has
  // room, as a hardware responder's READ engine is paced by link credits.
  void queue_read(uint64_t va, uint32_t rkey, uint32_t len, uint32_t psn) noexcept;
  /// A READ asked again from `psn`: the responses still owed from there on
  /// are dropped (the requester discards them).
  void abandon_responses_from(uint32_t psn) noexcept;
  bool send_read_packet(QueuedResponse& r) noexcept;
  void fail(uint32_t psn, wire::NakCode code, WcStatus local_status) noexcept;
  /// After fail: the QP is in ERR or, for a DCT, the connection closed.
  bool failed() const noexcept;
  void rnr_nak(uint32_t psn) noexcept;
  /// IBEMU_CHECK: tells the observer when the first request since RTR
  /// shows the two ends' starting PSNs disagree.
  void check_first_psn(uint32_t psn, int32_t diff) noexcept;
  /// Answers a new request with a NAK the fabric forces; true if it did.
  bool forced_nak(uint32_t psn) noexcept;

  QpCore& qp_;
  DcTarget* dct_ = nullptr;
  XrcForwarder* xrc_ = nullptr;
  ResponderContext resp_;
  HeldAcks held_acks_;
  // Responses not yet sent, oldest first: READs being answered and the
  // packets behind them (responder_output.cc).
  std::deque<QueuedResponse> responses_out_;
  uint8_t bounce_[wire::kMaxPayload];  // READ responses from device memory
};

}  // namespace ibemu::engine
