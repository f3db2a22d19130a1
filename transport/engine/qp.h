#pragma once
// A queue pair of the IBA transport. Its verbs-facing half (modify, post) is in
// qp.cc; the three engines of IBA chapter 9.7 each have their file:
// requester.cc builds request packets from send WQEs, responder.cc executes
// incoming requests and acknowledges them, completer.cc matches ACKs/NAKs to
// send WQEs, retries and completes them.
//
// Locking: every entry point takes mutex_; it is held while packets are built
// and while completions are pushed (lock order: QP, then CQ). Nothing under
// it waits for the link: a packet the destination has no room for is queued
// by the link, and the requester stops until the link has sent it
// (resume_sending).
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/engine/completion_queue.h"
#include "transport/engine/context_link.h"
#include "transport/engine/counters.h"
#include "transport/engine/forced_naks.h"
#include "transport/engine/held_acks.h"
#include "transport/engine/link_waiters.h"
#include "transport/engine/mr_table.h"
#include "transport/engine/packet_sink.h"
#include "transport/engine/response_path.h"
#include "transport/engine/shared_receive_queue.h"
#include "transport/engine/snapshot.h"
#include "transport/engine/spec_observer.h"
#include "transport/engine/timing.h"
#include "transport/engine/types.h"
#include "transport/engine/work_queues.h"
#include "transport/engine/xrc_forwarding.h"
#include "transport/wire/packet.h"

namespace ibemu::engine {

/// Async events a QP raises (ibv_event_type values).
enum class QpEvent : uint8_t {
  kFatal = 1,
  kReqErr = 2,
  kAccessErr = 3,
  kCommEst = 4,
  kSqDrained = 5,
  kLastWqeReached = 16,
};

struct QpInit {
  QpType type = QpType::kRc;
  uint32_t qpn = 0;
  uint32_t pd = 0;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // receives come from here, not an own RQ
  uint32_t xrcd = 0;                  // XRC receive QPs: their XRC domain
  uint32_t max_send_wr = 0, max_recv_wr = 0, max_send_sge = 0, max_recv_sge = 0,
           max_inline_data = 0;
  bool sq_sig_all = false;
  /// UD: multicast this QP sends does not come back to it even when it is a
  /// member (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); by default it does.
  bool block_self_multicast = false;
  /// DCT: the key every request's DCETH must carry (mlx5dv dct_access_key).
  uint64_t dct_access_key = 0;
};

/// A response the responder still owes (responder_output.cc): an RDMA READ
/// being answered, one PMTU at a time, or a finished packet waiting behind one.
struct QueuedResponse {
  std::vector<uint8_t> packet;  // a finished packet; empty for a READ
  uint64_t va = 0;              // READ: what is read ...
  uint32_t rkey = 0;
  uint32_t len = 0;
  uint32_t psn = 0;   // ... the first response's PSN
  uint32_t msn = 0;   // ... the MSN its responses carry (the READ's own)
  uint32_t sent = 0;  // ... and how many responses left
};

struct QpEnv {
  MrTable* mrs = nullptr;
  PacketSink* sink = nullptr;
  const PortTable* ports = nullptr;
  std::function<void(uint32_t qpn, QpEvent)> on_event;
  EngineCounters* counters = nullptr;      // drops a QP decides on; may be null
  const SrqDirectory* srqs = nullptr;      // XRC SRQs of the context, by number
  ContextLink* contexts = nullptr;         // the other contexts of this HCA; may be null
  uint64_t context_id = 0;                 // this context, as they address it
  ForcedNakSource* forced_naks = nullptr;  // test hook; may be null
  // How long a reliable QP must have heard nothing before it reports a
  // transport retry error, however short its local ACK timeout; until then
  // it keeps resending past retry_cnt. 0: exactly as IBA 9.7.6.1.3 says
  // (retry_cnt + 1 timeouts). The emulated fabric is made of host threads
  // that the host may not run for a while (a VM whose CPU is taken away
  // freezes them for hundreds of ms); a real fabric never pauses like
  // that, so a silence this short is not charged to the peer.
  Nanos stall_tolerance = 0;
  SpecObserver* spec = nullptr;          // IBEMU_CHECK's listener; may be null
  LinkWaiters* link_waiters = nullptr;   // where a QP stopped by the link waits; may be null
  const Clock* clock = &steady_clock();  // every time the QP reads
};

class Qp {
 public:
  Qp(const QpInit& init, const QpEnv& env);

