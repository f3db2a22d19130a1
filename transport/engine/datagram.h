#pragma once
// The Unreliable Datagram path (datagram.cc): held by UD QPs only. Its
// sends take the requester's place for each WQE; its receives the
// responder's, through the responder's receive queue.
#include "transport/engine/qp_core.h"

namespace ibemu::engine {

class Requester;
class Responder;

class DatagramPath {
 public:
  DatagramPath(QpCore& qp, Requester& requester, Responder& responder);
  /// The WQE at the requester's cursor, as one datagram.
  void send(SendWqe& wqe) noexcept;
  void receive(const wire::PacketView& pkt) noexcept;

 private:
  QpCore& qp_;
  Requester& requester_;
  Responder& responder_;
};

}  // namespace ibemu::engine
