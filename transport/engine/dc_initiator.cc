// The DC initiator (DCI): an RC requester and completer whose work requests
// each name their target — an address vector, a DCT number and that DCT's
// access key (mlx5dv_wr_set_dc_addr). Like ConnectX's, a DCI is connected to
// one target at a time: a WR for another target waits until everything sent
// to the current one is acknowledged, then the DCI opens a new connection
// to it. Within a connection the transport is RC's (PSNs, ACKs, NAKs,
// retries), so a DCI delivers reliably and in order (docs/dc.md).
#include <cstring>

#include "transport/engine/dc_initiator.h"

namespace ibemu::engine {

namespace {

bool same_target(const SendWqe& wqe, const AddressVector& av, uint32_t dctn, uint64_t key) {
  return wqe.remote_qpn == dctn && wqe.dc_key == key && wqe.av.dlid == av.dlid &&
         wqe.av.is_global == av.is_global && (!av.is_global || wqe.av.dgid == av.dgid);
}

}  // namespace

// A DCI numbers its connections from the clock, so a DCI created again
// under the same number is not taken for its predecessor.
DcInitiator::DcInitiator(QpCore& qp)
    : qp_(qp), last_connection_(static_cast<uint32_t>(qp.env.clock->now() / 1000)) {}

// Connection numbers only grow, across RESETs and, through the clock, across
// QPs that reuse a number: a target tells a new connection from a late
// packet of an old one by them.
uint32_t DcInitiator::next_connection() noexcept {
  const uint32_t clock = static_cast<uint32_t>(qp_.env.clock->now() / 1000);
  const uint32_t next = last_connection_ + 1;
  last_connection_ = static_cast<int32_t>(clock - next) > 0 ? clock : next;
  return last_connection_;
}

// Called before the requester starts `wqe`. True when the WQE may go now:
// its target is the current one, or nothing is outstanding and the DCI
// switches to it.
bool DcInitiator::select_target(const SendWqe& wqe, bool outstanding, uint32_t next_psn) noexcept {
  if (dci_.connected && same_target(wqe, qp_.peer.av, qp_.peer.qpn, dci_.key)) return true;
  if (outstanding) return false;  // still waiting for the current target
  qp_.peer.av = wqe.av;
  qp_.peer.av.port_num = qp_.attr.port_num;
  qp_.peer.qpn = wqe.remote_qpn;
  dci_.key = wqe.dc_key;
  dci_.connection = next_connection();
  dci_.connect_psn = next_psn;
  dci_.connected = true;
  return true;
}

void DcInitiator::fill_dceth(wire::Dceth& h, uint32_t psn) const noexcept {
  h.set_access_key(dci_.key);
  h.set_dci_qpn(qp_.init.qpn);
  h.set_connection(dci_.connection);
  h.set_connect(psn == dci_.connect_psn);
}

}  // namespace ibemu::engine
