#pragma once
// What `ibemu status` shows of one HCA context's objects: copies taken on
// request (never on the data path), each under its object's own lock, so a
// QP's fields agree with each other though QPs are taken one after another.
#include <cstdint>

#include "transport/engine/types.h"

namespace ibemu::engine {

struct QpSnapshot {
  uint32_t qpn = 0;
  QpType type = QpType::kRc;
  QpState state = QpState::kReset;
  uint8_t port = 0;
  uint32_t sq_psn = 0;    // the PSN of the next new packet the requester sends
  uint32_t rq_psn = 0;    // the PSN the responder expects next
  uint32_t dest_qpn = 0;  // connected QPs: the peer; a DCI: its current target
  uint16_t dlid = 0;      // ... and its LID
  uint32_t send_wrs = 0;  // send WRs posted and not yet completed
  uint32_t recv_wrs = 0;  // receive WRs posted to the QP's own receive queue
  uint32_t max_send_wr = 0, max_recv_wr = 0;
  uint32_t unacked = 0;               // reliable QPs: packets sent, not yet acknowledged
  uint32_t send_cq = 0, recv_cq = 0;  // the CQs' numbers in the context (0: none)
};

struct CqSnapshot {
  uint32_t cqn = 0;  // numbered by the context, from 1, in creation order
  uint32_t size = 0;
  uint32_t pending = 0;  // completions waiting to be polled
  bool overrun = false;
};

struct MrSnapshot {
  uint32_t lkey = 0, rkey = 0, pd = 0;
  uint64_t iova = 0, length = 0;
  uint32_t access = 0;     // IBV_ACCESS_* bits
  bool on_device = false;  // GPU memory
};

}  // namespace ibemu::engine
