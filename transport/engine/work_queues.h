#pragma once
// Send and receive work queue entries and the fixed-size rings that hold them.
// A ring is sized at QP creation (max_send_wr / max_recv_wr) and never
// reallocates, so posting never allocates.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "transport/engine/types.h"

namespace ibemu::engine {

struct SendWqe {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;        // SendFlag
  uint32_t imm_or_rkey = 0;  // imm_data (network order) or invalidate rkey
  int num_sge = 0;
  Sge sge[DeviceLimits::kMaxSge];
  uint32_t length = 0;  // total message bytes
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  WindowBind bind;   // IBV_WR_BIND_MW only
  FastReg fast_reg;  // kRegMr only
  // UD only (ibv_send_wr.wr.ud): where this datagram goes.
  AddressVector av;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t remote_srqn = 0;  // XRC only: the target's SRQ (XRCETH)
  // DCI only: the target DCT is av + remote_qpn, and this its access key.
  uint64_t dc_key = 0;
  bool is_inline = false;
  uint8_t inline_data[DeviceLimits::kMaxInlineData];

  // Requester progress (IBA 9.7.4): PSNs are assigned when the first packet
  // goes out; a retransmission reuses them.
  bool started = false;
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  bool signaled = false;
};

// Posting copies WQEs whole into the ring.
static_assert(std::is_trivially_copyable_v<FastReg>);

/// READ and atomics carry their data in the response (IBA 9.7.4.1.3): the
/// WQE completes when the response arrives, and max_rd_atomic bounds them.
inline bool expects_response(WrOpcode op) {
  return op == WrOpcode::kRdmaRead || op == WrOpcode::kAtomicCmpAndSwp ||
         op == WrOpcode::kAtomicFetchAndAdd;
}

/// Memory window bind, fast registration and local invalidate act on this
/// HCA's key tables and send no packet; they still complete in send-queue
/// order (IBA 10.6.7.2).
inline bool is_local_operation(WrOpcode op) {
  return op == WrOpcode::kBindMw || op == WrOpcode::kLocalInv || op == WrOpcode::kRegMr;
}

struct RecvWqe {
  uint64_t wr_id = 0;
  int num_sge = 0;
  Sge sge[DeviceLimits::kMaxSge];
  uint32_t length = 0;  // capacity: sum of SGE lengths
};

/// What a receive completion carries: the WQE's id and what the message
/// brought. The completing QP fills in its own number, peer and SL.
inline Completion recv_completion(const RecvWqe& wqe, WcStatus status, WcOpcode op,
                                  uint32_t byte_len, uint32_t imm, uint32_t wc_flags,
                                  uint16_t slid) {
  Completion c;
  c.wr_id = wqe.wr_id;
  c.status = status;
  c.opcode = op;
  c.byte_len = byte_len;
  c.imm_data = imm;
  c.wc_flags = wc_flags;
  c.slid = slid;
  return c;
}

/// A ring of entries indexed by ever-increasing 64-bit positions.
template <typename T>
class WorkRing {
 public:
  void reset(uint32_t capacity) {
    slots_.assign(capacity ? capacity : 1, T{});
    head_ = tail_ = 0;
  }
  uint32_t capacity() const { return static_cast<uint32_t>(slots_.size()); }
  bool full() const { return tail_ - head_ >= slots_.size(); }
  bool empty() const { return head_ == tail_; }
  uint64_t head() const { return head_; }
  uint64_t tail() const { return tail_; }
  T& at(uint64_t pos) { return slots_[pos % slots_.size()]; }
  const T& at(uint64_t pos) const { return slots_[pos % slots_.size()]; }
  T& push() { return slots_[tail_++ % slots_.size()]; }
  // Empty already is possible: a completion that overruns its CQ sends the
  // QP to ERR, whose flush empties the queue under a caller about to pop
  // the entry it just completed (IBA 11.4.2.1).
  void pop() {
    if (head_ != tail_) ++head_;
  }

 private:
  std::vector<T> slots_;
  uint64_t head_ = 0, tail_ = 0;
};

}  // namespace ibemu::engine
