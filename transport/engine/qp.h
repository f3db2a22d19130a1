#pragma once
// A queue pair of the IBA transport: the public face of the engines of IBA
// chapter 9.7, which are separate objects sharing one QpCore (qp_core.h):
//
//  - Requester (requester.h): send WQEs → request packets;
//  - Completer (completer.h): ACKs/NAKs → send completions, retries; it
//    rewinds the requester by asking it (resume_at), never by its fields;
//  - Responder (responder.h, responder_output.cc): incoming requests →
//    execution, acknowledgements, READ responses.
//
// What only some QP types do is held by composition, beside the engine it
// extends: a DCI's requester holds a DcInitiator (dc_initiator.h); a DCT
// has a DcTarget (dc_target.h) that swaps the responder's context per DCI
// connection; an XRC receive QP an XrcForwarder (xrc_forwarding.h); a UD QP
// a DatagramPath (datagram.h). The verbs-facing half (modify, post) is in
// qp.cc; the Qp forwards the rest to the engines.
//
// Locking: every entry point takes core_.mutex; it is held while packets are
// built and while completions are pushed (lock order: QP, then CQ). Nothing
// under it waits for the link: a packet the destination has no room for is
// queued by the link, and the requester stops until the link has sent it
// (resume_sending).
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "transport/engine/completer.h"
#include "transport/engine/completion_queue.h"
#include "transport/engine/context_link.h"
#include "transport/engine/counters.h"
#include "transport/engine/datagram.h"
#include "transport/engine/dc_target.h"
#include "transport/engine/forced_naks.h"
#include "transport/engine/held_acks.h"
#include "transport/engine/link_waiters.h"
#include "transport/engine/mr_table.h"
#include "transport/engine/packet_sink.h"
#include "transport/engine/qp_core.h"
#include "transport/engine/requester.h"
#include "transport/engine/responder.h"
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

class Qp {
 public:
  Qp(const QpInit& init, const QpEnv& env);

  uint32_t qpn() const { return core_.init.qpn; }
  QpType type() const { return core_.init.type; }
  bool blocks_self_multicast() const { return core_.init.block_self_multicast; }
  /// XRC receive QPs: their XRC domain.
  uint32_t xrcd() const { return core_.init.xrcd; }
  /// RC, both XRC kinds and both DC kinds: acknowledged, retried, in order
  /// (IBA 9.7, A14; docs/dc.md).
  bool reliable() const noexcept { return core_.reliable(); }
  bool is_dc() const noexcept { return core_.is_dc(); }
  /// The port the QP was last bound to (read without the QP's lock: a hint
  /// for counters).
  uint8_t port() const { return port_hint_.load(std::memory_order_relaxed); }

  // --- verbs (any thread) ---
  int modify(const QpAttr& attr, uint32_t mask) noexcept;
  QpAttr query() noexcept;
  QpState state() noexcept;
  /// For `ibemu status`: state, PSNs, peer and queue depths; the CQ numbers
  /// are the caller's to fill in (send_cq(), recv_cq()).
  QpSnapshot snapshot() noexcept;
  const CompletionQueue* send_cq() const { return core_.init.send_cq; }
  const CompletionQueue* recv_cq() const { return core_.init.recv_cq; }
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
  void reset_transport_state() noexcept;

  QpCore core_;
  // The port, readable without the QP's lock (a hint for counters).
  std::atomic<uint8_t> port_hint_{0};
  Completer completer_;
  Requester requester_;
  Responder responder_;
  // Held only by the QP types they serve.
  std::optional<DatagramPath> datagram_;  // UD
  std::optional<DcTarget> dc_target_;     // DCT
  std::optional<XrcForwarder> xrc_;       // XRC receive
};

}  // namespace ibemu::engine
