#include "transport/engine/qp.h"

#include <cerrno>
#include <cstring>

#include "transport/engine/qp_state_machine.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

Qp::Qp(const QpInit& init, const QpEnv& env) : init_(init), env_(env) {
  // A DCI numbers its connections from the clock, so a DCI created again
  // under the same number is not taken for its predecessor (dc_initiator.cc).
  dci_last_connection_ = static_cast<uint32_t>(env_.clock->now() / 1000);
  attr_.max_send_wr = init.max_send_wr;
  attr_.max_recv_wr = init.max_recv_wr;
  attr_.max_send_sge = init.max_send_sge;
  attr_.max_recv_sge = init.max_recv_sge;
  attr_.max_inline_data = init.max_inline_data;
  sq_.reset(init.max_send_wr);
  rq_.reset(init.max_recv_wr);
}

uint32_t Qp::mtu_bytes() const noexcept { return 128u << attr_.path_mtu; }

// IBA 10.8.2: the send queue is processed in RTS (and drained in SQD).
bool Qp::sq_can_send() const noexcept {
  return attr_.qp_state == QpState::kRts || attr_.qp_state == QpState::kSqd;
}

// IBA 10.3.1: a QP accepts incoming requests from RTR on.
bool Qp::rq_can_receive() const noexcept {
  return attr_.qp_state == QpState::kRtr || attr_.qp_state == QpState::kRts ||
         attr_.qp_state == QpState::kSqd || attr_.qp_state == QpState::kSqe;
}

void Qp::reset_transport_state() noexcept {
  req_ = Requester{};
  comp_ = Completer{};
  resp_ = Responder{};
  // A verdict still owed belongs to the QP's past: its sequence number will
  // not match again.
  const uint32_t seq = fwd_.seq;
  fwd_ = Forwarding{};
  fwd_.seq = seq;
  sq_.reset(init_.max_send_wr);
  rq_.reset(init_.max_recv_wr);
  responses_out_.clear();
  dci_ = DcInitiator{};
  dct_forget_connections();
  held_acks_.clear();
}

