// The state the engines of a QP share, and the actions they all take the
// same way (qp_core.h).
#include "transport/engine/qp_core.h"

#include "transport/engine/requester.h"
#include "transport/engine/responder.h"
#include "transport/engine/xrc_forwarding.h"

namespace ibemu::engine {

QpCore::QpCore(const QpInit& init, const QpEnv& env) : init(init), env(env) {
  attr.max_send_wr = init.max_send_wr;
  attr.max_recv_wr = init.max_recv_wr;
  attr.max_send_sge = init.max_send_sge;
  attr.max_recv_sge = init.max_recv_sge;
  attr.max_inline_data = init.max_inline_data;
  sq.reset(init.max_send_wr);
  rq.reset(init.max_recv_wr);
}

uint32_t QpCore::mtu_bytes() const noexcept { return 128u << attr.path_mtu; }

// IBA 10.8.2: the send queue is processed in RTS (and drained in SQD).
bool QpCore::sq_can_send() const noexcept {
  return attr.qp_state == QpState::kRts || attr.qp_state == QpState::kSqd;
}

// IBA 10.3.1: a QP accepts incoming requests from RTR on.
bool QpCore::rq_can_receive() const noexcept {
  return attr.qp_state == QpState::kRtr || attr.qp_state == QpState::kRts ||
         attr.qp_state == QpState::kSqd || attr.qp_state == QpState::kSqe;
}

// UC and XRC use RC's opcode layout with their own transport bits (IBA 9.2.1,
// table 35; annex A14).
uint8_t QpCore::for_transport(uint8_t rc_opcode) const noexcept {
  return static_cast<uint8_t>(rc_opcode | static_cast<uint8_t>(transport()) << 5);
}

wire::Transport QpCore::transport() const noexcept {
  switch (init.type) {
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
void QpCore::fill_address_headers(wire::PacketHeaders& h, const AddressVector& av) const noexcept {
  const PortAddress me = env.ports->port(attr.port_num);
  engine::fill_address_headers(h, av, me);
  h.bth.set_pkey(me.pkey(attr.pkey_index));  // the QP's partition (IBA 10.9.2)
}

void QpCore::emit(uint8_t* buf, size_t header_len, size_t payload_len) noexcept {
  size_t len = wire::finalize_packet(buf, header_len, payload_len, env.sink->wants_crcs());
  transmit(peer.av.dlid, peer.qpn, buf, len);
}

bool QpCore::transmit(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) noexcept {
  const TxResult result = env.sink->transmit(dlid, dest_qp, packet, len);
  if (result == TxResult::kQueued && !link_busy.exchange(true, std::memory_order_relaxed) &&
      env.link_waiters)
    env.link_waiters->add(init.qpn);
  if (env.counters) {
    PortCounters& c = env.counters->at(attr.port_num);
    c.xmit_packets++;
    c.xmit_bytes += len;
    if (result == TxResult::kNoRoute) c.xmit_discards++;
  }
  return result == TxResult::kSent || result == TxResult::kQueued;
}

void QpCore::count_drop(std::atomic<uint64_t> PortCounters::*counter) noexcept {
  if (env.counters) (env.counters->at(attr.port_num).*counter)++;
}

void QpCore::refresh_pkey() noexcept {
  pkey_generation = env.ports->pkey_generation();
  pkey = env.ports->port(attr.port_num).pkey(attr.pkey_index);
}

void QpCore::complete_send(SendWqe& wqe, WcStatus status, uint32_t byte_len) noexcept {
  // Unsignaled WRs complete silently on success only (IBA 10.7.2.2, C10-98).
  if (!wqe.signaled && status == WcStatus::kSuccess) return;
  Completion c;
  c.wr_id = wqe.wr_id;
  c.status = status;
  c.qp_num = init.qpn;
  c.byte_len = byte_len;
  switch (wqe.opcode) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      c.opcode = WcOpcode::kRdmaWrite;
      break;
    case WrOpcode::kRdmaRead:
      c.opcode = WcOpcode::kRdmaRead;
      break;
    case WrOpcode::kAtomicCmpAndSwp:
      c.opcode = WcOpcode::kCompSwap;
      break;
    case WrOpcode::kAtomicFetchAndAdd:
      c.opcode = WcOpcode::kFetchAdd;
      break;
    case WrOpcode::kLocalInv:
      c.opcode = WcOpcode::kLocalInv;
      break;
    case WrOpcode::kBindMw:
      c.opcode = WcOpcode::kBindMw;
      break;
    case WrOpcode::kRegMr:
      c.opcode = WcOpcode::kRegMr;
      break;
    default:
      c.opcode = WcOpcode::kSend;
      break;
  }
  if (init.send_cq && !init.send_cq->push(c, false)) on_cq_overrun();
}

// A completion that its CQ cannot take (IBA 11.4.2.1): the CQ is in error and
// the work queue can no longer report anything — a catastrophic work queue
// error (QP_FATAL, IBA 11.6.3.1), and the QP goes to the error state.
void QpCore::on_cq_overrun() noexcept {
  if (attr.qp_state == QpState::kErr) return;
  enter_error();
  if (env.on_event) env.on_event(init.qpn, QpEvent::kFatal);
}

void QpCore::enter_error() noexcept {
  if (attr.qp_state == QpState::kErr) return;
  attr.qp_state = QpState::kErr;
  attr.cur_qp_state = QpState::kErr;
  flush_for_error();
}

void QpCore::flush_for_error() noexcept {
  if (xrc) xrc->abandon();
  requester->flush();
  responder->flush();
  responder->last_wqe_reached();
}

}  // namespace ibemu::engine
