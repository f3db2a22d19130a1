#pragma once
// What the engines of one QP share (IBA 9.7): the QP's creation parameters
// and environment, its attributes, the peer its packets go to, the send and
// receive queues, and the lock every entry point of the QP takes. The
// requester, completer and responder (requester.h, completer.h, responder.h)
// each hold their own state and reach this object by reference; what they
// ask of each other goes through their public methods, never their fields.
//
// Also here: the few actions every engine takes the same way — a packet to
// the link (transmit, emit), a send completion, the error state.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>

#include "transport/engine/completion_queue.h"
#include "transport/engine/context_link.h"
#include "transport/engine/counters.h"
#include "transport/engine/forced_naks.h"
#include "transport/engine/link_waiters.h"
#include "transport/engine/mr_table.h"
#include "transport/engine/packet_sink.h"
#include "transport/engine/shared_receive_queue.h"
#include "transport/engine/spec_observer.h"
#include "transport/engine/timing.h"
#include "transport/engine/types.h"
#include "transport/engine/work_queues.h"
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

/// The other end of the transport: from the attributes for a connected QP,
/// the current target for a DCI, the DCI being served for a DCT.
struct QpPeer {
  AddressVector av;
  uint32_t qpn = 0;
};

class Requester;
class Responder;
class XrcForwarder;

/// Locking: `mutex` is taken at the QP's entry points (qp.h) and held by
/// everything below them; nothing here takes it.
struct QpCore {
  QpCore(const QpInit& init, const QpEnv& env);

  /// RC, both XRC kinds and both DC kinds: acknowledged, retried, in order
  /// (IBA 9.7, A14; docs/dc.md).
  bool reliable() const noexcept {
    return init.type == QpType::kRc || init.type == QpType::kXrcSend ||
           init.type == QpType::kXrcRecv || is_dc();
  }
  bool is_dc() const noexcept { return init.type == QpType::kDci || init.type == QpType::kDct; }
  uint32_t mtu_bytes() const noexcept;
  bool sq_can_send() const noexcept;
  bool rq_can_receive() const noexcept;
  wire::Transport transport() const noexcept;
  /// An RC opcode under this QP's transport bits.
  uint8_t for_transport(uint8_t rc_opcode) const noexcept;
  void fill_address_headers(wire::PacketHeaders& h, const AddressVector& av) const noexcept;
  /// Finishes a packet built in `buf` and sends it to the peer.
  void emit(uint8_t* buf, size_t header_len, size_t payload_len) noexcept;
  /// Every packet of this QP leaves through here: the port's counters see it.
  /// False when the link discarded the packet. A packet the link queued
  /// stops the requester until resume_sending().
  bool transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) noexcept;
  void count_drop(std::atomic<uint64_t> PortCounters::*counter) noexcept;
  /// Reads the P_Key at the QP's pkey_index from its port's table.
  void refresh_pkey() noexcept;
  void complete_send(SendWqe& wqe, WcStatus status, uint32_t byte_len = 0) noexcept;
  void on_cq_overrun() noexcept;
  /// → ERR, flush both queues.
  void enter_error() noexcept;
  /// What entering ERR does besides the state change (also modify's path
  /// to ERR): the engines flush their queues.
  void flush_for_error() noexcept;

  std::mutex mutex;
  // The link queued a packet of this QP: like an HCA without link credits,
  // the requester sends nothing new until the link has room again.
  std::atomic<bool> link_busy{false};
  QpInit init;
  QpEnv env;
  QpAttr attr;
  QpPeer peer;
  WorkRing<SendWqe> sq;
  WorkRing<RecvWqe> rq;
  uint16_t pkey = 0xffff;        // the P_Key at attr.pkey_index of the QP's port
  uint32_t pkey_generation = 0;  // the port table's generation pkey was read at
  uint8_t tx_buf[wire::kMaxPacket];

  // The engines whose queues the error state flushes (set by Qp; xrc only
  // for an XRC receive QP).
  Requester* requester = nullptr;
  Responder* responder = nullptr;
  XrcForwarder* xrc = nullptr;
};

}  // namespace ibemu::engine