int Qp::modify(const QpAttr& a, uint32_t mask) noexcept {
  std::lock_guard lock(mutex_);
  QpState from = attr_.qp_state;
  QpState to = (mask & kQpState) ? a.qp_state : from;
  if ((mask & kQpCurState) && a.cur_qp_state != from) return EINVAL;
  if (int err = check_transition(init_.type, from, to, mask)) return err;
  // Value checks (IBA 11.2.4.2): refuse before changing anything.
  if ((mask & kQpPathMtu) && (a.path_mtu < 1 || a.path_mtu > 5)) return EINVAL;
  if ((mask & kQpPort) && (a.port_num < 1 || !env_.ports)) return EINVAL;
  if ((mask & kQpPort) && env_.ports->port(a.port_num).port_guid == 0) return EINVAL;
  if ((mask & kQpMaxQpRdAtomic) && a.max_rd_atomic > DeviceLimits::kMaxQpInitRdAtom) return EINVAL;
  if ((mask & kQpMaxDestRdAtomic) && a.max_dest_rd_atomic > DeviceLimits::kMaxQpRdAtom)
    return EINVAL;
  if (mask & kQpPkeyIndex) {
    // An index into the port's P_Key table (IBA 11.2.4.2): within it.
    const uint8_t port = (mask & kQpPort) ? a.port_num : attr_.port_num;
    if (!env_.ports || a.pkey_index >= env_.ports->port(port).num_pkeys) return EINVAL;
  }
  if ((mask & kQpTimeout) && a.timeout > 31) return EINVAL;
  if ((mask & kQpRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kQpRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kQpMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  // A DC QP's address vector names only its port (and GRH): its peers come
  // with each WR (DCI) or each request (DCT).
  if ((mask & kQpAv) && a.ah.dlid == 0 && !a.ah.is_global && !is_dc()) return EINVAL;

  if (mask & kQpAccessFlags) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & kQpPkeyIndex) attr_.pkey_index = a.pkey_index;
  if (mask & kQpPort) attr_.port_num = a.port_num;
  if ((mask & (kQpPkeyIndex | kQpPort)) && env_.ports) refresh_pkey();
  if (mask & kQpQkey) attr_.qkey = a.qkey;
  if (mask & kQpAv) {
    attr_.ah = a.ah;
    if (!is_dc()) peer_.av = a.ah;
  }
  if (mask & kQpPathMtu) attr_.path_mtu = a.path_mtu;
  if (mask & kQpTimeout) attr_.timeout = a.timeout;
  if (mask & kQpRetryCnt) attr_.retry_cnt = a.retry_cnt;
  if (mask & kQpRnrRetry) attr_.rnr_retry = a.rnr_retry;
  if (mask & kQpRqPsn) {
    attr_.rq_psn = a.rq_psn & wire::kPsnMask;
    resp_.epsn = attr_.rq_psn;
  }
  if (mask & kQpMaxQpRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpMinRnrTimer) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpSqPsn) {
    attr_.sq_psn = a.sq_psn & wire::kPsnMask;
    req_.next_psn = attr_.sq_psn;
    req_.sent_end_psn = attr_.sq_psn;
    comp_.acked_psn = wire::psn_add(attr_.sq_psn, wire::kPsnMask);  // sq_psn - 1
  }
  if (mask & kQpMaxDestRdAtomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kQpDestQpn) {
    attr_.dest_qp_num = a.dest_qp_num & wire::kPsnMask;
    peer_.qpn = attr_.dest_qp_num;
  }

  attr_.qp_state = to;
  attr_.cur_qp_state = to;
  if (to == QpState::kRts && from == QpState::kRtr) {
    comp_.retries_left = attr_.retry_cnt;
    comp_.rnr_retries_left = attr_.rnr_retry;
  }
  if (to == QpState::kReset) {
    reset_transport_state();
    // As ConnectX does: completions of this QP not yet polled (the flushes
    // of its last ERR, say) go with its work queues, so a QP brought back up
    // from RESET does not hand its consumer stale errors.
    if (from != QpState::kReset) {
      if (init_.send_cq) init_.send_cq->purge_qp(init_.qpn);
      if (init_.recv_cq && init_.recv_cq != init_.send_cq) init_.recv_cq->purge_qp(init_.qpn);
    }
  }
  if (to == QpState::kErr && from != QpState::kErr) {
    xrc_abandon();
    flush_send_queue();
    flush_recv_queue();
    last_wqe_reached();
  }
  if (to == QpState::kSqd && from == QpState::kRts) {
    sq_drained_event_ = (mask & kQpEnSqdAsyncNotify) && a.en_sqd_async_notify;
    check_sq_drained();
  }
  if (to != QpState::kSqd) sq_drained_event_ = false;
  if (to == QpState::kRts) requester_pump();  // SQD → RTS resumes sending
  return 0;
}

QpAttr Qp::query() noexcept {
  std::lock_guard lock(mutex_);
  QpAttr a = attr_;
  a.sq_draining = attr_.qp_state == QpState::kSqd && !sq_drained();
  return a;
}

QpState Qp::state() noexcept {
  std::lock_guard lock(mutex_);
  return attr_.qp_state;
}

QpSnapshot Qp::snapshot() noexcept {
  std::lock_guard lock(mutex_);
  QpSnapshot s;
  s.qpn = init_.qpn;
  s.type = init_.type;
  s.state = attr_.qp_state;
  s.port = attr_.port_num;
  // A reliable requester may have rewound to resend; what it sends next that
  // is new starts at sent_end_psn. UC and UD never rewind.
  s.sq_psn = reliable() ? req_.sent_end_psn : req_.next_psn;
  s.rq_psn = resp_.epsn;
  s.dest_qpn = peer_.qpn;
  s.dlid = peer_.av.dlid;
  s.send_wrs = static_cast<uint32_t>(sq_.tail() - sq_.head());
  s.recv_wrs = static_cast<uint32_t>(rq_.tail() - rq_.head());
  s.max_send_wr = init_.max_send_wr;
  s.max_recv_wr = init_.max_recv_wr;
  if (reliable() && attr_.qp_state >= QpState::kRts && attr_.qp_state <= QpState::kSqd)
    s.unacked = static_cast<uint32_t>(wire::psn_diff(req_.sent_end_psn, comp_.acked_psn) - 1);
  return s;
}

