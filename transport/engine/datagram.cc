// Unreliable Datagram service (IBA 9.8.4, 10.2.4, 11.4.1.1): every message is
// one packet, addressed by its work request (address vector, destination QP,
// Q_Key) and never acknowledged. The receiver checks the Q_Key, places the
// GRH (or nothing) in the first 40 bytes of the receive buffer, and drops
// silently what it cannot take.
#include <cstring>

#include "transport/engine/datagram.h"

#include "transport/engine/requester.h"
#include "transport/engine/responder.h"
#include "transport/wire/opcode.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

namespace {
// IBA 11.4.1.1: a UD receive buffer starts with room for the GRH.
constexpr uint32_t kGrhArea = 40;
// IBA 10.2.4: a Q_Key with the high bit set in a send WR means "use the QP's
// own Q_Key" (only privileged consumers may own such keys).
constexpr uint32_t kUseQpQkey = 0x80000000u;
}  // namespace

DatagramPath::DatagramPath(QpCore& qp, Requester& requester, Responder& responder)
    : qp_(qp), requester_(requester), responder_(responder) {}

void DatagramPath::send(SendWqe& wqe) noexcept {
  const uint32_t mtu = 128u << qp_.env.ports->port(qp_.attr.port_num).active_mtu;
  if (wqe.length > mtu) {
    // C10-?: a UD message longer than the PMTU is a local length error. The
    // send queue stops (SQE, IBA 10.3.1): the rest is flushed, receives go on.
    qp_.complete_send(wqe, WcStatus::kLocLenErr);
    qp_.sq.pop();
    requester_.flush();
    qp_.attr.qp_state = qp_.attr.cur_qp_state = QpState::kSqe;
    return;
  }
  wire::PacketHeaders h;
  qp_.fill_address_headers(h, wqe.av);
  const bool imm = wqe.opcode == WrOpcode::kSendWithImm;
  h.bth.set_opcode(
      static_cast<uint8_t>(imm ? wire::Opcode::kUdSendOnlyImm : wire::Opcode::kUdSendOnly));
  h.bth.set_se(wqe.flags & kSendSolicited);
  h.bth.set_dest_qp(wqe.remote_qpn);
  h.bth.set_psn(requester_.next_psn());
  h.deth.set_qkey((wqe.remote_qkey & kUseQpQkey) ? qp_.attr.qkey : wqe.remote_qkey);
  h.deth.set_src_qp(qp_.init.qpn);
  h.immdt.set_imm(wqe.imm_or_rkey);
  const size_t hlen = wire::write_headers(qp_.tx_buf, h);
  uint8_t* data = qp_.tx_buf + hlen;
  if (wqe.is_inline) {
    std::memcpy(data, wqe.inline_data, wqe.length);
  } else if (copy_from_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, 0, data, wqe.length) !=
             MrCheck::kOk) {
    requester_.fail_wqe(WcStatus::kLocProtErr);
    return;
  }
  const size_t len =
      wire::finalize_packet(qp_.tx_buf, hlen, wqe.length, qp_.env.sink->wants_crcs());
  qp_.transmit(wqe.av.dlid, wqe.remote_qpn, qp_.tx_buf, len);
  // Nothing comes back: the datagram is complete once it is on the wire.
  requester_.datagram_sent();
  qp_.complete_send(wqe, WcStatus::kSuccess, wqe.length);
  qp_.sq.pop();
}

void DatagramPath::receive(const wire::PacketView& pkt) noexcept {
  if (!qp_.rq_can_receive()) return;
  if (pkt.info->transport != wire::Transport::kUd || !(pkt.info->flags & wire::kIsSend)) return;
  const wire::Deth deth = pkt.deth();
  if (deth.qkey() != qp_.attr.qkey) {
    qp_.count_drop(&PortCounters::rcv_qkey_violations);  // IBA 10.2.4, C10-15
    return;
  }
  const RecvWqe* taken = responder_.recv_ready() ? responder_.recv_take() : nullptr;
  if (!taken) {
    qp_.count_drop(&PortCounters::rcv_no_receive);  // no RNR for datagrams: dropped
    return;
  }
  const RecvWqe& wqe = *taken;
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  Completion c;
  c.wr_id = wqe.wr_id;
  c.qp_num = qp_.init.qpn;
  c.opcode = WcOpcode::kRecv;
  // A datagram the receive WQE cannot take fails that WQE and the QP.
  auto fail = [&](WcStatus status) {
    c.status = status;
    responder_.recv_done();
    responder_.push_recv_completion(c, true);
    qp_.enter_error();
  };
  if (uint64_t(n) + kGrhArea > wqe.length) return fail(WcStatus::kLocLenErr);
  MrCheck placed = MrCheck::kOk;
  if (pkt.has_grh)
    placed = copy_to_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, 0,
                          pkt.data + wire::Lrh::kSize, kGrhArea);
  if (placed == MrCheck::kOk && n)
    placed =
        copy_to_sges(*qp_.env.mrs, qp_.init.pd, wqe.sge, wqe.num_sge, kGrhArea, pkt.payload(), n);
  if (placed != MrCheck::kOk) return fail(WcStatus::kLocProtErr);
  c.status = WcStatus::kSuccess;
  c.byte_len = n + kGrhArea;
  c.src_qp = deth.src_qp();
  c.slid = pkt.lrh().slid();
  c.sl = pkt.lrh().sl();
  c.pkey_index = 0;
  const PortAddress me = qp_.env.ports->port(qp_.attr.port_num);
  c.dlid_path_bits = static_cast<uint8_t>(pkt.lrh().dlid() & ((1u << me.lmc) - 1));
  if (pkt.has_grh) c.wc_flags |= kWcGrh;
  if (pkt.info->flags & wire::kHasImmDt) {
    c.wc_flags |= kWcWithImm;
    c.imm_data = pkt.immdt().imm();
  }
  responder_.recv_done();
  responder_.push_recv_completion(c, pkt.bth().se());
}

}  // namespace ibemu::engine
