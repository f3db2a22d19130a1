// The responder's output (IBA 9.7.5.2.2): READ responses are produced one
// PMTU at a time while the link has room, never all at once, and every
// other response waits behind them, so responses reach the requester in PSN
// order. A 4 MiB READ is thus 4 KiB of memory in flight, not 4 MiB queued.
#include "transport/engine/qp.h"
#include "transport/wire/opcode.h"

namespace ibemu::engine {

void Qp::responder_queue_read(uint64_t va, uint32_t rkey, uint32_t len, uint32_t psn) noexcept {
  QueuedResponse r;
  r.va = va;
  r.rkey = rkey;
  r.len = len;
  r.psn = psn;
  r.msn = resp_.msn;
  responses_out_.push_back(std::move(r));
  responder_send_queued();
}

void Qp::responder_send_queued() noexcept {
  while (!responses_out_.empty() && !link_busy_.load(std::memory_order_relaxed)) {
    QueuedResponse& r = responses_out_.front();
    if (!r.packet.empty()) {
      transmit(peer_.av.dlid, peer_.qpn, r.packet.data(), r.packet.size());
      responses_out_.pop_front();
    } else if (responder_send_read_packet(r)) {
      responses_out_.pop_front();
    }
  }
}

// Sends the next response of READ `r`; true when it was the last (or the
// READ failed). The region is looked up again for each packet: the
// program may deregister it while responses wait.
bool Qp::responder_send_read_packet(QueuedResponse& r) noexcept {
  const uint32_t mtu = mtu_bytes();
  const uint32_t npkts = r.len ? (r.len + mtu - 1) / mtu : 1;
  const uint32_t i = r.sent;
  const bool last = i + 1 == npkts;
  const uint32_t off = i * mtu;
  const uint32_t n = std::min(mtu, r.len - off);
  const uint32_t psn = wire::psn_add(r.psn, i);
  const uint8_t* data = nullptr;
  MemorySpan src;
  if (n && (env_.mrs->remote(r.rkey, init_.pd, init_.qpn, r.va + off, n, kAccessRemoteRead, &src) !=
                MrCheck::kOk ||
            (src.on_device() && !src.read(0, bounce_, n)))) {
    // Gone or unreadable since the request was accepted: the requester
    // learns it from a NAK in place of this response.
    responses_out_.pop_front();
    responder_fail(psn, wire::NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
    return false;  // the queue's front is no longer `r`
  }
  if (n) data = src.on_device() ? bounce_ : src.addr;
  const wire::Opcode op = read_response_opcode(i, npkts);
  ++r.sent;
  // Straight to the link: send_response would queue it behind itself.
  const PortAddress me = env_.ports->port(attr_.port_num);
  ResponsePath path = response_path(me);
  path.msn = r.msn;
  const size_t total = write_response(tx_buf_, path, me, static_cast<uint8_t>(op), psn,
                                      wire::make_ack_syndrome(wire::kAethCreditInvalid), data, n, 0,
                                      env_.sink->wants_crcs());
  transmit(peer_.av.dlid, peer_.qpn, tx_buf_, total);
  return last;
}

}  // namespace ibemu::engine
