#include "transport/engine/hca_engine.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace ibemu::engine {

HcaEngine::HcaEngine(PacketSink* sink, const PortTable* ports, EngineCounters* counters,
                     ContextLink* contexts, uint64_t context_id)
    : sink_(sink),
      ports_(ports),
      contexts_(contexts),
      context_id_(context_id),
      counters_(counters ? counters : &own_counters_) {}

std::shared_ptr<Qp> HcaEngine::create_qp(const QpInit& init,
                                         std::function<void(uint32_t, QpEvent)> on_event) {
  QpEnv env{&mrs_,  sink_,          ports_,      std::move(on_event), counters_,
            &srqs_, contexts_,      context_id_, forced_naks_,        stall_tolerance_,
            spec_,  &link_waiters_, clock_};
  auto qp = std::make_shared<Qp>(init, env);
  std::unique_lock lock(qps_mutex_);
  qps_[init.qpn] = qp;
  return qp;
}

void HcaEngine::destroy_qp(uint32_t qpn) {
  std::shared_ptr<Qp> keep;  // destroyed outside the lock
  {
    std::unique_lock lock(qps_mutex_);
    auto it = qps_.find(qpn);
    if (it == qps_.end()) return;
    keep = std::move(it->second);
    qps_.erase(it);
    std::erase_if(mcast_, [qpn](const auto& m) { return m.second.qpn == qpn; });
  }
  keep->release_held_acks();
}

std::shared_ptr<Qp> HcaEngine::find_qp(uint32_t qpn) const {
  std::shared_lock lock(qps_mutex_);
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second;
}

void HcaEngine::receive(const uint8_t* data, size_t len) noexcept {
  wire::PacketView pkt;
  if (wire::parse_packet(data, len, &pkt, verify_crcs_) != wire::ParseError::kOk) {
    counters_->rcv_malformed++;  // IBA 9.6.1: malformed packets are silently dropped
    return;
  }
  if (wire::is_multicast_lid(pkt.lrh().dlid())) {
    receive_multicast(pkt, len);
    return;
  }
  const uint8_t port = port_for_dlid(pkt.lrh().dlid());
  if (!port) {
    counters_->rcv_wrong_dlid++;  // link layer DLID check (IBA ch. 7, C7-66): drop
    return;
  }
  PortCounters& c = counters_->at(port);
  c.rcv_packets++;
  c.rcv_bytes += len;
  auto qp = find_qp(pkt.bth().dest_qp());
  if (!qp) {
    c.rcv_unknown_qp++;  // IBA 9.6.1.5: no such QP — drop
    return;
  }
  qp->receive(pkt);
}

bool HcaEngine::receive_message(const uint8_t* data, size_t len) noexcept {
  MessageHeader h;
  if (!read_header(data, len, &h)) return true;  // not a message of this build: dropped
  switch (h.kind) {
    case MessageKind::kXrcRequest:
      serve_xrc_request(data, len);
      return true;
    case MessageKind::kXrcCompletion:
      serve_xrc_completion(data, len);
      return true;
    case MessageKind::kXrcVerdict: {
      if (len != sizeof(XrcVerdict)) return true;
      XrcVerdict v;
      std::memcpy(&v, data, sizeof(v));
      if (auto qp = find_qp(v.qpn)) qp->receive_verdict(v);
      return true;
    }
    default:
      return false;
  }
}

// A multicast packet goes to every QP attached to its group: same MLID and,
// when it carries a GRH, same MGID (IBA 10.5.2.2). The sending QP does not
// get its own packet back.
void HcaEngine::receive_multicast(const wire::PacketView& pkt, size_t len) noexcept {
  std::array<uint8_t, 16> dgid{};
  if (pkt.has_grh) dgid = pkt.grh().dgid();
  const bool from_us = port_for_dlid(pkt.lrh().slid()) != 0;
  const uint32_t src_qp = pkt.deth().src_qp();
  std::vector<std::shared_ptr<Qp>> members;
  {
    std::shared_lock lock(qps_mutex_);
    auto [first, last] = mcast_.equal_range(pkt.lrh().dlid());
    for (auto it = first; it != last; ++it) {
      if (pkt.has_grh && it->second.mgid != dgid) continue;
      auto qp = qps_.find(it->second.qpn);
      if (qp == qps_.end()) continue;
      // The HCA loops a group's packets back to its members on this port,
      // the sending QP too unless it asked not to (as ConnectX does).
      if (from_us && it->second.qpn == src_qp && qp->second->blocks_self_multicast()) continue;
      members.push_back(qp->second);
    }
  }
  if (members.empty()) {
    counters_->rcv_wrong_dlid++;  // a group none of our QPs is in
    return;
  }
  PortCounters& c = counters_->at(members.front()->port());
  c.rcv_packets++;
  c.rcv_bytes += len;
  for (auto& qp : members) qp->receive(pkt);
}

