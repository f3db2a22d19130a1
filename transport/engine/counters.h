#pragma once
// What crossed one HCA context and what it dropped, by cause: the port
// counters of `ibemu status` and IBEMU_STATS are built from these.
#include <atomic>
#include <cstdint>

namespace ibemu::engine {

struct EngineCounters {
  std::atomic<uint64_t> rx_packets{0}, rx_bytes{0}, tx_packets{0}, tx_bytes{0};
  std::atomic<uint64_t> rx_malformed{0}, rx_unknown_qp{0}, rx_wrong_dlid{0};
  // Datagrams dropped at their QP (IBA 10.2.4 / 11.6.2): a Q_Key that is not
  // the QP's, or no receive WQE posted.
  std::atomic<uint64_t> rx_qkey_violations{0}, rx_no_receive{0};
};

}  // namespace ibemu::engine
