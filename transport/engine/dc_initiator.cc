// The DC initiator (DCI): an RC requester and completer whose work requests
// each name their target — an address vector, a DCT number and that DCT's
// access key (mlx5dv_wr_set_dc_addr). Like ConnectX's, a DCI is connected to
// one target at a time: a WR for another target waits until everything sent
// to the current one is acknowledged, then the DCI opens a new connection
// to it. Within a connection the transport is RC's (PSNs, ACKs, NAKs,
// retries), so a DCI delivers reliably and in order (docs/dc.md).
#include <cstring>

#include "transport/engine/qp.h"

namespace ibemu::engine {

namespace {

bool same_target(const SendWqe& wqe, const AddressVector& av, uint32_t dctn, uint64_t key) {
  return wqe.remote_qpn == dctn && wqe.dc_key == key && wqe.av.dlid == av.dlid &&
         wqe.av.is_global == av.is_global && (!av.is_global || wqe.av.dgid == av.dgid);
}

}  // namespace

// Connection numbers only grow, across RESETs and, through the clock, across
// QPs that reuse a number: a target tells a new connection from a late
// packet of an old one by them.
uint32_t Qp::dci_next_connection() noexcept {
  const uint32_t clock = static_cast<uint32_t>(env_.clock->now() / 1000);
  const uint32_t next = dci_last_connection_ + 1;
  dci_last_connection_ = static_cast<int32_t>(clock - next) > 0 ? clock : next;
  return dci_last_connection_;
}

// Called before the requester starts `wqe`. True when the WQE may go now:
// its target is the current one, or nothing is outstanding and the DCI
// switches to it.
bool Qp::dci_select_target(const SendWqe& wqe) noexcept {
  if (dci_.connected && same_target(wqe, peer_.av, peer_.qpn, dci_.key)) return true;
  if (sq_.head() < req_.cursor) return false;  // still waiting for the current target
  peer_.av = wqe.av;
  peer_.av.port_num = attr_.port_num;
  peer_.qpn = wqe.remote_qpn;
  dci_.key = wqe.dc_key;
  dci_.connection = dci_next_connection();
  dci_.connect_psn = req_.next_psn;
  dci_.connected = true;
  return true;
}

void Qp::dci_fill_dceth(wire::Dceth& h, uint32_t psn) const noexcept {
  h.set_access_key(dci_.key);
  h.set_dci_qpn(init_.qpn);
  h.set_connection(dci_.connection);
  h.set_connect(psn == dci_.connect_psn);
}

}  // namespace ibemu::engine
