#include "transport/engine/qp.h"

#include <cerrno>
#include <cstring>

#include "transport/engine/qp_state_machine.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

Qp::Qp(const QpInit& init, const QpEnv& env)
    : core_(init, env),
      completer_(core_, requester_),
      requester_(core_, completer_),
      responder_(core_) {
  if (init.type == QpType::kUd) {
    datagram_.emplace(core_, requester_, responder_);
    requester_.attach(&*datagram_);
  }
  if (init.type == QpType::kDct) dc_target_.emplace(core_, responder_);
  if (init.type == QpType::kXrcRecv) xrc_.emplace(core_, responder_);
  responder_.attach(dc_target_ ? &*dc_target_ : nullptr, xrc_ ? &*xrc_ : nullptr);
  core_.requester = &requester_;
  core_.responder = &responder_;
  core_.xrc = xrc_ ? &*xrc_ : nullptr;
}

void Qp::reset_transport_state() noexcept {
  requester_.reset();
  completer_.reset();
  responder_.reset();
  if (xrc_) xrc_->reset();
  core_.sq.reset(core_.init.max_send_wr);
  core_.rq.reset(core_.init.max_recv_wr);
  if (dc_target_) dc_target_->forget_connections();
}

int Qp::modify(const QpAttr& a, uint32_t mask) noexcept {
  std::lock_guard lock(core_.mutex);
  QpState from = core_.attr.qp_state;
  QpState to = (mask & kQpState) ? a.qp_state : from;
  if ((mask & kQpCurState) && a.cur_qp_state != from) return EINVAL;
  if (int err = check_transition(core_.init.type, from, to, mask)) return err;
  // Value checks (IBA 11.2.4.2): refuse before changing anything.
  if ((mask & kQpPathMtu) && (a.path_mtu < 1 || a.path_mtu > 5)) return EINVAL;
  if ((mask & kQpPort) && (a.port_num < 1 || !core_.env.ports)) return EINVAL;
  if ((mask & kQpPort) && core_.env.ports->port(a.port_num).port_guid == 0) return EINVAL;
  if ((mask & kQpMaxQpRdAtomic) && a.max_rd_atomic > DeviceLimits::kMaxQpInitRdAtom) return EINVAL;
  if ((mask & kQpMaxDestRdAtomic) && a.max_dest_rd_atomic > DeviceLimits::kMaxQpRdAtom)
    return EINVAL;
  if (mask & kQpPkeyIndex) {
    // An index into the port's P_Key table (IBA 11.2.4.2): within it.
    const uint8_t port = (mask & kQpPort) ? a.port_num : core_.attr.port_num;
    if (!core_.env.ports || a.pkey_index >= core_.env.ports->port(port).num_pkeys) return EINVAL;
  }
  if ((mask & kQpTimeout) && a.timeout > 31) return EINVAL;
  if ((mask & kQpRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kQpRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kQpMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  // A DC QP's address vector names only its port (and GRH): its peers come
  // with each WR (DCI) or each request (DCT).
  if ((mask & kQpAv) && a.ah.dlid == 0 && !a.ah.is_global && !is_dc()) return EINVAL;

  if (mask & kQpAccessFlags) core_.attr.qp_access_flags = a.qp_access_flags;
  if (mask & kQpPkeyIndex) core_.attr.pkey_index = a.pkey_index;
  if (mask & kQpPort) {
    core_.attr.port_num = a.port_num;
    port_hint_.store(a.port_num, std::memory_order_relaxed);
  }
  if ((mask & (kQpPkeyIndex | kQpPort)) && core_.env.ports) core_.refresh_pkey();
  if (mask & kQpQkey) core_.attr.qkey = a.qkey;
  if (mask & kQpAv) {
    core_.attr.ah = a.ah;
    if (!is_dc()) core_.peer.av = a.ah;
  }
  if (mask & kQpPathMtu) core_.attr.path_mtu = a.path_mtu;
  if (mask & kQpTimeout) core_.attr.timeout = a.timeout;
  if (mask & kQpRetryCnt) core_.attr.retry_cnt = a.retry_cnt;
  if (mask & kQpRnrRetry) core_.attr.rnr_retry = a.rnr_retry;
  if (mask & kQpRqPsn) {
    core_.attr.rq_psn = a.rq_psn & wire::kPsnMask;
    responder_.expect(core_.attr.rq_psn);
  }
  if (mask & kQpMaxQpRdAtomic) core_.attr.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpMinRnrTimer) core_.attr.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpSqPsn) {
    core_.attr.sq_psn = a.sq_psn & wire::kPsnMask;
    requester_.start_at(core_.attr.sq_psn);
    completer_.start_at(core_.attr.sq_psn);
  }
  if (mask & kQpMaxDestRdAtomic) core_.attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kQpDestQpn) {
    core_.attr.dest_qp_num = a.dest_qp_num & wire::kPsnMask;
    core_.peer.qpn = core_.attr.dest_qp_num;
  }

  core_.attr.qp_state = to;
  core_.attr.cur_qp_state = to;
  if (to == QpState::kRts && from == QpState::kRtr) {
    completer_.restore_retries();
  }
  if (to == QpState::kReset) {
    reset_transport_state();
    // As ConnectX does: completions of this QP not yet polled (the flushes
    // of its last ERR, say) go with its work queues, so a QP brought back up
    // from RESET does not hand its consumer stale errors.
    if (from != QpState::kReset) {
      if (core_.init.send_cq) core_.init.send_cq->purge_qp(core_.init.qpn);
      if (core_.init.recv_cq && core_.init.recv_cq != core_.init.send_cq)
        core_.init.recv_cq->purge_qp(core_.init.qpn);
    }
  }
  if (to == QpState::kErr && from != QpState::kErr) {
    core_.flush_for_error();
  }
  if (to == QpState::kSqd && from == QpState::kRts) {
    requester_.notify_when_drained((mask & kQpEnSqdAsyncNotify) && a.en_sqd_async_notify);
    requester_.check_drained();
  }
  if (to != QpState::kSqd) requester_.notify_when_drained(false);
  if (to == QpState::kRts) requester_.pump();  // SQD → RTS resumes sending
  return 0;
}

