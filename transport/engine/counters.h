#pragma once
// What crossed one HCA context and what it dropped, per port and by cause:
// the port counters of `ibemu status` (the daemon sums the blocks of every
// context of a device) and of IBEMU_STATS. A block may live in shared memory
// that the daemon maps read-only; it holds only lock-free atomics, so its
// layout is the same in every process of one build.
#include <atomic>
#include <cstdint>

namespace ibemu::engine {

inline constexpr int kCounterPorts = 4;  // ports per HCA the block has room for

struct PortCounters {
  std::atomic<uint64_t> xmit_packets{0}, xmit_bytes{0}, rcv_packets{0}, rcv_bytes{0};
  // Packets the link could not deliver (IBA PortXmitDiscards counts both):
  // no such destination, and packets given up on a receiver that took
  // nothing for the head-of-queue lifetime (link/ring_sender.h).
  std::atomic<uint64_t> xmit_discards{0}, xmit_stalled_discards{0};
  // Received for this port and dropped: no such QP (IBA 9.6.1.5), a datagram
  // with another Q_Key (10.2.4, C10-15), a datagram with no receive posted.
  std::atomic<uint64_t> rcv_unknown_qp{0}, rcv_qkey_violations{0}, rcv_no_receive{0};
  // Received with a P_Key that does not match the QP's (IBA 10.9.3,
  // PortInfo:P_KeyViolations).
  std::atomic<uint64_t> rcv_pkey_violations{0};
  // Sent and lost on the way: a link down or a fault injected (ibemu fault).
  std::atomic<uint64_t> fault_drops{0};
};

struct EngineCounters {
  PortCounters port[kCounterPorts + 1];  // [1..kCounterPorts]; [0] unused
  // Dropped before a port could be told: malformed (IBA 9.6.1), or for a
  // DLID none of this HCA's ports answers to (C7-66).
  std::atomic<uint64_t> rcv_malformed{0}, rcv_wrong_dlid{0};
  // Regions registered on GPU memory now, and their bytes (gauges: they
  // leave with the context).
  std::atomic<uint64_t> gpu_regions{0}, gpu_region_bytes{0};

  PortCounters& at(unsigned port_num) { return port[port_num <= kCounterPorts ? port_num : 0]; }
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared across processes");

}  // namespace ibemu::engine