  uint32_t qpn() const { return init_.qpn; }
  QpType type() const { return init_.type; }
  bool blocks_self_multicast() const { return init_.block_self_multicast; }
  /// XRC receive QPs: their XRC domain.
  uint32_t xrcd() const { return init_.xrcd; }
  /// RC, both XRC kinds and both DC kinds: acknowledged, retried, in order
  /// (IBA 9.7, A14; docs/dc.md).
  bool reliable() const noexcept {
    return init_.type == QpType::kRc || init_.type == QpType::kXrcSend ||
           init_.type == QpType::kXrcRecv || is_dc();
  }
  bool is_dc() const noexcept { return init_.type == QpType::kDci || init_.type == QpType::kDct; }
  /// The port the QP was last bound to (read without the QP's lock: a hint
  /// for counters).
  uint8_t port() const { return attr_.port_num; }

  // --- verbs (any thread) ---
  int modify(const QpAttr& attr, uint32_t mask) noexcept;
  QpAttr query() noexcept;
  QpState state() noexcept;
  /// For `ibemu status`: state, PSNs, peer and queue depths; the CQ numbers
  /// are the caller's to fill in (send_cq(), recv_cq()).
  QpSnapshot snapshot() noexcept;
  const CompletionQueue* send_cq() const { return init_.send_cq; }
  const CompletionQueue* recv_cq() const { return init_.recv_cq; }
  /// Returns 0 or an errno; on error *bad is the index of the failing WR.
  int post_send(const SendWqe* wrs, int count, int* bad) noexcept;
  int post_recv(const RecvWqe* wrs, int count, int* bad) noexcept;

  // --- progress thread ---
  void receive(const wire::PacketView& pkt) noexcept;
  /// Runs retransmission and RNR timers; returns the next deadline (0 = none).
  Nanos on_timer(Nanos now) noexcept;
  /// The QP is being destroyed: a last offer of the acknowledgements the
  /// link held back (held_acks.h).
  void release_held_acks() noexcept;
  /// The link sent packets it had queued: a requester that stopped for
  /// room goes on.
  void resume_sending() noexcept;
  /// The HCA failed (its daemon died): the QP enters the error state and
  /// every outstanding WR completes with a flush error, as a hardware
  /// driver's reset flow completes them.
  void device_fatal() noexcept;
  /// How many WRs in flight name `lkey` in a scatter/gather entry
  /// (spec_queries.cc): send WRs not completed, and the receive a message
  /// is being placed into. For IBEMU_CHECK: a region deregistered under
  /// them fails them.
  uint32_t wrs_using_lkey(uint32_t lkey) noexcept;
  /// XRC receive QPs: the verdict on a request this QP forwarded to the
  /// context that owns its SRQ (xrc_forwarding.cc).
  void receive_verdict(const XrcVerdict& v) noexcept;

