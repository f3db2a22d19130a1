// Unreliable Datagram service (IBA 9.8.4, 10.2.4, 11.4.1.1): every message is
// one packet, addressed by its work request (address vector, destination QP,
// Q_Key) and never acknowledged. The receiver checks the Q_Key, places the
// GRH (or nothing) in the first 40 bytes of the receive buffer, and drops
// silently what it cannot take.
#include <cstring>

#include "transport/engine/qp.h"
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

void Qp::count_drop(std::atomic<uint64_t> PortCounters::*counter) noexcept {
  if (env_.counters) (env_.counters->at(attr_.port_num).*counter)++;
}

void Qp::datagram_send(SendWqe& wqe) noexcept {
  const uint32_t mtu = 128u << env_.ports->port(attr_.port_num).active_mtu;
  if (wqe.length > mtu) {
    // C10-?: a UD message longer than the PMTU is a local length error. The
    // send queue stops (SQE, IBA 10.3.1): the rest is flushed, receives go on.
    complete_send(wqe, WcStatus::kLocLenErr);
    sq_.pop();
    flush_send_queue();
    attr_.qp_state = attr_.cur_qp_state = QpState::kSqe;
    return;
  }
  wire::PacketHeaders h;
  fill_address_headers(h, wqe.av);
  const bool imm = wqe.opcode == WrOpcode::kSendWithImm;
  h.bth.set_opcode(
      static_cast<uint8_t>(imm ? wire::Opcode::kUdSendOnlyImm : wire::Opcode::kUdSendOnly));
  h.bth.set_se(wqe.flags & kSendSolicited);
  h.bth.set_dest_qp(wqe.remote_qpn);
  h.bth.set_psn(req_.next_psn);
  h.deth.set_qkey((wqe.remote_qkey & kUseQpQkey) ? attr_.qkey : wqe.remote_qkey);
  h.deth.set_src_qp(init_.qpn);
  h.immdt.set_imm(wqe.imm_or_rkey);
  const size_t hlen = wire::write_headers(tx_buf_, h);
  uint8_t* data = tx_buf_ + hlen;
  if (wqe.is_inline) {
    std::memcpy(data, wqe.inline_data, wqe.length);
  } else if (copy_from_sges(*env_.mrs, init_.pd, wqe.sge, wqe.num_sge, 0, data, wqe.length) !=
             MrCheck::kOk) {
    requester_fail_wqe(WcStatus::kLocProtErr);
    return;
  }
  const size_t len = wire::finalize_packet(tx_buf_, hlen, wqe.length, env_.sink->wants_crcs());
  transmit(wqe.av.dlid, wqe.remote_qpn, tx_buf_, len);
  req_.next_psn = wire::psn_add(req_.next_psn, 1);
  // Nothing comes back: the datagram is complete once it is on the wire.
  ++req_.cursor;
  complete_send(wqe, WcStatus::kSuccess, wqe.length);
  sq_.pop();
}

void Qp::datagram_receive(const wire::PacketView& pkt) noexcept {
  if (!rq_can_receive()) return;
  if (pkt.info->transport != wire::Transport::kUd || !(pkt.info->flags & wire::kIsSend)) return;
  const wire::Deth deth = pkt.deth();
  if (deth.qkey() != attr_.qkey) {
    count_drop(&PortCounters::rcv_qkey_violations);  // IBA 10.2.4, C10-15
    return;
  }
  const RecvWqe* taken = recv_ready() ? recv_take() : nullptr;
  if (!taken) {
    count_drop(&PortCounters::rcv_no_receive);  // no RNR for datagrams: dropped
    return;
  }
  const RecvWqe& wqe = *taken;
  const uint32_t n = static_cast<uint32_t>(pkt.payload_len);
  Completion c;
  c.wr_id = wqe.wr_id;
  c.qp_num = init_.qpn;
  c.opcode = WcOpcode::kRecv;
  // A datagram the receive WQE cannot take fails that WQE and the QP.
  auto fail = [&](WcStatus status) {
    c.status = status;
    recv_done();
    push_recv_completion(c, true);
    enter_error();
  };
  if (uint64_t(n) + kGrhArea > wqe.length) return fail(WcStatus::kLocLenErr);
  MrCheck placed = MrCheck::kOk;
  if (pkt.has_grh)
    placed = copy_to_sges(*env_.mrs, init_.pd, wqe.sge, wqe.num_sge, 0, pkt.data + wire::Lrh::kSize,
                          kGrhArea);
  if (placed == MrCheck::kOk && n)
    placed = copy_to_sges(*env_.mrs, init_.pd, wqe.sge, wqe.num_sge, kGrhArea, pkt.payload(), n);
  if (placed != MrCheck::kOk) return fail(WcStatus::kLocProtErr);
  c.status = WcStatus::kSuccess;
  c.byte_len = n + kGrhArea;
  c.src_qp = deth.src_qp();
  c.slid = pkt.lrh().slid();
  c.sl = pkt.lrh().sl();
  c.pkey_index = 0;
  const PortAddress me = env_.ports->port(attr_.port_num);
  c.dlid_path_bits = static_cast<uint8_t>(pkt.lrh().dlid() & ((1u << me.lmc) - 1));
  if (pkt.has_grh) c.wc_flags |= kWcGrh;
  if (pkt.info->flags & wire::kHasImmDt) {
    c.wc_flags |= kWcWithImm;
    c.imm_data = pkt.immdt().imm();
  }
  recv_done();
  push_recv_completion(c, pkt.bth().se());
}

}  // namespace ibemu::engine
