#pragma once
// IBEMU_TRACE=verbs: one line per verb call with its arguments and result,
//   ibemu verbs pid 4242: ibv_post_send(qp 0x11, wr_id 1 SEND signaled sge [0x7f3a1c000000+4096
//   lkey 0x101]) = 0
// These functions build the parts of those lines; the extern "C" entry
// points of provider/verb_trace.h put them together and write them.
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "transport/engine/work_queues.h"

namespace ibemu::provider::verb_trace {

/// "= 0", or "= 22 (EINVAL: Invalid argument)": a verb that returns an errno.
std::string result(int ret);
/// "= NULL (ENOMEM: Cannot allocate memory)": a verb that returned no object.
std::string null_result(int err);
/// "LOCAL_WRITE|REMOTE_READ", or "0".
std::string access_flags(unsigned access);
/// The attributes `mask` names, e.g. "state RTR path_mtu 1024 dest_qp 0x12 rq_psn 0x4d2".
std::string qp_attr(const ibv_qp_attr& attr, int mask);
/// "RC pd 1 send_cq 0x... recv_cq 0x... cap {send_wr 1 recv_wr 500 ...} sig_all 0".
std::string qp_init_attr(const ibv_qp_init_attr_ex& attr);
/// Each WR of a chain, "; "-separated: wr_id, opcode, flags, SGEs and the
/// opcode's own fields (remote address and rkey, imm, atomics, UD address).
std::string send_wrs(const ibv_send_wr* wr);
std::string recv_wrs(const ibv_recv_wr* wr);
/// The WRs of one ibv_wr_start .. ibv_wr_complete region, as the engine got them.
std::string send_wqes(const engine::SendWqe* wqes, uint32_t count);
/// One completion: what ibv_wc holds that its status makes valid.
std::string work_completion(const ibv_wc& wc);
/// "{dlid 2 sl 0 port 1}" with the GRH's fields when is_global.
std::string ah_attr(const ibv_ah_attr& ah);

/// ibv_wr_complete's line; the caller asks diagnostics::on(kVerbs) first.
void trace_wr_complete(uint32_t qpn, const engine::SendWqe* wqes, uint32_t count, int ret) noexcept;

}  // namespace ibemu::provider::verb_trace
