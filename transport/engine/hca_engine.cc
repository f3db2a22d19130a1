#include "transport/engine/hca_engine.h"

#include <mutex>
#include <vector>

namespace ibemu::engine {

HcaEngine::HcaEngine(PacketSink* sink, const PortTable* ports, EngineCounters* counters)
    : sink_(sink), ports_(ports), counters_(counters ? counters : &own_counters_) {}

std::shared_ptr<Qp> HcaEngine::create_qp(const QpInit& init,
                                         std::function<void(uint32_t, QpEvent)> on_event) {
  QpEnv env{&mrs_, sink_, ports_, std::move(on_event), counters_};
  auto qp = std::make_shared<Qp>(init, env);
  std::unique_lock lock(qps_mutex_);
  qps_[init.qpn] = qp;
  return qp;
}

void HcaEngine::destroy_qp(uint32_t qpn) {
  std::shared_ptr<Qp> keep;  // destroyed outside the lock
  std::unique_lock lock(qps_mutex_);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  keep = std::move(it->second);
  qps_.erase(it);
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

Nanos HcaEngine::run_timers(Nanos now) noexcept {
  std::vector<std::shared_ptr<Qp>> qps;
  {
    std::shared_lock lock(qps_mutex_);
    qps.reserve(qps_.size());
    for (auto& [n, qp] : qps_) qps.push_back(qp);
  }
  Nanos next = 0;
  for (auto& qp : qps) {
    Nanos d = qp->on_timer(now);
    if (d && (!next || d < next)) next = d;
  }
  return next;
}

}  // namespace ibemu::engine