int Qp::post_send(const SendWqe* wrs, int count, int* bad) noexcept {
  std::lock_guard lock(mutex_);
  // The WRs before a refused one stay posted (ibv_post_send: only *bad_wr and
  // those after it are not) and must go out now, not at the next post: pump
  // on every return.
  struct PumpOnReturn {
    Qp* qp;
    ~PumpOnReturn() { qp->requester_pump(); }
  } pump{this};
  for (int i = 0; i < count; ++i) {
    const SendWqe& w = wrs[i];
    *bad = i;
    // An XRC receive QP and a DCT have no send queue.
    if (init_.type == QpType::kXrcRecv || init_.type == QpType::kDct) return EINVAL;
    // IBA 10.8.2.1 / C10-29: posting to a QP in RESET, INIT or RTR is an
    // immediate error; in ERR the WR completes with a flush error.
    if (attr_.qp_state == QpState::kReset || attr_.qp_state == QpState::kInit ||
        attr_.qp_state == QpState::kRtr)
      return EINVAL;
    if (sq_.full()) return ENOMEM;
    if (w.num_sge < 0 || static_cast<uint32_t>(w.num_sge) > attr_.max_send_sge) return EINVAL;
    // A DCI's WR names its target DCT (mlx5dv_wr_set_dc_addr).
    if (init_.type == QpType::kDci && !is_local_operation(w.opcode) &&
        (w.remote_qpn == 0 || (w.av.dlid == 0 && !w.av.is_global)))
      return EINVAL;
    // UD carries SENDs only (IBA table 84).
    if (init_.type == QpType::kUd && w.opcode != WrOpcode::kSend &&
        w.opcode != WrOpcode::kSendWithImm)
      return EINVAL;
    switch (w.opcode) {
      case WrOpcode::kSend:
      case WrOpcode::kSendWithImm:
      case WrOpcode::kRdmaWrite:
      case WrOpcode::kRdmaWriteWithImm:
        break;
      case WrOpcode::kRdmaRead:
      case WrOpcode::kAtomicCmpAndSwp:
      case WrOpcode::kAtomicFetchAndAdd:
        // READ and atomics are RC operations (IBA table 84); data lands in
        // local memory, so inline makes no sense for them.
        if (!reliable() || (w.flags & kSendInline)) return EINVAL;
        break;
      case WrOpcode::kSendWithInv:
        if (!reliable()) return EINVAL;  // RC and XRC only (IBA table 84)
        break;
      case WrOpcode::kBindMw:
      case WrOpcode::kLocalInv:
        if (w.flags & kSendInline) return EINVAL;  // they carry no data
        break;
      default:
        return EINVAL;  // not offered by this HCA: refused at post time
    }
    uint64_t len = 0;
    for (int s = 0; s < w.num_sge; ++s) len += w.sge[s].length;
    if (len > DeviceLimits::kMaxMsgSize) return EINVAL;
    // An atomic moves exactly 8 bytes (IBA 9.4.5); its local buffer must hold them.
    if ((w.opcode == WrOpcode::kAtomicCmpAndSwp || w.opcode == WrOpcode::kAtomicFetchAndAdd) &&
        len < 8)
      return EINVAL;
    if ((w.flags & kSendInline) && len > attr_.max_inline_data) return EINVAL;
    SendWqe& q = sq_.push();
    q = w;
    q.length = static_cast<uint32_t>(len);
    q.started = false;
    q.signaled = init_.sq_sig_all || (w.flags & kSendSignaled);
    q.is_inline = false;
    if (w.flags & kSendInline) {
      // Inline data is copied at post time; the buffer may be reused at once.
      uint32_t off = 0;
      for (int s = 0; s < w.num_sge; ++s) {
        std::memcpy(q.inline_data + off, reinterpret_cast<const void*>(w.sge[s].addr),
                    w.sge[s].length);
        off += w.sge[s].length;
      }
      q.is_inline = true;
    }
    if (attr_.qp_state == QpState::kErr || attr_.qp_state == QpState::kSqe) flush_send_queue();
  }
  *bad = -1;
  return 0;
}

