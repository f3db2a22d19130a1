#include "provider/core/spec_checks.h"

#include <fmt/format.h>

#include <cerrno>

#include "provider/core/diagnostics.h"

namespace ibemu::provider {
namespace {

using engine::QpState;

uint32_t mtu_bytes(uint32_t ibv_mtu) { return 128u << ibv_mtu; }

}  // namespace

bool SpecChecks::first(Kind kind, uint64_t object) noexcept {
  std::lock_guard lock(mutex_);
  return warned_.insert({kind, object}).second;
}

void SpecChecks::warn(Kind kind, uint64_t object, std::string_view line) noexcept {
  if (!first(kind, object)) return;
  diagnostics::write_line(diagnostics::kChecks, fmt::format("ibemu check: {}", line));
}

void SpecChecks::forget_qp(uint32_t qpn) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(warned_, [qpn](const auto& w) {
    return w.second == qpn && w.first != Kind::kCqOverrun && w.first != Kind::kDeregInFlight;
  });
  unsignaled_run_.erase(qpn);
}

void SpecChecks::rnr_nak_sent(uint32_t qpn, uint32_t psn) noexcept {
  warn(Kind::kRnrNak, qpn,
       fmt::format("QP {:#x} answered the request with PSN {:#x} with an RNR NAK: no receive "
                   "was posted for the incoming SEND (or RDMA WRITE with immediate): IBA "
                   "9.7.5.2.8 (RNR NAK): a responder without a receive WQE must refuse the "
                   "message, and the sender retries it rnr_retry times (IBV_WC_RNR_RETRY_EXC_ERR "
                   "after that). Hint: post receives (ibv_post_recv) before the peer sends, "
                   "best before moving the QP to RTR, and post a new one for each completed "
                   "receive.",
                   qpn, psn));
}

void SpecChecks::psn_mismatch(uint32_t qpn, uint32_t rq_psn, uint32_t psn) noexcept {
  const bool behind = static_cast<int32_t>((psn - rq_psn) << 8) < 0;
  warn(Kind::kPsnMismatch, qpn,
       fmt::format("QP {:#x} got its first request with PSN {:#x}, but its rq_psn is {:#x}: IBA "
                   "9.7.1 (packet sequence numbers) and 9.7.5.1 (responder PSN checks): the "
                   "responder expects the requester's first PSN; {}. Hint: set each side's "
                   "rq_psn (IBV_QP_RQ_PSN, INIT->RTR) to the other side's sq_psn (IBV_QP_SQ_PSN, "
                   "RTR->RTS), as exchanged at connection setup.",
                   qpn, psn, rq_psn,
                   behind ? "a PSN behind it is taken for a duplicate and not executed, and "
                            "the sender's WRs end with IBV_WC_RETRY_EXC_ERR"
                          : "a PSN ahead of it gets PSN sequence error NAKs until the sender's "
                            "retries run out (IBV_WC_RETRY_EXC_ERR)"));
}

void SpecChecks::send_posted(uint32_t qpn, uint32_t max_send_wr, bool signaled) noexcept {
  uint32_t run = 0;
  {
    std::lock_guard lock(mutex_);
    if (signaled)
      unsignaled_run_.erase(qpn);
    else
      run = ++unsignaled_run_[qpn];
  }
  if (run != max_send_wr) return;
  warn(Kind::kUnsignaledRun, qpn,
       fmt::format("QP {:#x} has had {} unsignaled WRs posted in a row, its whole send queue "
                   "(max_send_wr {}): IBA 10.7.2.2 (unsignaled completions) and 11.4.1.1 (Post "
                   "Send Request): an unsignaled WR keeps its send queue entry until a later "
                   "signaled WR completes and its completion is polled, so on a hardware HCA "
                   "the next ibv_post_send fails with ENOMEM. Hint: set IBV_SEND_SIGNALED on at "
                   "least every Nth WR (N < max_send_wr) and poll the send CQ.",
                   qpn, run, max_send_wr));
}

void SpecChecks::post_send_returned(uint32_t qpn, QpState state, int err) noexcept {
  if (err == EINVAL &&
      (state == QpState::kReset || state == QpState::kInit || state == QpState::kRtr)) {
    warn(Kind::kPostSendState, qpn,
         fmt::format("ibv_post_send on QP {:#x} in state {} failed (EINVAL): IBA 10.3.1 (QP "
                     "states) and 11.4.1.1 (Post Send Request): a send queue takes WRs only in "
                     "RTS (and SQD, SQE, ERR); in RESET, INIT and RTR posting is an immediate "
                     "error. Hint: move the QP to RTS (ibv_modify_qp with IBV_QP_STATE "
                     "INIT->RTR->RTS, with the peer's address, QPN and PSNs) before posting "
                     "sends.",
                     qpn, engine::to_string(state)));
  } else if (err == ENOMEM) {
    warn(Kind::kSendQueueFull, qpn,
         fmt::format("ibv_post_send on QP {:#x} failed (ENOMEM): its send queue is full of WRs "
                     "not completed yet: IBA 11.4.1.1 (Post Send Request): a WR holds its "
                     "entry until it completes, and an unsignaled one until a later signaled "
                     "WR completes. Hint: poll the send CQ before posting more; if the WRs are "
                     "unsignaled, signal every Nth one (N < max_send_wr).",
                     qpn));
  } else if (state == QpState::kErr) {
    warn(Kind::kPostToErrorQp, qpn,
         fmt::format("ibv_post_send on QP {:#x} in state ERR: IBA 10.3.1 (Error state) and "
                     "11.6.2 (completion errors): every WR posted now completes with "
                     "IBV_WC_WR_FLUSH_ERR; the QP went to ERR after a completion with an error "
                     "status that the program did not act on. Hint: check wc.status of every "
                     "completion polled; after an error, stop posting, find the first failed "
                     "WR's status and reset the QP (ERR->RESET->INIT->RTR->RTS) or destroy it.",
                     qpn));
  }
}

