#include "common/counter_page.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

#include "transport/link/sealed_memfd.h"

namespace ibemu {

CounterPage::CounterPage(CounterPage&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), counters_(std::exchange(other.counters_, nullptr)) {}

CounterPage& CounterPage::operator=(CounterPage&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    counters_ = std::exchange(other.counters_, nullptr);
  }
  return *this;
}

CounterPage::~CounterPage() { release(); }

void CounterPage::release() noexcept {
  if (counters_) munmap(counters_, sizeof(engine::EngineCounters));
  if (fd_ >= 0) close(fd_);
  counters_ = nullptr;
  fd_ = -1;
}

int CounterPage::create() noexcept {
  release();
  fd_ = link::create_sealed_memfd("ibemu-counters", sizeof(engine::EngineCounters));
  if (fd_ < 0) return -std::exchange(fd_, -1);
  void* p =
      mmap(nullptr, sizeof(engine::EngineCounters), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  counters_ = new (p) engine::EngineCounters;
  return 0;
}

int CounterPage::attach_read_only(int fd) noexcept {
  release();
  fd_ = fd;
  // Sealed: the program that made the page cannot shrink it under the
  // daemon's reads (SIGBUS).
  const long size = link::sealed_memfd_size(fd_);
  if (size < 0) return static_cast<int>(-size);
  if (static_cast<size_t>(size) < sizeof(engine::EngineCounters)) return EINVAL;
  void* p = mmap(nullptr, sizeof(engine::EngineCounters), PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  counters_ = static_cast<engine::EngineCounters*>(p);
  // The mapping keeps the page; a reader holding no descriptor per page
  // cannot be made to run out of them.
  close(std::exchange(fd_, -1));
  return 0;
}

void PortTotals::add(const engine::PortCounters& c) noexcept {
  xmit_packets += c.xmit_packets.load(std::memory_order_relaxed);
  xmit_bytes += c.xmit_bytes.load(std::memory_order_relaxed);
  rcv_packets += c.rcv_packets.load(std::memory_order_relaxed);
  rcv_bytes += c.rcv_bytes.load(std::memory_order_relaxed);
  xmit_discards += c.xmit_discards.load(std::memory_order_relaxed);
  xmit_stalled_discards += c.xmit_stalled_discards.load(std::memory_order_relaxed);
  rcv_unknown_qp += c.rcv_unknown_qp.load(std::memory_order_relaxed);
  rcv_qkey_violations += c.rcv_qkey_violations.load(std::memory_order_relaxed);
  rcv_pkey_violations += c.rcv_pkey_violations.load(std::memory_order_relaxed);
  rcv_no_receive += c.rcv_no_receive.load(std::memory_order_relaxed);
  fault_drops += c.fault_drops.load(std::memory_order_relaxed);
}

nlohmann::json PortTotals::to_json() const {
  return {{"packets_out", xmit_packets},
          {"bytes_out", xmit_bytes},
          {"packets_in", rcv_packets},
          {"bytes_in", rcv_bytes},
          {"drops",
           {{"undeliverable", xmit_discards},
            {"receiver_stalled", xmit_stalled_discards},
            {"unknown_qp", rcv_unknown_qp},
            {"qkey_violation", rcv_qkey_violations},
            {"pkey_violation", rcv_pkey_violations},
            {"no_receive", rcv_no_receive},
            {"link_faults", fault_drops}}}};
}

}  // namespace ibemu
