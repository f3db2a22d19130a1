#pragma once
// One HCA context's transport: its QPs by number, its memory regions, and the
// entry points of the progress thread — an incoming packet, a message from
// another context of the HCA, and the timer scan. Checks that need no QP
// state (IBA 9.6: packet well-formed, DLID is one of ours, destination QP
// exists) happen here before a QP sees the packet.
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <shared_mutex>
#include <unordered_map>

#include "transport/engine/context_link.h"
#include "transport/engine/counters.h"
#include "transport/engine/mr_table.h"
#include "transport/engine/qp.h"

namespace ibemu::engine {

class HcaEngine {
 public:
  /// `counters` may be given (shared memory the daemon reads); by default
  /// the engine keeps its own. `contexts` reaches the other contexts of the
  /// HCA, which address this one as `context_id`; without it, requests for
  /// XRC SRQs of other contexts are refused.
  HcaEngine(PacketSink* sink, const PortTable* ports, EngineCounters* counters = nullptr,
            ContextLink* contexts = nullptr, uint64_t context_id = 0);

  MrTable& mrs() { return mrs_; }
  SrqDirectory& srqs() { return srqs_; }
  EngineCounters& counters() { return *counters_; }

  std::shared_ptr<Qp> create_qp(const QpInit& init,
                                std::function<void(uint32_t, QpEvent)> on_event);
  void destroy_qp(uint32_t qpn);
  std::shared_ptr<Qp> find_qp(uint32_t qpn) const;
  /// Up to `limit` QPs by ascending number, each with its CQs numbered by
  /// `cq_number`, for `ibemu status`; `*total` gets how many there are.
  std::vector<QpSnapshot> qp_snapshots(
      size_t limit, const std::function<uint32_t(const CompletionQueue*)>& cq_number,
      size_t* total) const;

  /// ibv_attach_mcast / ibv_detach_mcast (IBA 10.5): a UD QP receives the
  /// packets sent to the group. 0, EINVAL (not UD, not a multicast LID or
  /// GID), EEXIST / ENOENT.
  int attach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid);
  int detach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid);

  /// Progress thread: one received packet (bytes may be reused after return).
  void receive(const uint8_t* data, size_t len) noexcept;
  /// Progress thread: a message from another context of the HCA
  /// (context_link.h). False when it is none of the engine's kinds.
  bool receive_message(const uint8_t* data, size_t len) noexcept;
  /// Progress thread: runs timers; returns the earliest next deadline or 0.
  Nanos run_timers(Nanos now) noexcept;
  /// The link sent packets it had queued: requesters that stopped go on.
  void link_ready() noexcept;
  /// The HCA is gone (its daemon died): every QP to the error state, its
  /// outstanding WRs flushed (Qp::device_fatal).
  void device_fatal() noexcept;

  /// Whether the link verifies ICRC/VCRC of received packets.
  void set_verify_crcs(bool v) { verify_crcs_ = v; }
  /// QPs created from now on ask `source` whether to NAK a request (ibemu fault nak).
  void set_forced_naks(ForcedNakSource* source) { forced_naks_ = source; }
  /// QPs created from now on: QpEnv::stall_tolerance.
  void set_stall_tolerance(Nanos t) { stall_tolerance_ = t; }
  /// QPs created from now on read the time from `clock` (QpEnv::clock).
  void set_clock(const Clock* clock) { clock_ = clock; }
  /// QPs created from now on report to `observer` (IBEMU_CHECK).
  void set_spec_observer(SpecObserver* observer) { spec_ = observer; }
  /// WRs in flight on every QP that name `lkey` (Qp::wrs_using_lkey).
  uint32_t wrs_using_lkey(uint32_t lkey) const;

 private:
  void receive_multicast(const wire::PacketView& pkt, size_t len) noexcept;
  std::vector<std::shared_ptr<Qp>> all_qps() const;
  /// The port that answers to `dlid`, or 0.
  uint8_t port_for_dlid(uint16_t dlid) const noexcept;
  // xrc_srq_host.cc: requests that XRC receive QPs of other contexts
  // forwarded to this context's SRQs.
  void serve_xrc_request(const uint8_t* data, size_t len) noexcept;
  void serve_xrc_completion(const uint8_t* data, size_t len) noexcept;

  PacketSink* sink_;
  const PortTable* ports_;
  ContextLink* contexts_;
  uint64_t context_id_;
  MrTable mrs_;
  SrqDirectory srqs_;
  EngineCounters own_counters_;
  EngineCounters* counters_;
  mutable std::shared_mutex qps_mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<Qp>> qps_;
  struct McMember {
    uint32_t qpn;
    std::array<uint8_t, 16> mgid;
  };
  std::multimap<uint16_t, McMember> mcast_;  // by MLID; under qps_mutex_
  ForcedNakSource* forced_naks_ = nullptr;
  Nanos stall_tolerance_ = 0;
  SpecObserver* spec_ = nullptr;
  const Clock* clock_ = &steady_clock();
  LinkWaiters link_waiters_;
  bool verify_crcs_ = true;
};

}  // namespace ibemu::engine
