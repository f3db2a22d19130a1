#pragma once
// The DC initiator's choice of target (dc_initiator.cc): held by the
// requester of a DCI only.
#include <cstdint>

#include "transport/engine/qp_core.h"

namespace ibemu::engine {

class DcInitiator {
 public:
  explicit DcInitiator(QpCore& qp);
  /// Called before the requester starts `wqe`; `outstanding`: WQEs sent to
  /// the current target are not all acknowledged.
  bool select_target(const SendWqe& wqe, bool outstanding, uint32_t next_psn) noexcept;
  void fill_dceth(wire::Dceth& h, uint32_t psn) const noexcept;
  /// RESET: no connection (the connection numbers go on growing).
  void disconnect() noexcept { dci_ = Connection{}; }

 private:
  uint32_t next_connection() noexcept;

  QpCore& qp_;
  // The connection to the current target.
  struct Connection {
    bool connected = false;
    uint64_t key = 0;
    uint32_t connection = 0;   // this connection's number (DCETH)
    uint32_t connect_psn = 0;  // its first PSN: packets with it say "connect"
  } dci_;
  uint32_t last_connection_ = 0;  // grows across connections and RESETs
};

}  // namespace ibemu::engine