int Qp::post_recv(const RecvWqe* wrs, int count, int* bad) noexcept {
  std::lock_guard lock(mutex_);
  for (int i = 0; i < count; ++i) {
    const RecvWqe& w = wrs[i];
    *bad = i;
    if (attr_.qp_state == QpState::kReset) return EINVAL;  // C10-43
    if (init_.srq) return EINVAL;  // its receives go to the SRQ (ibv_post_srq_recv)
    // XRC QPs have no receive queue: an XRC receive QP delivers into the SRQ
    // each request names (IBA annex A14).
    if (init_.type == QpType::kXrcSend || init_.type == QpType::kXrcRecv || is_dc()) return EINVAL;
    if (rq_.full()) return ENOMEM;
    if (w.num_sge < 0 || static_cast<uint32_t>(w.num_sge) > attr_.max_recv_sge) return EINVAL;
    RecvWqe& q = rq_.push();
    q = w;
    uint64_t len = 0;
    for (int s = 0; s < w.num_sge; ++s) len += w.sge[s].length;
    q.length = static_cast<uint32_t>(std::min<uint64_t>(len, UINT32_MAX));
    if (attr_.qp_state == QpState::kErr) flush_recv_queue();
  }
  *bad = -1;
  return 0;
}

void Qp::complete_send(SendWqe& wqe, WcStatus status, uint32_t byte_len) noexcept {
  // Unsignaled WRs complete silently on success only (IBA 10.7.2.2, C10-98).
  if (!wqe.signaled && status == WcStatus::kSuccess) return;
  Completion c;
  c.wr_id = wqe.wr_id;
  c.status = status;
  c.qp_num = init_.qpn;
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
    default:
      c.opcode = WcOpcode::kSend;
      break;
  }
  if (init_.send_cq && !init_.send_cq->push(c, false)) on_cq_overrun();
}

void Qp::complete_recv(const RecvWqe& wqe, WcStatus status, WcOpcode op, uint32_t byte_len,
                       uint32_t imm, uint32_t wc_flags, bool solicited, uint16_t slid) noexcept {
  Completion c = recv_completion(wqe, status, op, byte_len, imm, wc_flags, slid);
  c.qp_num = init_.qpn;
  c.src_qp = peer_.qpn;
  c.sl = peer_.av.sl;
  push_recv_completion(c, solicited);
}

void Qp::push_recv_completion(const Completion& c, bool solicited) noexcept {
  // A WQE taken from another context's SRQ completes on that SRQ's CQ, which
  // only its owner may touch.
  if (fwd_.held_srqn) {
    xrc_send_completion(fwd_.held_srqn, c, solicited);
    return;
  }
  if (init_.recv_cq && !init_.recv_cq->push(c, solicited)) on_cq_overrun();
}

// A completion that its CQ cannot take (IBA 11.4.2.1): the CQ is in error and
// the work queue can no longer report anything — a catastrophic work queue
// error (QP_FATAL, IBA 11.6.3.1), and the QP goes to the error state.
void Qp::on_cq_overrun() noexcept {
  if (attr_.qp_state == QpState::kErr) return;
  enter_error();
  if (env_.on_event) env_.on_event(init_.qpn, QpEvent::kFatal);
}

void Qp::flush_send_queue() noexcept {
  while (!sq_.empty()) {
    complete_send(sq_.at(sq_.head()), WcStatus::kWrFlushErr);
    sq_.pop();
  }
  req_.cursor = sq_.head();
  req_.cursor_offset = 0;
}

void Qp::flush_recv_queue() noexcept {
  // With an SRQ only the WQE of a message in progress is this QP's; the rest
  // stay for the other QPs (IBA 10.2.9.5.3).
  while (RecvWqe* w = recv_current()) {
    complete_recv(*w, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, false, 0);
    recv_done();
  }
  resp_.in_send = false;
}

