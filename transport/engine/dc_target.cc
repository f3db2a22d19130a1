// The DC target (DCT): an RC responder on an SRQ that any DCI knowing its
// access key may use. It keeps one responder context — expected PSN, MSN,
// the message in progress, remembered atomics — per DCI connection, found by
// the DCETH's source (LID, DCI number) and connection number; a connection
// starts with a packet marked "connect" (dc_initiator.cc). A request with a
// wrong key is answered with a remote access error NAK; any request error
// ends that connection only, never the DCT (docs/dc.md).
#include <cstring>

#include "transport/engine/dc_target.h"
#include "transport/wire/opcode.h"

namespace ibemu::engine {

namespace {

// Contexts of DCIs that went quiet are forgotten after this long, once there
// are many: a DCI that comes back opens a new connection anyway.
constexpr Nanos kIdleConnectionNs = 10'000'000'000;
constexpr size_t kConnectionsBeforeSweep = 1024;

uint64_t source_of(const wire::PacketView& pkt) {
  return uint64_t{pkt.lrh().slid()} << 32 | pkt.dceth().dci_qpn();
}

}  // namespace

DcTarget::DcTarget(QpCore& qp, Responder& responder) : qp_(qp), responder_(responder) {}

// The path back to the requester: its LID, and its GID when it sent a GRH,
// leaving through the DCT's port with the DCT's source GID index.
AddressVector DcTarget::path_to(const wire::PacketView& pkt) const noexcept {
  AddressVector av = qp_.attr.ah;
  av.dlid = pkt.lrh().slid();
  av.sl = pkt.lrh().sl();
  av.port_num = qp_.attr.port_num;
  av.is_global = pkt.has_grh;
  if (pkt.has_grh) {
    const wire::Grh grh = pkt.grh();
    const wire::Gid sgid = grh.sgid();
    std::memcpy(av.dgid.data(), sgid.data(), av.dgid.size());
    av.flow_label = grh.flow_label();
    if (!av.hop_limit) av.hop_limit = 64;
  }
  return av;
}

void DcTarget::receive(const wire::PacketView& pkt) noexcept {
  if (!qp_.rq_can_receive()) return;
  const uint32_t flags = pkt.info->flags;
  if (pkt.info->transport != wire::Transport::kDc || !(flags & wire::kHasDceth)) return;
  if (pkt.dceth().access_key() != qp_.init.dct_access_key) {
    // Answered without a connection: the DCI learns of it by the NAK.
    store_connection();
    qp_.peer = QpPeer{path_to(pkt), pkt.dceth().dci_qpn()};
    responder_.load_context(ResponderContext{});
    responder_.send_ack(pkt.bth().psn(),
                        wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError));
    return;
  }
  if (!load_connection(pkt)) return;
  responder_.receive(pkt);
}

// Makes the packet's connection the loaded one. False when the packet
// belongs to no connection the DCT may serve: a late packet of a connection
// that was superseded or closed, or a packet of a new connection whose
// opening packet was lost (the DCI resends from it after its timeout).
bool DcTarget::load_connection(const wire::PacketView& pkt) noexcept {
  const uint64_t source = source_of(pkt);
  const wire::Dceth dceth = pkt.dceth();
  auto it = connections_.find(source);
  const bool current = it != connections_.end() && it->second.connection == dceth.connection();
  if (current && it->second.closed) return false;
  if (!current) {
    const bool newer = it == connections_.end() ||
                       static_cast<int32_t>(dceth.connection() - it->second.connection) > 0;
    if (!newer || !dceth.connect()) return false;
  }
  if (!loaded_ || loaded_source_ != source) {
    store_connection();
    if (it == connections_.end() && connections_.size() >= kConnectionsBeforeSweep) {
      const Nanos now = qp_.env.clock->now();
      std::erase_if(connections_,
                    [now](const auto& c) { return now - c.second.last_used > kIdleConnectionNs; });
    }
    it = connections_.try_emplace(source).first;
    swap_in(source, it->second);
  }
  DcConnection& c = it->second;
  if (!current) {
    // A new connection replaces the DCI's old one. A message the old one
    // left half-received gives its receive WQE back as flushed.
    if (responder_.context().srq_wqe_held) {
      responder_.complete_recv(responder_.context().srq_wqe, WcStatus::kWrFlushErr, WcOpcode::kRecv,
                               0, 0, 0, false, 0);
      responder_.recv_done();
    }
    c.connection = dceth.connection();
    c.closed = false;
    ResponderContext fresh;
    fresh.epsn = pkt.bth().psn();
    responder_.load_context(fresh);
    qp_.peer = QpPeer{path_to(pkt), dceth.dci_qpn()};
  }
  c.last_used = qp_.env.clock->now();
  return true;
}

DcConnectionId DcTarget::loaded_id() const noexcept {
  if (!loaded_) return {};
  auto it = connections_.find(loaded_source_);
  if (it == connections_.end()) return {};
  return DcConnectionId{true, loaded_source_, it->second.connection};
}

bool DcTarget::reload(const DcConnectionId& id) noexcept {
  auto it = connections_.find(id.source);
  if (!id.valid || it == connections_.end() || it->second.connection != id.number ||
      it->second.closed)
    return false;
  if (loaded_ && loaded_source_ == id.source) return true;
  store_connection();
  swap_in(id.source, it->second);
  return true;
}

// The connection's context goes into the responder (the one loaded before
// was stored back).
void DcTarget::swap_in(uint64_t source, const DcConnection& c) noexcept {
  responder_.load_context(c.resp);
  qp_.peer = c.peer;
  loaded_ = true;
  loaded_source_ = source;
}

void DcTarget::restore(const DcConnectionId& id) noexcept {
  if (!reload(id)) store_connection();
}

// The loaded context goes back to its slot (the next packet may be another
// DCI's).
void DcTarget::store_connection() noexcept {
  if (!loaded_) return;
  auto it = connections_.find(loaded_source_);
  if (it != connections_.end()) {
    it->second.resp = responder_.context();
    it->second.peer = qp_.peer;
  }
  loaded_ = false;
}

void DcTarget::close_connection() noexcept {
  if (!loaded_) return;
  store_connection();
  auto it = connections_.find(loaded_source_);
  if (it != connections_.end()) it->second.closed = true;
}

void DcTarget::forget_connections() noexcept {
  connections_.clear();
  loaded_ = false;
}

}  // namespace ibemu::engine
