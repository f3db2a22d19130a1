#pragma once
// Kernel mode: the data channel's records (kernel/ibemu_abi.h) as the
// engine's vocabulary and back. Pure conversions, no I/O: the kernel plane
// (kernel_plane.h) applies what they produce. The ABI carries the engine's
// own numbers for QP types and states, attribute masks, access and send
// flags, WR and WC opcodes and WC statuses (static_asserted in the .cc), so
// most fields pass through.
#include <cstdint>

#include "kernel/ibemu_abi.h"
#include "transport/engine/types.h"
#include "transport/engine/work_queues.h"

namespace ibemu::kernel_records {

/// The engine's QP type of CREATE_QP's `qp_type` (RC, UC or UD).
engine::QpType qp_type(uint8_t abi_type);

/// A MODIFY_QP's attributes and mask.
void to_qp_attr(const ibemu_data_modify_qp& m, engine::QpAttr* attr, uint32_t* mask);

engine::AddressVector to_av(const ibemu_data_av& av);

/// A SEND_WQE as the engine's WQE; wr_id is the module's token; a REG_MR's
/// mapping is the module's generation, an invalidation's key imm_or_rkey. Inline
/// bytes stay in the record: the WQE's one SGE points at them, and the
/// engine copies them at post time, so the record must live until the post
/// returns. EINVAL for more SGEs than the engine takes.
int to_send_wqe(const ibemu_data_send_wqe& r, engine::SendWqe* w);
/// A RECV_WQE as the engine's WQE; EINVAL for more SGEs than the engine takes.
int to_recv_wqe(const ibemu_data_recv_wqe& r, engine::RecvWqe* w);

/// A CQE record for completion `c` of CQ `cq` on device `index`.
/// `solicited`: the message asked for a solicited event.
ibemu_data_cqe to_cqe(const engine::Completion& c, uint32_t cq, bool solicited, uint8_t index);

/// A QP's async event, or with `event` IBEMU_DATA_EVENT_QP_STATE its new
/// state only, after the engine applied MODIFY_QP number `modify_seq`.
ibemu_data_event qp_event(uint8_t index, uint32_t qpn, uint8_t event, engine::QpState state,
                          uint32_t modify_seq);

/// An async event of an SRQ or a CQ (`object`: IBEMU_DATA_EVENT_ON_SRQ or
/// _ON_CQ), which carries no state.
ibemu_data_event object_event(uint8_t index, uint8_t object, uint32_t handle, uint8_t event);

}  // namespace ibemu::kernel_records
