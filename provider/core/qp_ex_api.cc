// The ibv_wr_* API on the C++ side of provider/core_api.h. A builder per QP
// turns the WRs of one wr_start .. wr_complete region into engine SendWqes and
// posts them with Qp::post_send, the path ibv_post_send takes, in one call.
// Like mlx5 and rxe, an error found while building is returned by
// wr_complete and rolls the whole region back.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "provider/core/core_internal.h"
#include "provider/core/diagnostics.h"
#include "provider/core/verb_trace.h"
#include "provider/core_api.h"
#include "transport/engine/work_queues.h"

using namespace ibemu;
using namespace ibemu::engine;

struct ibemu_core_wr_builder {
  Qp* qp = nullptr;
  uint32_t max_wr = 0;  // WRs per region: the send queue's depth
  uint32_t max_sge = 0;
  uint32_t max_inline = 0;
  // Held from wr_start to wr_complete / wr_abort: the per-QP critical region
  // that ibv_wr_post(3) promises.
  std::mutex region;
  // Grows to the largest region seen (at most max_wr), so a steady stream of
  // regions does not allocate.
  std::vector<SendWqe> wqes;
  uint32_t count = 0;
  int err = 0;  // the first error of the region
};

namespace {

// The ibv_wr_* API takes IBV_SEND_INLINE from the setter used, not from
// wr_flags (mlx5 ignores the flag there too).
constexpr uint32_t kWrFlags = kSendFence | kSendSignaled | kSendSolicited;

void fail(ibemu_core_wr_builder* b, int err) noexcept {
  if (!b->err) b->err = err;
}

// The WR the data setters apply to, or null (and the region fails).
SendWqe* current(ibemu_core_wr_builder* b) noexcept {
  if (b->err) return nullptr;
  if (b->count == 0) {
    fail(b, EINVAL);  // a setter before any WR builder
    return nullptr;
  }
  return &b->wqes[b->count - 1];
}

bool known_opcode(uint32_t op) noexcept {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
      return true;
    default:
      return false;
  }
}

// Inline data carries a payload the requester sends: SEND and RDMA WRITE only.
bool takes_inline(WrOpcode op) noexcept {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv:
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return true;
    default:
      return false;
  }
}

}  // namespace