 private:
  // qp.cc
  void enter_error() noexcept;  // → ERR, flush both queues
  void last_wqe_reached() noexcept;
  /// In SQD: whether the messages begun before are all done.
  bool sq_drained() const noexcept;
  void check_sq_drained() noexcept;
  void on_cq_overrun() noexcept;
  void flush_send_queue() noexcept;
  void flush_recv_queue() noexcept;
  void complete_send(SendWqe& wqe, WcStatus status, uint32_t byte_len = 0) noexcept;
  void complete_recv(const RecvWqe& wqe, WcStatus status, WcOpcode op, uint32_t byte_len,
                     uint32_t imm, uint32_t wc_flags, bool solicited, uint16_t slid) noexcept;
  void push_recv_completion(const Completion& c, bool solicited) noexcept;
  // The receive WQE of an inbound message (IBA 10.2.9.5): from the QP's own
  // receive queue or, with an SRQ, taken from it when the message begins.
  bool uses_srq() const noexcept { return init_.srq || init_.type == QpType::kXrcRecv; }
  bool recv_ready() noexcept;
  RecvWqe* recv_take() noexcept;
  RecvWqe* recv_current() noexcept;
  void recv_done() noexcept;
  uint32_t mtu_bytes() const noexcept;
  bool sq_can_send() const noexcept;
  bool rq_can_receive() const noexcept;
  void reset_transport_state() noexcept;

  // requester.cc (IBA 9.7.4.1)
  void requester_pump() noexcept;
  bool requester_send_packet(SendWqe& wqe) noexcept;
  void requester_send_rd_atomic(SendWqe& wqe) noexcept;
  bool requester_may_start(const SendWqe& wqe) const noexcept;
  void requester_execute_local(SendWqe& wqe) noexcept;
  void requester_fail_wqe(WcStatus status) noexcept;
  void requester_resume_at(uint32_t psn) noexcept;
  void requester_skip_retired() noexcept;
  void requester_advance_to(uint32_t psn) noexcept;
  uint32_t requester_in_flight() const noexcept;
  void requester_window_grow(uint32_t acknowledged) noexcept;
  void requester_window_shrink() noexcept;
  void fill_address_headers(wire::PacketHeaders& h, const AddressVector& av) const noexcept;
  size_t build_headers(uint8_t* buf, uint8_t opcode, uint32_t psn, bool ack_req,
                       bool solicited) noexcept;
  void emit(uint8_t* buf, size_t header_len, size_t payload_len) noexcept;
  /// Every packet of this QP leaves through here: the port's counters see it.
  /// False when the link discarded the packet. A packet the link queued
  /// stops the requester until resume_sending().
  bool transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) noexcept;

  // responder.cc (IBA 9.7.5)
  void responder_receive(const wire::PacketView& pkt) noexcept;
  bool xrc_select_srq(const wire::PacketView& pkt) noexcept;
  wire::Transport transport() const noexcept;
  /// An RC opcode under this QP's transport bits.
  uint8_t for_transport(uint8_t rc_opcode) const noexcept;
  bool responder_accepts_source(const wire::PacketView& pkt) noexcept;
  void responder_execute_send(const wire::PacketView& pkt) noexcept;
  void responder_execute_write(const wire::PacketView& pkt) noexcept;
  void responder_execute_read(const wire::PacketView& pkt, uint32_t psn) noexcept;
  void responder_execute_atomic(const wire::PacketView& pkt) noexcept;
  void responder_replay_atomic(const wire::PacketView& pkt) noexcept;
  void responder_finish(const wire::PacketView& pkt) noexcept;
  void responder_atomic_done(uint32_t psn, uint64_t orig) noexcept;
  void send_ack(uint32_t psn, uint8_t syndrome) noexcept;
  /// Offers the held ACKs again (held_acks.h); the next retry time or 0.
  Nanos resend_held_acks(Nanos now) noexcept;
  /// The way back to the requester, from port `me` (the QP's port).
  ResponsePath response_path(const PortAddress& me) const noexcept;
  /// One response packet (ACK, READ response, atomic ACK) back to the
  /// requester; behind the responses still waiting to go (responder_output.cc).
  void send_response(uint8_t opcode, uint32_t psn, uint8_t syndrome, const uint8_t* payload,
                     uint32_t len, uint64_t atomic_orig) noexcept;
  // responder_output.cc: responses leave in PSN order and as the link has
  // room, as a hardware responder's READ engine is paced by link credits.
  void responder_queue_read(uint64_t va, uint32_t rkey, uint32_t len, uint32_t psn) noexcept;
  void responder_send_queued() noexcept;
  bool responder_send_read_packet(struct QueuedResponse& r) noexcept;
  void responder_fail(uint32_t psn, wire::NakCode code, WcStatus local_status) noexcept;
  /// After responder_fail: the QP is in ERR or, for a DCT, the connection closed.
  bool responder_failed() const noexcept {
    return attr_.qp_state == QpState::kErr || (init_.type == QpType::kDct && !dct_loaded_);
  }
  void responder_rnr_nak(uint32_t psn) noexcept;
  /// IBEMU_CHECK: tells the observer when the first request since RTR
  /// shows the two ends' starting PSNs disagree.
  void responder_check_first_psn(uint32_t psn, int32_t diff) noexcept;
  /// Answers a new request with a NAK the fabric forces; true if it did.
  bool responder_forced_nak(uint32_t psn) noexcept;