QpAttr Qp::query() noexcept {
  std::lock_guard lock(core_.mutex);
  QpAttr a = core_.attr;
  a.sq_draining = core_.attr.qp_state == QpState::kSqd && !requester_.drained();
  return a;
}

QpState Qp::state() noexcept {
  std::lock_guard lock(core_.mutex);
  return core_.attr.qp_state;
}

QpSnapshot Qp::snapshot() noexcept {
  std::lock_guard lock(core_.mutex);
  QpSnapshot s;
  s.qpn = core_.init.qpn;
  s.type = core_.init.type;
  s.state = core_.attr.qp_state;
  s.port = core_.attr.port_num;
  // A reliable requester may have rewound to resend; what it sends next that
  // is new starts at sent_end_psn. UC and UD never rewind.
  s.sq_psn = reliable() ? requester_.sent_end_psn() : requester_.next_psn();
  s.rq_psn = responder_.epsn();
  s.dest_qpn = core_.peer.qpn;
  s.dlid = core_.peer.av.dlid;
  s.send_wrs = static_cast<uint32_t>(core_.sq.tail() - core_.sq.head());
  s.recv_wrs = static_cast<uint32_t>(core_.rq.tail() - core_.rq.head());
  s.max_send_wr = core_.init.max_send_wr;
  s.max_recv_wr = core_.init.max_recv_wr;
  if (reliable() && core_.attr.qp_state >= QpState::kRts && core_.attr.qp_state <= QpState::kSqd)
    s.unacked = static_cast<uint32_t>(
        wire::psn_diff(requester_.sent_end_psn(), completer_.acked_psn()) - 1);
  return s;
}