extern "C" {

uint64_t ibemu_core_wr_ops_supported(ibv_qp_type qp_type) {
  // What Qp::post_send executes (transport/engine/qp.cc): RDMA READ, the
  // atomics and SEND with Invalidate are RC operations (IBA table 84); binds
  // and local invalidates act on this HCA alone. TSO and ATOMIC_WRITE are not
  // offered.
  constexpr uint64_t kUcOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                              IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                              IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
  constexpr uint64_t kRcOps = kUcOps | IBV_QP_EX_WITH_RDMA_READ |
                              IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;
  switch (qp_type) {
    case IBV_QPT_RC:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_DRIVER:  // a DCI: RC's operations (a DCT has no send queue)
      return kRcOps;
    case IBV_QPT_UC:
      return kUcOps;
    case IBV_QPT_UD:
      return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    default:
      return 0;
  }
}

ibemu_core_wr_builder* ibemu_core_wr_builder_create(ibemu_core_qp* qp, const ibv_qp_cap* cap,
                                                    int* err) {
  auto* b = new (std::nothrow) ibemu_core_wr_builder;
  if (!b) {
    *err = ENOMEM;
    return nullptr;
  }
  b->qp = &provider::engine_qp(qp);
  b->max_wr = cap->max_send_wr;
  b->max_sge = std::min(cap->max_send_sge, DeviceLimits::kMaxSge);
  b->max_inline = std::min(cap->max_inline_data, DeviceLimits::kMaxInlineData);
  *err = 0;
  return b;
}

void ibemu_core_wr_builder_destroy(ibemu_core_wr_builder* b) { delete b; }

void ibemu_core_wr_start(ibemu_core_wr_builder* b) {
  b->region.lock();
  b->count = 0;
  b->err = 0;
}

void ibemu_core_wr_op(ibemu_core_wr_builder* b, const ibemu_core_wr* wr) {
  if (b->err) return;
  if (!known_opcode(wr->opcode)) return fail(b, EINVAL);
  if (b->count >= b->max_wr) return fail(b, ENOMEM);  // more WRs than the send queue holds
  if (b->count == b->wqes.size()) {
    try {
      b->wqes.resize(std::min<size_t>(b->max_wr, std::max<size_t>(16, 2 * b->wqes.size())));
    } catch (...) {
      return fail(b, ENOMEM);
    }
  }
  SendWqe& w = b->wqes[b->count++];
  w.wr_id = wr->wr_id;
  w.opcode = static_cast<WrOpcode>(wr->opcode);
  w.flags = wr->flags & kWrFlags;
  w.imm_or_rkey = wr->imm_or_rkey;
  w.num_sge = 0;  // a WR without a data setter moves no data
  w.remote_addr = wr->remote_addr;
  w.rkey = wr->rkey;
  w.compare_add = wr->compare_add;
  w.swap = wr->swap;
  w.bind = WindowBind{wr->bind.mw_rkey, wr->rkey,        wr->bind.mr_lkey,
                      wr->bind.addr,    wr->bind.length, wr->bind.access};
}

void ibemu_core_wr_set_sges(ibemu_core_wr_builder* b, const ibv_sge* sges, size_t num_sge) {
  SendWqe* w = current(b);
  if (!w) return;
  if (num_sge > b->max_sge) return fail(b, ENOMEM);  // mlx5's errno for this
  uint64_t len = 0;
  for (size_t s = 0; s < num_sge; ++s) {
    w->sge[s] = Sge{sges[s].addr, sges[s].length, sges[s].lkey};
    len += sges[s].length;
  }
  if (len > DeviceLimits::kMaxMsgSize) return fail(b, EINVAL);
  w->num_sge = static_cast<int>(num_sge);
  w->flags &= ~kSendInline;
}

void ibemu_core_wr_set_ud_addr(ibemu_core_wr_builder* b, const ibemu_ah* ah, uint32_t remote_qpn,
                               uint32_t remote_qkey) {
  SendWqe* w = current(b);
  if (!w) return;
  if (!ah) return fail(b, EINVAL);
  w->av = provider::to_av(ah->attr);
  w->remote_qpn = remote_qpn & 0xffffff;
  w->remote_qkey = remote_qkey;
}

void ibemu_core_wr_set_xrc_srqn(ibemu_core_wr_builder* b, uint32_t remote_srqn) {
  if (SendWqe* w = current(b)) w->remote_srqn = remote_srqn & 0xffffff;
}

void ibemu_core_wr_set_dc_addr(ibemu_core_wr_builder* b, const ibemu_ah* ah, uint32_t remote_dctn,
                               uint64_t remote_dc_key) {
  SendWqe* w = current(b);
  if (!w) return;
  if (!ah) return fail(b, EINVAL);
  w->av = provider::to_av(ah->attr);
  w->remote_qpn = remote_dctn & 0xffffff;
  w->dc_key = remote_dc_key;
}

void ibemu_core_wr_set_inline(ibemu_core_wr_builder* b, const ibv_data_buf* bufs, size_t num_buf) {
  SendWqe* w = current(b);
  if (!w) return;
  if (!takes_inline(w->opcode)) return fail(b, EINVAL);
  size_t len = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (bufs[i].length > b->max_inline - len) return fail(b, ENOMEM);  // mlx5's errno for this
    std::memcpy(w->inline_data + len, bufs[i].addr, bufs[i].length);
    len += bufs[i].length;
  }
  // The caller may reuse its buffers at once: the data now lives in the WQE.
  // The engine copies inline payload from sge[0]; its address is fixed at
  // wr_complete, when the WQE no longer moves.
  w->num_sge = len ? 1 : 0;
  w->sge[0] = Sge{0, static_cast<uint32_t>(len), 0};
  w->flags |= kSendInline;
}

int ibemu_core_wr_complete(ibemu_core_wr_builder* b) {
  int err = b->err;
  if (!err && b->count > 0) {
    for (uint32_t i = 0; i < b->count; ++i) {
      SendWqe& w = b->wqes[i];
      if ((w.flags & kSendInline) && w.num_sge)
        w.sge[0].addr = reinterpret_cast<uintptr_t>(w.inline_data);
    }
    int bad = -1;
    // The engine posts every WR before a bad one (QP state, full send queue,
    // an opcode it does not execute) and none after it.
    err = b->qp->post_send(b->wqes.data(), static_cast<int>(b->count), &bad);
  }
  if (provider::diagnostics::on(provider::diagnostics::kVerbs))
    provider::verb_trace::trace_wr_complete(b->qp->qpn(), b->wqes.data(), b->count, err);
  b->count = 0;
  b->err = 0;
  b->region.unlock();
  return err;
}

void ibemu_core_wr_abort(ibemu_core_wr_builder* b) {
  b->count = 0;
  b->err = 0;
  b->region.unlock();
}

}  // extern "C"
