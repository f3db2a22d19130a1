#pragma once
// IBEMU_CHECK=1: warnings about a program's use of the verbs that breaks the
// IBA spec, or that works here but fails on a hardware HCA. Each warning is
// one line on the checks channel (provider/core/diagnostics.h): what
// happened, the spec's reason, and a hint for the fix; docs/spec-checks.md
// lists them all. Each kind of warning is given once per object (QP, CQ,
// region), so a program that repeats a mistake in a loop is not flooded.
//
// One SpecChecks per device context. The verbs call its hooks only when
// diagnostics::on(kChecks); the engine reports through SpecObserver, which
// the context installs only then, so programs without IBEMU_CHECK pay
// nothing.
#include <cstdint>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "transport/engine/hca_engine.h"
#include "transport/engine/spec_observer.h"

namespace ibemu::provider {

class SpecChecks final : public engine::SpecObserver {
 public:
  // --- engine::SpecObserver (progress thread) ---
  void rnr_nak_sent(uint32_t qpn, uint32_t psn) noexcept override;
  void psn_mismatch(uint32_t qpn, uint32_t rq_psn, uint32_t psn) noexcept override;

  // --- verbs (application threads) ---
  /// ibv_post_send put one WR on `qpn`'s send queue.
  void send_posted(uint32_t qpn, uint32_t max_send_wr, bool signaled) noexcept;
  /// ibv_post_send on `qpn`, in `state` when called, returned `err` (0 or
  /// an errno). The state is read before posting: a WR may fail, and take
  /// the QP to ERR, before the post returns.
  void post_send_returned(uint32_t qpn, engine::QpState state, int err) noexcept;
  /// ibv_post_recv, the same way.
  void post_recv_returned(uint32_t qpn, engine::QpState state, int err) noexcept;
  /// ibv_modify_qp is asked for `attr` under `mask`, before it is checked;
  /// `active_mtu` is that of the QP's port `port` (ibv_mtu values).
  void modify_requested(uint32_t qpn, const engine::QpAttr& attr, uint32_t mask, uint8_t port,
                        uint32_t active_mtu) noexcept;
  /// A CQ overran (its capacity in entries); `cq` names it (the ibv_cq).
  void cq_overrun(uintptr_t cq, uint32_t capacity) noexcept;
  /// ibv_dereg_mr of region `key` is about to succeed.
  void deregistering(engine::HcaEngine& engine, uint32_t key) noexcept;
  /// QP `qpn` is destroyed with `errors` error completions nobody polled.
  void destroyed_with_unpolled_errors(uint32_t qpn, uint32_t errors) noexcept;
  /// QP `qpn` is gone: its number may come back for another QP.
  void forget_qp(uint32_t qpn) noexcept;

 private:
  enum class Kind : uint8_t {
    kPostSendState,
    kPostRecvState,
    kPostToErrorQp,
    kSendQueueFull,
    kUnsignaledRun,
    kRnrNak,
    kPsnMismatch,
    kPathMtu,
    kCqOverrun,
    kDeregInFlight,
    kUnpolledErrors,
  };
  /// True the first time `kind` is reported for `object`.
  bool first(Kind kind, uint64_t object) noexcept;
  void warn(Kind kind, uint64_t object, std::string_view line) noexcept;

  std::mutex mutex_;
  std::set<std::pair<Kind, uint64_t>> warned_;
  // Unsignaled WRs posted in a row on each QP since its last signaled one.
  std::unordered_map<uint32_t, uint32_t> unsignaled_run_;
};

}  // namespace ibemu::provider