int Qp::post_send(const SendWqe* wrs, int count, int* bad) noexcept {
  std::lock_guard lock(core_.mutex);
  // The WRs before a refused one stay posted (ibv_post_send: only *bad_wr and
  // those after it are not) and must go out now, not at the next post: pump
  // on every return.
  struct PumpOnReturn {
    Requester* requester;
    ~PumpOnReturn() { requester->pump(); }
  } pump{&requester_};
  for (int i = 0; i < count; ++i) {
    const SendWqe& w = wrs[i];
    *bad = i;
    // An XRC receive QP and a DCT have no send queue.
    if (core_.init.type == QpType::kXrcRecv || core_.init.type == QpType::kDct) return EINVAL;
    // IBA 10.8.2.1 / C10-29: posting to a QP in RESET, INIT or RTR is an
    // immediate error; in ERR the WR completes with a flush error.
    if (core_.attr.qp_state == QpState::kReset || core_.attr.qp_state == QpState::kInit ||
        core_.attr.qp_state == QpState::kRtr)
      return EINVAL;
    if (core_.sq.full()) return ENOMEM;
    if (w.num_sge < 0 || static_cast<uint32_t>(w.num_sge) > core_.attr.max_send_sge) return EINVAL;
    // A DCI's WR names its target DCT (mlx5dv_wr_set_dc_addr).
    if (core_.init.type == QpType::kDci && !is_local_operation(w.opcode) &&
        (w.remote_qpn == 0 || (w.av.dlid == 0 && !w.av.is_global)))
      return EINVAL;
    // UD carries SENDs only (IBA table 84).
    if (core_.init.type == QpType::kUd && w.opcode != WrOpcode::kSend &&
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
      case WrOpcode::kRegMr:
        // A kernel consumer's fast registration, on its RC and UC QPs.
        if (core_.init.type != QpType::kRc && core_.init.type != QpType::kUc) return EINVAL;
        if (w.flags & kSendInline) return EINVAL;
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
    if ((w.flags & kSendInline) && len > core_.attr.max_inline_data) return EINVAL;
    SendWqe& q = core_.sq.push();
    q = w;
    q.length = static_cast<uint32_t>(len);
    q.started = false;
    q.signaled = core_.init.sq_sig_all || (w.flags & kSendSignaled);
    q.is_inline = false;
    if (w.flags & kSendInline) {
      // Inline data is copied at post time; the buffer may be reused at once.
      uint32_t off = 0;
      for (int s = 0; s < w.num_sge; ++s) {
        // An empty SGE may carry no address at all (UCX posts one with NULL).
        if (w.sge[s].length == 0) continue;
        std::memcpy(q.inline_data + off, reinterpret_cast<const void*>(w.sge[s].addr),
                    w.sge[s].length);
        off += w.sge[s].length;
      }
      q.is_inline = true;
    }
    if (core_.attr.qp_state == QpState::kErr || core_.attr.qp_state == QpState::kSqe)
      requester_.flush();
  }
  *bad = -1;
  return 0;
}

int Qp::post_recv(const RecvWqe* wrs, int count, int* bad) noexcept {
  std::lock_guard lock(core_.mutex);
  for (int i = 0; i < count; ++i) {
    const RecvWqe& w = wrs[i];
    *bad = i;
    if (core_.attr.qp_state == QpState::kReset) return EINVAL;  // C10-43
    if (core_.init.srq) return EINVAL;  // its receives go to the SRQ (ibv_post_srq_recv)
    // XRC QPs have no receive queue: an XRC receive QP delivers into the SRQ
    // each request names (IBA annex A14).
    if (core_.init.type == QpType::kXrcSend || core_.init.type == QpType::kXrcRecv || is_dc())
      return EINVAL;
    if (core_.rq.full()) return ENOMEM;
    if (w.num_sge < 0 || static_cast<uint32_t>(w.num_sge) > core_.attr.max_recv_sge) return EINVAL;
    RecvWqe& q = core_.rq.push();
    q = w;
    uint64_t len = 0;
    for (int s = 0; s < w.num_sge; ++s) len += w.sge[s].length;
    q.length = static_cast<uint32_t>(std::min<uint64_t>(len, UINT32_MAX));
    if (core_.attr.qp_state == QpState::kErr) responder_.flush();
  }
  *bad = -1;
  return 0;
}

void Qp::device_fatal() noexcept {
  std::lock_guard lock(core_.mutex);
  core_.enter_error();
}

void Qp::receive(const wire::PacketView& pkt) noexcept {
  std::lock_guard lock(core_.mutex);
  // IBA 10.9.3: a packet of another partition, or between two
  // limited members, is dropped and counted before anything looks at it.
  // The P_Key is looked up again only after an SM changed a table, not for
  // every packet.
  if (core_.env.ports && core_.env.ports->pkey_generation() != core_.pkey_generation)
    core_.refresh_pkey();
  if (!pkeys_match(pkt.bth().pkey(), core_.pkey)) {
    core_.count_drop(&PortCounters::rcv_pkey_violations);
    return;
  }
  if (core_.init.type == QpType::kUd)
    datagram_->receive(pkt);
  else if (core_.init.type == QpType::kDct)
    dc_target_->receive(pkt);
  else if (pkt.info->flags & wire::kIsResponse)
    completer_.receive(pkt);
  else if (core_.init.type != QpType::kDci)  // an initiator only sends
    responder_.receive(pkt);
}

Nanos Qp::on_timer(Nanos now) noexcept {
  std::lock_guard lock(core_.mutex);
  Nanos next = 0;
  for (const Nanos due : {completer_.on_timer(now), xrc_ ? xrc_->timer(now) : Nanos{0},
                          responder_.resend_held_acks(now)})
    if (due && (!next || due < next)) next = due;
  return next;
}

void Qp::resume_sending() noexcept {
  if (!core_.link_busy.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(core_.mutex);
  core_.link_busy.store(false, std::memory_order_relaxed);
  responder_.send_queued();
  requester_.pump();
}

void Qp::release_held_acks() noexcept {
  std::lock_guard lock(core_.mutex);
  responder_.resend_held_acks(core_.env.clock->now());
}

void Qp::receive_verdict(const XrcVerdict& v) noexcept {
  std::lock_guard lock(core_.mutex);
  if (xrc_)
    xrc_->receive_verdict(v);
  else
    XrcForwarder::drop_verdict(core_, v);
}

}  // namespace ibemu::engine
