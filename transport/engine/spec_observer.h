#pragma once
// What the transport tells a listener about a program's use of a QP that
// breaks the spec or an assumption a correct program makes. The provider
// turns these into warnings (IBEMU_CHECK=1, provider/core/spec_checks.h);
// the engine only detects, on paths that are already the slow ones (a NAK
// being sent), so a QP without an observer pays one null test there.
#include <cstdint>

namespace ibemu::engine {

class SpecObserver {
 public:
  virtual ~SpecObserver() = default;
  /// The responder of `qpn` answered the request at `psn` with an RNR NAK:
  /// no receive WQE was posted for it (IBA 9.7.5.2.8). Progress thread,
  /// under the QP's lock: must not call back into the QP.
  virtual void rnr_nak_sent(uint32_t qpn, uint32_t psn) noexcept = 0;
  /// The first request `qpn` received since it left INIT carried `psn`,
  /// which no requester that started at `rq_psn` can have sent: not a
  /// duplicate of anything received, and farther ahead than any requester
  /// may run before its first acknowledgement (Qp's window). The two ends'
  /// starting PSNs disagree. Same thread and lock as above.
  virtual void psn_mismatch(uint32_t qpn, uint32_t rq_psn, uint32_t psn) noexcept = 0;
};

}  // namespace ibemu::engine
