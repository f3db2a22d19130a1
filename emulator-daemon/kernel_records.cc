#include "emulator-daemon/kernel_records.h"

#include <cerrno>
#include <cstring>

#include "transport/engine/qp_core.h"

namespace ibemu::kernel_records {

using engine::QpAttrMask;
using engine::WcOpcode;
using engine::WrOpcode;

// The values the ABI passes through (kernel/ibemu_abi.h, "engine"), and
// the mapped opcodes, which the module converts by name into these numbers:
// every one an RC, UC or UD QP posts or completes.
static_assert(IBEMU_DATA_QPT_RC == uint8_t(engine::QpType::kRc));
static_assert(IBEMU_DATA_QPT_UC == uint8_t(engine::QpType::kUc));
static_assert(IBEMU_DATA_QPT_UD == uint8_t(engine::QpType::kUd));
static_assert(IBEMU_DATA_QPS_RESET == uint8_t(engine::QpState::kReset));
static_assert(IBEMU_DATA_QPS_ERR == uint8_t(engine::QpState::kErr));
static_assert(IBEMU_DATA_QP_STATE == engine::kQpState);
static_assert(IBEMU_DATA_QP_CUR_STATE == engine::kQpCurState);
static_assert(IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY == engine::kQpEnSqdAsyncNotify);
static_assert(IBEMU_DATA_QP_ACCESS_FLAGS == engine::kQpAccessFlags);
static_assert(IBEMU_DATA_QP_PKEY_INDEX == engine::kQpPkeyIndex);
static_assert(IBEMU_DATA_QP_PORT == engine::kQpPort);
static_assert(IBEMU_DATA_QP_QKEY == engine::kQpQkey);
static_assert(IBEMU_DATA_QP_AV == engine::kQpAv);
static_assert(IBEMU_DATA_QP_PATH_MTU == engine::kQpPathMtu);
static_assert(IBEMU_DATA_QP_TIMEOUT == engine::kQpTimeout);
static_assert(IBEMU_DATA_QP_RETRY_CNT == engine::kQpRetryCnt);
static_assert(IBEMU_DATA_QP_RNR_RETRY == engine::kQpRnrRetry);
static_assert(IBEMU_DATA_QP_RQ_PSN == engine::kQpRqPsn);
static_assert(IBEMU_DATA_QP_MAX_QP_RD_ATOMIC == engine::kQpMaxQpRdAtomic);
static_assert(IBEMU_DATA_QP_MIN_RNR_TIMER == engine::kQpMinRnrTimer);
static_assert(IBEMU_DATA_QP_SQ_PSN == engine::kQpSqPsn);
static_assert(IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC == engine::kQpMaxDestRdAtomic);
static_assert(IBEMU_DATA_QP_PATH_MIG_STATE == engine::kQpPathMigState);
static_assert(IBEMU_DATA_QP_DEST_QPN == engine::kQpDestQpn);
static_assert(IBEMU_DATA_ACCESS_LOCAL_WRITE == engine::kAccessLocalWrite);
static_assert(IBEMU_DATA_ACCESS_REMOTE_WRITE == engine::kAccessRemoteWrite);
static_assert(IBEMU_DATA_ACCESS_REMOTE_READ == engine::kAccessRemoteRead);
static_assert(IBEMU_DATA_ACCESS_REMOTE_ATOMIC == engine::kAccessRemoteAtomic);
static_assert(IBEMU_DATA_SEND_FENCE == engine::kSendFence);
static_assert(IBEMU_DATA_SEND_SIGNALED == engine::kSendSignaled);
static_assert(IBEMU_DATA_SEND_SOLICITED == engine::kSendSolicited);
static_assert(IBEMU_DATA_SEND_INLINE == engine::kSendInline);
static_assert(IBEMU_DATA_WR_RDMA_WRITE == uint8_t(WrOpcode::kRdmaWrite));
static_assert(IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM == uint8_t(WrOpcode::kRdmaWriteWithImm));
static_assert(IBEMU_DATA_WR_SEND == uint8_t(WrOpcode::kSend));
static_assert(IBEMU_DATA_WR_SEND_WITH_IMM == uint8_t(WrOpcode::kSendWithImm));
static_assert(IBEMU_DATA_WR_RDMA_READ == uint8_t(WrOpcode::kRdmaRead));
static_assert(IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP == uint8_t(WrOpcode::kAtomicCmpAndSwp));
static_assert(IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD == uint8_t(WrOpcode::kAtomicFetchAndAdd));
static_assert(IBEMU_DATA_WR_LOCAL_INV == uint8_t(WrOpcode::kLocalInv));
static_assert(IBEMU_DATA_WR_REG_MR == uint8_t(WrOpcode::kRegMr));
static_assert(IBEMU_DATA_WC_RECV_RDMA_WITH_IMM == uint8_t(WcOpcode::kRecvRdmaWithImm));
static_assert(IBEMU_DATA_WC_LOCAL_INV == uint8_t(WcOpcode::kLocalInv));
static_assert(IBEMU_DATA_WC_REG_MR == uint8_t(WcOpcode::kRegMr));
static_assert(IBEMU_DATA_WR_SEND_WITH_INV == uint8_t(WrOpcode::kSendWithInv));
static_assert(IBEMU_DATA_WC_SEND == uint8_t(WcOpcode::kSend));
static_assert(IBEMU_DATA_WC_RDMA_WRITE == uint8_t(WcOpcode::kRdmaWrite));
static_assert(IBEMU_DATA_WC_RDMA_READ == uint8_t(WcOpcode::kRdmaRead));
static_assert(IBEMU_DATA_WC_COMP_SWAP == uint8_t(WcOpcode::kCompSwap));
static_assert(IBEMU_DATA_WC_FETCH_ADD == uint8_t(WcOpcode::kFetchAdd));
static_assert(IBEMU_DATA_WC_RECV == uint8_t(WcOpcode::kRecv));
static_assert(IBEMU_DATA_WC_GRH == engine::kWcGrh);
static_assert(IBEMU_DATA_WC_WITH_IMM == engine::kWcWithImm);
static_assert(IBEMU_DATA_WC_WITH_INV == engine::kWcWithInv);
static_assert(IBEMU_DATA_WC_GENERAL_ERR == uint8_t(engine::WcStatus::kGeneralErr));
static_assert(IBEMU_DATA_EVENT_QP_FATAL == uint8_t(engine::QpEvent::kFatal));
static_assert(IBEMU_DATA_EVENT_QP_REQ_ERR == uint8_t(engine::QpEvent::kReqErr));
static_assert(IBEMU_DATA_EVENT_QP_ACCESS_ERR == uint8_t(engine::QpEvent::kAccessErr));
static_assert(IBEMU_DATA_EVENT_COMM_EST == uint8_t(engine::QpEvent::kCommEst));
static_assert(IBEMU_DATA_EVENT_SQ_DRAINED == uint8_t(engine::QpEvent::kSqDrained));
static_assert(IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED == uint8_t(engine::QpEvent::kLastWqeReached));

namespace {

template <typename Wqe>
int copy_sges(const ibemu_data_sge* sge, unsigned count, Wqe* w) {
  if (count > engine::DeviceLimits::kMaxSge) return EINVAL;
  w->num_sge = int(count);
  for (unsigned s = 0; s < count; ++s)
    w->sge[s] = engine::Sge{sge[s].addr, sge[s].length, sge[s].lkey};
  return 0;
}

ibemu_data_hdr header(uint16_t type, uint16_t length, uint8_t index) {
  ibemu_data_hdr h{};
  h.type = type;
  h.length = length;
  h.index = index;
  return h;
}

}  // namespace

engine::QpType qp_type(uint8_t abi_type) { return static_cast<engine::QpType>(abi_type); }

engine::AddressVector to_av(const ibemu_data_av& r) {
  engine::AddressVector av;
  av.dlid = r.dlid;
  av.sl = r.sl;
  av.src_path_bits = r.src_path_bits;
  av.port_num = r.port;
  av.is_global = r.is_global != 0;
  std::memcpy(av.dgid.data(), r.dgid, sizeof(r.dgid));
  av.flow_label = r.flow_label;
  av.sgid_index = r.sgid_index;
  av.hop_limit = r.hop_limit;
  av.traffic_class = r.traffic_class;
  return av;
}

void to_qp_attr(const ibemu_data_modify_qp& m, engine::QpAttr* a, uint32_t* mask) {
  *mask = m.attr_mask;
  a->qp_state = static_cast<engine::QpState>(m.qp_state);
  a->cur_qp_state = static_cast<engine::QpState>(m.cur_qp_state);
  a->path_mtu = m.path_mtu;
  a->qkey = m.qkey;
  a->rq_psn = m.rq_psn;
  a->sq_psn = m.sq_psn;
  a->dest_qp_num = m.dest_qpn;
  a->qp_access_flags = m.access_flags;
  a->ah = to_av(m.av);
  a->pkey_index = m.pkey_index;
  a->en_sqd_async_notify = m.en_sqd_async_notify != 0;
  a->max_rd_atomic = m.max_rd_atomic;
  a->max_dest_rd_atomic = m.max_dest_rd_atomic;
  a->min_rnr_timer = m.min_rnr_timer;
  a->port_num = m.port;
  a->timeout = m.timeout;
  a->retry_cnt = m.retry_cnt;
  a->rnr_retry = m.rnr_retry;
  // The primary path is the only one, always migrated (IBA 17.2.8): the
  // attribute needs no value and the engine has none to set.
  *mask &= ~uint32_t(engine::kQpPathMigState);
}

int to_send_wqe(const ibemu_data_send_wqe& r, engine::SendWqe* w) {
  w->wr_id = r.token;
  w->opcode = static_cast<WrOpcode>(r.opcode);
  w->flags = r.flags;
  w->imm_or_rkey = r.imm_or_rkey;
  w->remote_addr = r.remote_addr;
  w->rkey = r.rkey;
  w->compare_add = r.compare_add;
  w->swap = r.swap;
  w->av = to_av(r.av);
  w->remote_qpn = r.remote_qpn & 0xffffff;
  w->remote_qkey = r.remote_qkey;
  // REG_MR: the module froze the MR's page list as mapping `generation`,
  // which the region's KernelMemory names in its copies from then on. The
  // page size stays with the module, which translates. Zero otherwise.
  w->fast_reg =
      engine::FastReg{r.reg.key, r.reg.iova, r.reg.length, r.reg.access, r.reg.generation};
  if (r.flags & IBEMU_DATA_SEND_INLINE) {
    // One piece of this process's memory, which the engine copies now.
    w->num_sge = r.inline_len ? 1 : 0;
    w->sge[0] = engine::Sge{reinterpret_cast<uint64_t>(r.inline_data), r.inline_len, 0};
    return 0;
  }
  return copy_sges(r.sge, r.num_sge, w);
}

int to_recv_wqe(const ibemu_data_recv_wqe& r, engine::RecvWqe* w) {
  w->wr_id = r.token;
  return copy_sges(r.sge, r.num_sge, w);
}

ibemu_data_cqe to_cqe(const engine::Completion& c, uint32_t cq, bool solicited, uint8_t index) {
  ibemu_data_cqe r{};
  r.hdr = header(IBEMU_DATA_CQE, sizeof(r), index);
  r.token = c.wr_id;
  r.cq = cq;
  r.qpn = c.qp_num;
  r.byte_len = c.byte_len;
  r.imm_or_rkey = c.imm_data;
  r.src_qp = c.src_qp & 0xffffff;
  r.flags = c.wc_flags & (IBEMU_DATA_WC_GRH | IBEMU_DATA_WC_WITH_IMM | IBEMU_DATA_WC_WITH_INV);
  r.vendor_err = c.vendor_err;
  r.slid = c.slid;
  r.pkey_index = c.pkey_index;
  r.status = uint8_t(c.status);
  r.opcode = uint8_t(c.opcode);
  r.sl = c.sl & 0xf;
  r.dlid_path_bits = c.dlid_path_bits & 0x7f;
  r.solicited = solicited;
  return r;
}

ibemu_data_event qp_event(uint8_t index, uint32_t qpn, uint8_t event, engine::QpState state,
                          uint32_t modify_seq) {
  ibemu_data_event r{};
  r.hdr = header(IBEMU_DATA_EVENT, sizeof(r), index);
  r.handle = qpn;
  r.modify_seq = modify_seq;
  r.object = IBEMU_DATA_EVENT_ON_QP;
  r.event = event;
  r.qp_state = uint8_t(state);
  return r;
}

ibemu_data_event object_event(uint8_t index, uint8_t object, uint32_t handle, uint8_t event) {
  ibemu_data_event r{};
  r.hdr = header(IBEMU_DATA_EVENT, sizeof(r), index);
  r.handle = handle;
  r.object = object;
  r.event = event;
  return r;
}

}  // namespace ibemu::kernel_records