void SpecChecks::post_recv_returned(uint32_t qpn, QpState state, int err) noexcept {
  if (err != EINVAL || state != QpState::kReset) return;
  warn(Kind::kPostRecvState, qpn,
       fmt::format("ibv_post_recv on QP {:#x} in state RESET failed (EINVAL): IBA 10.3.1 (QP "
                   "states) and 11.4.1.2 (Post Receive Request): a receive queue takes WRs "
                   "from INIT on. Hint: move the QP to INIT (ibv_modify_qp with IBV_QP_STATE, "
                   "IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_ACCESS_FLAGS) before posting "
                   "receives.",
                   qpn));
}

void SpecChecks::modify_requested(uint32_t qpn, const engine::QpAttr& attr, uint32_t mask,
                                  uint8_t port, uint32_t active_mtu) noexcept {
  // A program that moves its QP to ERR itself (to flush it, as drain
  // routines do) and then posts knows what it asked for.
  if ((mask & engine::kQpState) && attr.qp_state == QpState::kErr) first(Kind::kPostToErrorQp, qpn);
  const uint32_t path_mtu = attr.path_mtu;
  if (!(mask & engine::kQpPathMtu) || path_mtu <= active_mtu || path_mtu > 5) return;
  warn(Kind::kPathMtu, qpn,
       fmt::format("ibv_modify_qp on QP {:#x} sets path_mtu {} above port {}'s active_mtu {}: "
                   "IBA 11.2.4.2 (Modify QP: path MTU) and 14.2.5.6 (PortInfo NeighborMTU): a "
                   "QP's packets must fit the MTU of every link of the path, and a link drops "
                   "longer ones; hardware providers refuse the value or the messages never "
                   "arrive. Hint: take path_mtu from ibv_query_port()'s active_mtu (the smaller "
                   "of both sides') or from the path record.",
                   qpn, mtu_bytes(path_mtu), port, mtu_bytes(active_mtu)));
}

void SpecChecks::cq_overrun(uintptr_t cq, uint32_t capacity) noexcept {
  warn(Kind::kCqOverrun, cq,
       fmt::format("CQ {:#x} overran: a completion arrived while its {} entries were all "
                   "unpolled: IBA 11.4.2.1 (Poll for Completion) and 11.6.3.1 (CQ error, an "
                   "affiliated asynchronous error): the CQ is in error for good, "
                   "IBV_EVENT_CQ_ERR is raised and every QP that completes on it goes to ERR "
                   "(IBV_EVENT_QP_FATAL). Hint: create the CQ with at least as many entries as "
                   "the WRs that can complete on it (max_send_wr + max_recv_wr of each QP "
                   "using it) and poll it often enough.",
                   cq, capacity));
}

void SpecChecks::deregistering(engine::HcaEngine& engine, uint32_t key) noexcept {
  const uint32_t wrs = engine.wrs_using_lkey(key);
  if (wrs == 0) return;
  warn(Kind::kDeregInFlight, key,
       fmt::format("ibv_dereg_mr of the region with lkey {:#x} while {} posted WR(s) that use "
                   "it have not completed: IBA 10.6 (memory management: a deregistered "
                   "region's keys are invalid at once): those WRs complete with "
                   "IBV_WC_LOC_PROT_ERR, or with a flush, and the QP goes to ERR. Hint: "
                   "deregister a region only after every WR naming it has completed (poll "
                   "its completions, or move the QP to ERR and drain the flushes first).",
                   key, wrs));
}

void SpecChecks::destroyed_with_unpolled_errors(uint32_t qpn, uint32_t errors) noexcept {
  if (errors == 0) return;
  warn(Kind::kUnpolledErrors, qpn,
       fmt::format(
           "QP {:#x} is destroyed with {} error completion(s) (other than flushes) "
           "never polled: IBA 11.6.2 (completion errors): an error completion tells why "
           "a WR and the QP failed; the WRs after it only complete as flushed. Hint: poll the CQs "
           "until empty and check wc.status of each completion before destroying the "
           "QP; ibv_wc_status_str() names the status.",
           qpn, errors));
}

}  // namespace ibemu::provider