  // xrc_forwarding.cc: requests for XRC SRQs of other contexts
  bool xrc_remote() const noexcept { return fwd_.srqn != 0; }
  void xrc_forward(const wire::PacketView& pkt, bool replay) noexcept;
  void xrc_apply(const wire::PacketView& pkt, const XrcVerdict& v) noexcept;
  void xrc_park(const wire::PacketView& pkt) noexcept;
  void xrc_resume() noexcept;
  void xrc_abandon() noexcept;
  void xrc_send_completion(uint32_t srqn, const Completion& c, bool solicited) noexcept;
  Nanos xrc_timer(Nanos now) noexcept;

  // datagram.cc (UD, IBA 9.8.?)
  void datagram_send(SendWqe& wqe) noexcept;
  void datagram_receive(const wire::PacketView& pkt) noexcept;
  void count_drop(std::atomic<uint64_t> PortCounters::*counter) noexcept;
  /// Reads the P_Key at the QP's pkey_index from its port's table.
  void refresh_pkey() noexcept;

  // dc_initiator.cc: a DCI's requester picks each WQE's target
  bool dci_select_target(const SendWqe& wqe) noexcept;
  void dci_fill_dceth(wire::Dceth& h, uint32_t psn) const noexcept;
  uint32_t dci_next_connection() noexcept;

  // dc_target.cc: a DCT's responder keeps one context per DCI connection
  void dct_receive(const wire::PacketView& pkt) noexcept;
  bool dct_load_connection(const wire::PacketView& pkt) noexcept;
  void dct_store_connection() noexcept;
  void dct_close_connection() noexcept;
  void dct_forget_connections() noexcept;
  AddressVector dct_path_to(const wire::PacketView& pkt) const noexcept;

  // completer.cc (IBA 9.7.5.1, 9.7.6)
  void completer_receive(const wire::PacketView& pkt) noexcept;
  void completer_ack(uint32_t psn) noexcept;
  void completer_progress(uint32_t acknowledged) noexcept;
  void completer_read_response(const wire::PacketView& pkt) noexcept;
  void completer_atomic_ack(const wire::PacketView& pkt) noexcept;
  void completer_nak(uint32_t psn, wire::AckType type, uint8_t value) noexcept;
  void completer_acknowledged(uint32_t psn) noexcept;
  void completer_error(WcStatus status) noexcept;
  void completer_retire_local_operations() noexcept;
  Nanos completer_timer(Nanos now) noexcept;
  void completer_packets_left() noexcept;

  std::mutex mutex_;
  // The link queued a packet of this QP: like an HCA without link credits,
  // the requester sends nothing new until the link has room again.
  std::atomic<bool> link_busy_{false};
  QpInit init_;
  QpEnv env_;
  QpAttr attr_;
  // The other end of the transport: from the attributes for a connected QP,
  // the current target for a DCI, the DCI being served for a DCT.
  struct Peer {
    AddressVector av;
    uint32_t qpn = 0;
  } peer_;
  WorkRing<SendWqe> sq_;
  WorkRing<RecvWqe> rq_;