// An XRC receive QP has no receive queue: a WQE it holds came from an SRQ,
// here or in another context.
bool Qp::recv_ready() noexcept {
  if (uses_srq()) return init_.srq && !init_.srq->empty();
  return !rq_.empty();
}

RecvWqe* Qp::recv_take() noexcept {
  if (!uses_srq()) return rq_.empty() ? nullptr : &rq_.at(rq_.head());
  if (!resp_.srq_wqe_held && init_.srq) resp_.srq_wqe_held = init_.srq->take(&resp_.srq_wqe);
  return resp_.srq_wqe_held ? &resp_.srq_wqe : nullptr;
}

RecvWqe* Qp::recv_current() noexcept {
  if (uses_srq()) return resp_.srq_wqe_held ? &resp_.srq_wqe : nullptr;
  return rq_.empty() ? nullptr : &rq_.at(rq_.head());
}

void Qp::recv_done() noexcept {
  if (uses_srq()) {
    resp_.srq_wqe_held = false;
    fwd_.held_srqn = 0;
  } else {
    rq_.pop();
  }
}

// IBA 11.6.3.1 / 10.3.1: a QP on an SRQ in the error state will take no
// further WQE from it; the consumer learns so before it destroys the QP.
void Qp::last_wqe_reached() noexcept {
  if ((init_.srq || fwd_.srqn) && env_.on_event) env_.on_event(init_.qpn, QpEvent::kLastWqeReached);
}

// IBA 10.3.1.4: in SQD the messages already begun are finished; the send
// queue is drained when none is left outstanding.
bool Qp::sq_drained() const noexcept {
  return (sq_.empty() || !sq_.at(sq_.head()).started) && req_.cursor_offset == 0;
}

// The consumer that asked for it hears once that the drain is over
// (IBV_EVENT_SQ_DRAINED, IBA 11.6.3.2).
void Qp::check_sq_drained() noexcept {
  if (!sq_drained_event_ || attr_.qp_state != QpState::kSqd || !sq_drained()) return;
  sq_drained_event_ = false;
  if (env_.on_event) env_.on_event(init_.qpn, QpEvent::kSqDrained);
}

void Qp::device_fatal() noexcept {
  std::lock_guard lock(mutex_);
  enter_error();
}

void Qp::enter_error() noexcept {
  if (attr_.qp_state == QpState::kErr) return;
  xrc_abandon();
  attr_.qp_state = QpState::kErr;
  attr_.cur_qp_state = QpState::kErr;
  flush_send_queue();
  flush_recv_queue();
  last_wqe_reached();
}

void Qp::refresh_pkey() noexcept {
  pkey_generation_ = env_.ports->pkey_generation();
  pkey_ = env_.ports->port(attr_.port_num).pkey(attr_.pkey_index);
}

void Qp::receive(const wire::PacketView& pkt) noexcept {
  std::lock_guard lock(mutex_);
  // IBA 10.9.3: a packet of another partition, or between two
  // limited members, is dropped and counted before anything looks at it.
  // The P_Key is looked up again only after an SM changed a table, not for
  // every packet.
  if (env_.ports && env_.ports->pkey_generation() != pkey_generation_) refresh_pkey();
  if (!pkeys_match(pkt.bth().pkey(), pkey_)) {
    count_drop(&PortCounters::rcv_pkey_violations);
    return;
  }
  if (init_.type == QpType::kUd)
    datagram_receive(pkt);
  else if (init_.type == QpType::kDct)
    dct_receive(pkt);
  else if (pkt.info->flags & wire::kIsResponse)
    completer_receive(pkt);
  else if (init_.type != QpType::kDci)  // an initiator only sends
    responder_receive(pkt);
}

Nanos Qp::on_timer(Nanos now) noexcept {
  std::lock_guard lock(mutex_);
  Nanos next = 0;
  for (const Nanos due : {completer_timer(now), xrc_timer(now), resend_held_acks(now)})
    if (due && (!next || due < next)) next = due;
  return next;
}

}  // namespace ibemu::engine
