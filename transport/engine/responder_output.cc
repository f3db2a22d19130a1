// The responder's output (IBA 9.7.5.2.2): READ responses are produced one
// PMTU at a time while the link has room, never all at once, and every
// other response waits behind them, so responses reach the requester in PSN
// order. A 4 MiB READ is thus 4 KiB of memory in flight, not 4 MiB queued.
#include "transport/engine/dc_target.h"
#include "transport/engine/responder.h"
#include "transport/wire/opcode.h"

namespace ibemu::engine {

void Responder::queue_read(uint64_t va, uint32_t rkey, uint32_t len, uint32_t psn) noexcept {
  QueuedResponse r;
  r.va = va;
  r.rkey = rkey;
  r.len = len;
  r.psn = psn;
  r.msn = resp_.msn;
  if (dct_) r.dc = dct_->loaded_id();
  responses_out_.push_back(std::move(r));
  send_queued();
}

// A requester asks for a READ again only from the first PSN it is missing,
// and it discards every response after a gap until the responses from that
// PSN come (IBA 9.7.5.1.2): what this responder still owed from there on
// would only be thrown away. Answering the duplicate behind it instead
// would make every local ACK timeout add a copy of everything outstanding
// to the queue, and a slow host's timeouts would feed on themselves until
// no response got through (seen as RETRY_EXC_ERR under CPU load). The
// requests that follow the duplicate come again too and are answered again
// in their turn.
void Responder::abandon_responses_from(uint32_t psn) noexcept {
  const DcConnectionId asking = dct_ ? dct_->loaded_id() : DcConnectionId{};
  const uint32_t mtu = qp_.mtu_bytes();
  std::erase_if(responses_out_, [&](const QueuedResponse& r) {
    if (r.dc != asking) return false;
    const uint32_t npkts = r.packet.empty() ? packets_for(r.len, mtu) : 1;
    return wire::psn_diff(wire::psn_add(r.psn, npkts - 1), psn) >= 0;
  });
}

void Responder::send_queued() noexcept {
  // A DCT's responses go to the DCI connection they answer, whichever is
  // loaded when the link has room; one that closed or was replaced since
  // gets none. The connection of the packet being handled is put back.
  const DcConnectionId was = dct_ ? dct_->loaded_id() : DcConnectionId{};
  while (!responses_out_.empty() && !qp_.link_busy.load(std::memory_order_relaxed)) {
    QueuedResponse& r = responses_out_.front();
    if (dct_ && !dct_->reload(r.dc)) {
      responses_out_.pop_front();
    } else if (!r.packet.empty()) {
      qp_.transmit(qp_.peer.av.dlid, qp_.peer.qpn, r.packet.data(), r.packet.size());
      responses_out_.pop_front();
    } else if (send_read_packet(r)) {
      responses_out_.pop_front();
    }
  }
  if (dct_) dct_->restore(was);
}

// Sends the next response of READ `r`; true when it was the last (or the
// READ failed). The region is looked up again for each packet: the
// program may deregister it while responses wait.
bool Responder::send_read_packet(QueuedResponse& r) noexcept {
  const uint32_t mtu = qp_.mtu_bytes();
  const uint32_t npkts = packets_for(r.len, mtu);
  const uint32_t i = r.sent;
  const bool last = i + 1 == npkts;
  const uint32_t off = i * mtu;
  const uint32_t n = std::min(mtu, r.len - off);
  const uint32_t psn = wire::psn_add(r.psn, i);
  const uint8_t* data = nullptr;
  MemorySpan src;
  size_t total = 0;
  if (!n || (qp_.env.mrs->remote(r.rkey, qp_.init.pd, qp_.init.qpn, r.va + off, n,
                                 kAccessRemoteRead, &src) == MrCheck::kOk &&
             (!src.on_device() || src.read(0, bounce_, n)))) {
    if (n) data = src.on_device() ? bounce_ : src.addr;
    // Straight to the link: send_response would queue it behind itself.
    const PortAddress me = qp_.env.ports->port(qp_.attr.port_num);
    ResponsePath path = response_path(me);
    path.msn = r.msn;
    total = write_response(
        qp_.tx_buf, path, me, static_cast<uint8_t>(read_response_opcode(i, npkts)), psn,
        wire::make_ack_syndrome(wire::kAethCreditInvalid), data, n, 0, qp_.env.sink->wants_crcs());
  }
  if (!total) {
    // Deregistered, unreadable or unmapped since the request was accepted:
    // the requester learns it from a NAK in place of this response.
    responses_out_.pop_front();
    fail(psn, wire::NakCode::kRemoteAccessError, WcStatus::kRemAccessErr);
    return false;  // the queue's front is no longer `r`
  }
  ++r.sent;
  qp_.transmit(qp_.peer.av.dlid, qp_.peer.qpn, qp_.tx_buf, total);
  return last;
}

}  // namespace ibemu::engine
