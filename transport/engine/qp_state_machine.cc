#include "transport/engine/qp_state_machine.h"

#include <cerrno>

namespace ibemu::engine {

namespace {

constexpr uint32_t kResetToInit[3] = {
    /*RC*/ kQpPkeyIndex | kQpPort | kQpAccessFlags,
    /*UC*/ kQpPkeyIndex | kQpPort | kQpAccessFlags,
    /*UD*/ kQpPkeyIndex | kQpPort | kQpQkey,
};

// XRC QPs follow RC's rules (IBA annex A14).
int index_of(QpType t) {
  switch (t) {
    case QpType::kUc:
      return 1;
    case QpType::kUd:
      return 2;
    default:
      return 0;
  }
}

// DC (docs/dc.md), as the Linux mlx5 driver takes them (modify_dci_qp_is_ok,
// mlx5_ib_modify_dct). A DCT has a responder only and lives in RTR: INIT asks
// for its port and access flags, RTR for its MTU, RNR timer and address
// vector (port, GRH); it has no other transition — not RTS, not even ERR
// or RESET (it is destroyed instead). A DCI has no responder: none of the
// responder's attributes, and its path comes with each WR.
TransitionRule dc_transition_rule(QpType type, QpState from, QpState to) {
  using S = QpState;
  if (type == QpType::kDct) {
    if (from == S::kReset && to == S::kInit)
      return {true, kQpPkeyIndex | kQpPort | kQpAccessFlags, 0};
    if (from == S::kInit && to == S::kRtr) return {true, kQpMinRnrTimer | kQpAv | kQpPathMtu, 0};
    return {};
  }
  if (to == S::kReset || to == S::kErr) return {from != S::kUnknown, 0, 0};
  if (from == S::kReset && to == S::kInit) return {true, kQpPkeyIndex | kQpPort, 0};
  if (from == S::kInit && to == S::kInit) return {true, 0, kQpPkeyIndex | kQpPort};
  if (from == S::kInit && to == S::kRtr) return {true, kQpPathMtu, kQpPkeyIndex | kQpAv};
  if (from == S::kRtr && to == S::kRts)
    return {true, kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic | kQpSqPsn,
            kQpMinRnrTimer};
  if (from == S::kRts && to == S::kRts) return {true, 0, kQpMinRnrTimer};
  return {};
}

}  // namespace

TransitionRule transition_rule(QpType type, QpState from, QpState to) {
  if (type == QpType::kDci || type == QpType::kDct) return dc_transition_rule(type, from, to);
  const int t = index_of(type);
  const bool rc = t == 0, uc = t == 1, ud = t == 2;
  // XRC (IBA annex A14, as Linux's qp_state_table has it): a send QP has no
  // responder, so RTR does not ask for its responder's attributes; a receive
  // QP has no requester, so RTS asks only for the timeout and the SQ PSN.
  const bool xrc_send = type == QpType::kXrcSend, xrc_recv = type == QpType::kXrcRecv;
  using S = QpState;
  // Any state may go to RESET or ERR with no other attribute (IBA 10.3.1).
  if (to == S::kReset || to == S::kErr) {
    if (from == S::kUnknown) return {};
    return {true, 0, 0};
  }
  switch (from) {
    case S::kReset:
      if (to == S::kInit) return {true, kResetToInit[t], 0};
      break;
    case S::kInit:
      if (to == S::kInit) return {true, 0, kResetToInit[t]};
      if (to == S::kRtr) {
        if (ud) return {true, 0, kQpPkeyIndex | kQpQkey};
        uint32_t req = kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn;
        if (rc && !xrc_send) req |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
        uint32_t opt = kQpAltPath | kQpAccessFlags | kQpPkeyIndex;
        if (xrc_send) opt |= kQpMaxDestRdAtomic | kQpMinRnrTimer;
        return {true, req, opt};
      }
      break;
    case S::kRtr:
      if (to == S::kRts) {
        if (ud) return {true, kQpSqPsn, kQpCurState | kQpQkey};
        if (uc)
          return {true, kQpSqPsn, kQpCurState | kQpAltPath | kQpAccessFlags | kQpPathMigState};
        const uint32_t opt =
            kQpCurState | kQpAltPath | kQpAccessFlags | kQpMinRnrTimer | kQpPathMigState;
        if (xrc_recv)
          return {true, kQpSqPsn | kQpTimeout, opt | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic};
        return {true, kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic, opt};
      }
      break;
    case S::kRts:
    case S::kSqd:
      if (to == S::kRts) {
        if (ud) return {true, 0, kQpCurState | kQpQkey};
        uint32_t opt = kQpCurState | kQpAccessFlags | kQpAltPath | kQpPathMigState;
        if (rc) opt |= kQpMinRnrTimer;
        return {true, 0, opt};
      }
      if (to == S::kSqd && from == S::kRts) return {true, 0, kQpEnSqdAsyncNotify};
      if (to == S::kSqd && from == S::kSqd) {
        if (ud) return {true, 0, kQpPkeyIndex | kQpQkey};
        uint32_t opt = kQpAv | kQpAltPath | kQpAccessFlags | kQpPkeyIndex | kQpPathMigState;
        // An RC QP may also move its primary path to another port while
        // drained (IBA 11.2.4.2, SQD→SQD; the Linux qp_state_table agrees).
        if (rc)
          opt |= kQpPort | kQpMinRnrTimer | kQpTimeout | kQpRetryCnt | kQpRnrRetry |
                 kQpMaxQpRdAtomic | kQpMaxDestRdAtomic;
        return {true, 0, opt};
      }
      break;
    case S::kSqe:
      // Send queue error exists for unreliable transports only (IBA 10.3.1.6).
      if (to == S::kRts && !rc) return {true, 0, kQpCurState | (uc ? kQpAccessFlags : kQpQkey)};
      break;
    default:
      break;
  }
  return {};
}

int check_transition(QpType type, QpState from, QpState to, uint32_t mask) {
  if (!(mask & kQpState)) to = from;
  TransitionRule rule = transition_rule(type, from, to);
  if (!rule.valid) return EINVAL;
  // The current QP state is an optional attribute of RTR/RTS/SQD/SQE → RTS
  // only (IBA 11.2.4.2) and refused with any other transition, as real HCAs'
  // drivers refuse it (Linux ib_modify_qp_is_ok).
  uint32_t given = mask & ~kQpState;
  if ((given & rule.required) != rule.required) return EINVAL;
  if (given & ~(rule.required | rule.optional)) return EINVAL;
  return 0;
}

}  // namespace ibemu::engine