  struct Requester {
    uint64_t cursor = 0;         // SQ position of the WQE being packetized
    uint32_t cursor_offset = 0;  // bytes of that WQE already sent
    uint32_t next_psn = 0;       // PSN of the next packet to send (or resend)
    uint32_t sent_end_psn = 0;   // one past the newest PSN ever sent: a rewind
                                 // does not take back what is on the wire
    // The packets that may await acknowledgement. A real fabric is lossless
    // and its credits hold a sender back; the emulated one is made of rings
    // and sockets that a sender can fill until packets wait longer than the
    // local ACK timeout. So the window acts as a congestion window: full at
    // first, halved by each retransmission, one packet larger per window
    // acknowledged. Go-back-N then resends little after a loss, and a slow
    // receiver is not buried under copies of what it already refused.
    static constexpr uint32_t kMaxWindow = 128;
    static constexpr uint32_t kMinWindow = 16;
    uint32_t window = kMaxWindow;
    uint32_t window_growth = 0;  // packets acknowledged towards the next step
  } req_;

  struct Completer {
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

  struct Responder {
    uint32_t epsn = 0;          // expected PSN
    uint32_t msn = 0;           // message sequence number
    bool nak_sent = false;      // one PSN sequence NAK per gap (C9-98)
    bool accepted_any = false;  // since RTR: a request in sequence, or a mismatch reported
    bool in_send = false;       // inside a multi-packet SEND
    uint32_t recv_offset = 0;
    bool recv_error = false;  // message being dropped after a local error
    bool in_write = false;    // inside a multi-packet RDMA WRITE
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
  } resp_;

  // XRC receive QPs whose requests name SRQs of other contexts
  // (xrc_forwarding.cc).
  struct Forwarding {
    uint32_t srqn = 0;       // the current packet's SRQ lives elsewhere (0: here)
    uint32_t held_srqn = 0;  // resp_.srq_wqe came from that SRQ (0: from one here)
    bool waiting = false;    // a request is with the SRQ's owner
    bool replay = false;     // ... and it is a duplicate READ
    uint32_t seq = 0;        // the request awaited
    uint32_t pending_srqn = 0;
    Nanos deadline = 0;                       // when to ask whether the SRQ's owner still lives
    std::vector<uint8_t> request;             // the packet awaiting its verdict
    std::deque<std::vector<uint8_t>> parked;  // packets behind it, in order
  } fwd_;

  // DCI (dc_initiator.cc): the connection to the current target.
  struct DcInitiator {
    bool connected = false;
    uint64_t key = 0;
    uint32_t connection = 0;   // this connection's number (DCETH)
    uint32_t connect_psn = 0;  // its first PSN: packets with it say "connect"
  } dci_;
  uint32_t dci_last_connection_ = 0;  // grows across connections and RESETs

  // DCT (dc_target.cc): a responder context per DCI, by source LID and DCI
  // number; resp_ and peer_ hold the loaded one.
  struct DcConnection {
    uint32_t connection = 0;
    bool closed = false;  // ended by an error: its packets are dropped
    Nanos last_used = 0;
    Responder resp;
    Peer peer;
  };
  std::unordered_map<uint64_t, DcConnection> dct_connections_;
  bool dct_loaded_ = false;

  HeldAcks held_acks_;            // responder.cc
  uint16_t pkey_ = 0xffff;        // the P_Key at attr_.pkey_index of the QP's port
  uint32_t pkey_generation_ = 0;  // the port table's generation pkey_ was read at
  uint64_t dct_loaded_source_ = 0;

  bool sq_drained_event_ = false;  // SQD entered with en_sqd_async_notify, not drained yet

  // Responses not yet sent, oldest first: READs being answered and the
  // packets behind them (responder_output.cc).
  std::deque<QueuedResponse> responses_out_;
  uint8_t tx_buf_[wire::kMaxPacket];
  uint8_t bounce_[wire::kMaxPayload];  // READ responses from device memory
};

}  // namespace ibemu::engine
