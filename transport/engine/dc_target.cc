// The DC target (DCT): an RC responder on an SRQ that any DCI knowing its
// access key may use. It keeps one responder context — expected PSN, MSN,
// the message in progress, remembered atomics — per DCI connection, found by
// the DCETH's source (LID, DCI number) and connection number; a connection
// starts with a packet marked "connect" (dc_initiator.cc). A request with a
// wrong key is answered with a remote access error NAK; any request error
// ends that connection only, never the DCT (docs/dc.md).
#include <cstring>

#include "transport/engine/qp.h"
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

// The path back to the requester: its LID, and its GID when it sent a GRH,
// leaving through the DCT's port with the DCT's source GID index.
AddressVector Qp::dct_path_to(const wire::PacketView& pkt) const noexcept {
  AddressVector av = attr_.ah;
  av.dlid = pkt.lrh().slid();
  av.sl = pkt.lrh().sl();
  av.port_num = attr_.port_num;
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

void Qp::dct_receive(const wire::PacketView& pkt) noexcept {
  if (!rq_can_receive()) return;
  const uint32_t flags = pkt.info->flags;
  if (pkt.info->transport != wire::Transport::kDc || !(flags & wire::kHasDceth)) return;
  if (pkt.dceth().access_key() != init_.dct_access_key) {
    // Answered without a connection: the DCI learns of it by the NAK.
    dct_store_connection();
    peer_ = Peer{dct_path_to(pkt), pkt.dceth().dci_qpn()};
    resp_ = Responder{};
    send_ack(pkt.bth().psn(), wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError));
    return;
  }
  if (!dct_load_connection(pkt)) return;
  responder_receive(pkt);
}

// Makes the packet's connection the loaded one. False when the packet
// belongs to no connection the DCT may serve: a late packet of a connection
// that was superseded or closed, or a packet of a new connection whose
// opening packet was lost (the DCI resends from it after its timeout).
bool Qp::dct_load_connection(const wire::PacketView& pkt) noexcept {
  const uint64_t source = source_of(pkt);
  const wire::Dceth dceth = pkt.dceth();
  auto it = dct_connections_.find(source);
  const bool current = it != dct_connections_.end() && it->second.connection == dceth.connection();
  if (current && it->second.closed) return false;
  if (!current) {
    const bool newer = it == dct_connections_.end() ||
                       static_cast<int32_t>(dceth.connection() - it->second.connection) > 0;
    if (!newer || !dceth.connect()) return false;
  }
  if (!dct_loaded_ || dct_loaded_source_ != source) {
    dct_store_connection();
    if (it == dct_connections_.end() && dct_connections_.size() >= kConnectionsBeforeSweep) {
      const Nanos now = env_.clock->now();
      std::erase_if(dct_connections_,
                    [now](const auto& c) { return now - c.second.last_used > kIdleConnectionNs; });
    }
    it = dct_connections_.try_emplace(source).first;
    resp_ = it->second.resp;
    peer_ = it->second.peer;
    dct_loaded_ = true;
    dct_loaded_source_ = source;
  }
  DcConnection& c = it->second;
  if (!current) {
    // A new connection replaces the DCI's old one. A message the old one
    // left half-received gives its receive WQE back as flushed.
    if (resp_.srq_wqe_held) {
      complete_recv(resp_.srq_wqe, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0, 0, false, 0);
      recv_done();
    }
    c.connection = dceth.connection();
    c.closed = false;
    resp_ = Responder{};
    resp_.epsn = pkt.bth().psn();
    peer_ = Peer{dct_path_to(pkt), dceth.dci_qpn()};
  }
  c.last_used = env_.clock->now();
  return true;
}

// The loaded context goes back to its slot (the next packet may be another
// DCI's).
void Qp::dct_store_connection() noexcept {
  if (!dct_loaded_) return;
  auto it = dct_connections_.find(dct_loaded_source_);
  if (it != dct_connections_.end()) {
    it->second.resp = resp_;
    it->second.peer = peer_;
  }
  dct_loaded_ = false;
}

void Qp::dct_close_connection() noexcept {
  if (!dct_loaded_) return;
  dct_store_connection();
  auto it = dct_connections_.find(dct_loaded_source_);
  if (it != dct_connections_.end()) it->second.closed = true;
}

void Qp::dct_forget_connections() noexcept {
  dct_connections_.clear();
  dct_loaded_ = false;
  resp_ = Responder{};
}

}  // namespace ibemu::engine
