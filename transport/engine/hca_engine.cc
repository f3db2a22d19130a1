#include "transport/engine/hca_engine.h"

#include <mutex>
#include <vector>

namespace ibemu::engine {

HcaEngine::HcaEngine(PacketSink* sink, const PortTable* ports) : sink_(sink), ports_(ports) {}

std::shared_ptr<Qp> HcaEngine::create_qp(const QpInit& init,
                                         std::function<void(uint32_t, QpEvent)> on_event) {
  QpEnv env{&mrs_, sink_, ports_, std::move(on_event)};
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
    counters_.rx_malformed++;  // IBA 9.6.1: malformed packets are silently dropped
    return;
  }
  counters_.rx_packets++;
  counters_.rx_bytes += len;
  auto qp = find_qp(pkt.bth().dest_qp());
  if (!qp) {
    counters_.rx_unknown_qp++;  // C9-?: no such QP — drop
    return;
  }
  qp->receive(pkt);
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