int HcaEngine::attach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid) {
  if (!wire::is_multicast_lid(mlid) || mgid[0] != 0xff) return EINVAL;  // IBA 4.1.1: FF::/8
  std::unique_lock lock(qps_mutex_);
  auto qp = qps_.find(qpn);
  if (qp == qps_.end() || qp->second->type() != QpType::kUd) return EINVAL;
  auto [first, last] = mcast_.equal_range(mlid);
  for (auto it = first; it != last; ++it)
    if (it->second.qpn == qpn && it->second.mgid == mgid) return EEXIST;
  mcast_.emplace(mlid, McMember{qpn, mgid});
  return 0;
}

int HcaEngine::detach_mcast(uint32_t qpn, const std::array<uint8_t, 16>& mgid, uint16_t mlid) {
  std::unique_lock lock(qps_mutex_);
  auto [first, last] = mcast_.equal_range(mlid);
  for (auto it = first; it != last; ++it)
    if (it->second.qpn == qpn && it->second.mgid == mgid) {
      mcast_.erase(it);
      return 0;
    }
  return ENOENT;
}

// A port answers to 2^LMC LIDs from its base LID on: the data packet check
// masks the DLID's low LMC bits before comparing (IBA ch. 7, C7-66). Ports
// are numbered from 1; the first one that does not exist ends the list.
uint8_t HcaEngine::port_for_dlid(uint16_t dlid) const noexcept {
  if (!ports_) return 0;
  for (unsigned p = 1; p <= 255; ++p) {
    const PortAddress a = ports_->port(static_cast<uint8_t>(p));
    if (a.port_guid == 0) break;
    const uint16_t base_mask = static_cast<uint16_t>(~((1u << (a.lmc & 7)) - 1));
    if ((dlid & base_mask) == (a.lid & base_mask)) return static_cast<uint8_t>(p);
  }
  return 0;
}

// A snapshot: QPs are called without qps_mutex_ held.
std::vector<std::shared_ptr<Qp>> HcaEngine::all_qps() const {
  std::shared_lock lock(qps_mutex_);
  std::vector<std::shared_ptr<Qp>> qps;
  qps.reserve(qps_.size());
  for (auto& [n, qp] : qps_) qps.push_back(qp);
  return qps;
}

std::vector<QpSnapshot> HcaEngine::qp_snapshots(
    size_t limit, const std::function<uint32_t(const CompletionQueue*)>& cq_number,
    size_t* total) const {
  std::vector<std::shared_ptr<Qp>> qps = all_qps();
  *total = qps.size();
  std::sort(qps.begin(), qps.end(),
            [](const auto& a, const auto& b) { return a->qpn() < b->qpn(); });
  if (qps.size() > limit) qps.resize(limit);
  std::vector<QpSnapshot> out;
  out.reserve(qps.size());
  for (const auto& qp : qps) {
    QpSnapshot s = qp->snapshot();
    s.send_cq = cq_number(qp->send_cq());
    s.recv_cq = cq_number(qp->recv_cq());
    out.push_back(s);
  }
  return out;
}

void HcaEngine::device_fatal() noexcept {
  for (auto& qp : all_qps()) qp->device_fatal();
}

void HcaEngine::link_ready() noexcept {
  for (uint32_t qpn : link_waiters_.take())
    if (auto qp = find_qp(qpn)) qp->resume_sending();
}

Nanos HcaEngine::run_timers(Nanos now) noexcept {
  Nanos next = 0;
  for (auto& qp : all_qps()) {
    Nanos d = qp->on_timer(now);
    if (d && (!next || d < next)) next = d;
  }
  return next;
}

}  // namespace ibemu::engine
