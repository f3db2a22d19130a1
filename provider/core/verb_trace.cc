// Formatting of IBEMU_TRACE=verbs lines. Only reached while the channel is
// on: the traced ops table (provider/verb_trace_ops.c) is installed instead
// of the plain one, so an untraced program never calls anything here.
#include "provider/core/verb_trace.h"

#include <fmt/format.h>
#include <string.h>

#include <cerrno>
#include <string_view>

#include "provider/core/diagnostics.h"
#include "provider/verb_trace.h"

namespace ibemu::provider::verb_trace {
namespace {

using fmt::format;

struct Flag {
  unsigned bit;
  const char* name;
};

template <size_t N>
std::string flag_names(unsigned value, const Flag (&flags)[N]) {
  std::string s;
  for (const Flag& f : flags) {
    if (!(value & f.bit)) continue;
    if (!s.empty()) s += '|';
    s += f.name;
    value &= ~f.bit;
  }
  if (value) s += format("{}0x{:x}", s.empty() ? "" : "|", value);
  return s.empty() ? "0" : s;
}

std::string errno_text(int err) {
  const char* name = strerrorname_np(err);
  return format("{}: {}", name ? name : "E?", strerror(err));
}

const char* qp_type_name(unsigned t) {
  switch (t) {
    case IBV_QPT_RC:
      return "RC";
    case IBV_QPT_UC:
      return "UC";
    case IBV_QPT_UD:
      return "UD";
    case IBV_QPT_RAW_PACKET:
      return "RAW_PACKET";
    case IBV_QPT_XRC_SEND:
      return "XRC_SEND";
    case IBV_QPT_XRC_RECV:
      return "XRC_RECV";
    case IBV_QPT_DRIVER:
      return "DRIVER";
  }
  return "QPT?";
}

const char* qp_state_name(unsigned s) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < std::size(names) ? names[s] : "UNKNOWN";
}

int mtu_bytes(unsigned mtu) { return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0; }

const char* wr_opcode_name(unsigned op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND:
      return "SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV:
      return "LOCAL_INV";
    case IBV_WR_BIND_MW:
      return "BIND_MW";
    case IBV_WR_SEND_WITH_INV:
      return "SEND_WITH_INV";
    case IBV_WR_TSO:
      return "TSO";
    case IBV_WR_ATOMIC_WRITE:
      return "ATOMIC_WRITE";
  }
  return "OPCODE?";
}

const char* wc_opcode_name(unsigned op) {
  switch (op) {
    case IBV_WC_SEND:
      return "SEND";
    case IBV_WC_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "FETCH_ADD";
    case IBV_WC_BIND_MW:
      return "BIND_MW";
    case IBV_WC_LOCAL_INV:
      return "LOCAL_INV";
    case IBV_WC_TSO:
      return "TSO";
    case IBV_WC_ATOMIC_WRITE:
      return "ATOMIC_WRITE";
    case IBV_WC_RECV:
      return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "RECV_RDMA_WITH_IMM";
  }
  return "OPCODE?";
}

constexpr Flag kSendFlags[] = {{IBV_SEND_FENCE, "fence"},
                               {IBV_SEND_SIGNALED, "signaled"},
                               {IBV_SEND_SOLICITED, "solicited"},
                               {IBV_SEND_INLINE, "inline"},
                               {IBV_SEND_IP_CSUM, "ip_csum"}};

std::string gid_text(const uint8_t (&raw)[16]) {
  std::string s;
  for (int i = 0; i < 16; i += 2) s += format("{}{:02x}{:02x}", i ? ":" : "", raw[i], raw[i + 1]);
  return s;
}

std::string sge_list(const ibv_sge* sges, int n) {
  std::string s = "sge [";
  for (int i = 0; i < n; ++i)
    s += format("{}0x{:x}+{} lkey 0x{:x}", i ? ", " : "", sges[i].addr, sges[i].length,
                sges[i].lkey);
  return s + "]";
}

// What every send WR has, in one form for ibv_post_send's ibv_send_wr and
// the engine's SendWqe of an ibv_wr_* region.
struct SendWrView {
  uint64_t wr_id;
  unsigned opcode;  // ibv_wr_opcode
  unsigned flags;   // ibv_send_flags
  const ibv_sge* sges;
  int num_sge;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm_or_rkey;  // imm_data (network order) or the rkey to invalidate
  uint64_t compare_add;
  uint64_t swap;
};

std::string send_wr_common(const SendWrView& w) {
  std::string s = format("wr_id {} {}", w.wr_id, wr_opcode_name(w.opcode));
  if (w.flags) s += ' ' + flag_names(w.flags, kSendFlags);
  if (w.flags & IBV_SEND_INLINE) {
    uint64_t len = 0;
    for (int i = 0; i < w.num_sge; ++i) len += w.sges[i].length;
    s += format(" inline {} bytes", len);
  } else {
    s += ' ' + sge_list(w.sges, w.num_sge);
  }
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND_WITH_IMM:
      s += format(" imm 0x{:08x}", be32toh(w.imm_or_rkey));
      break;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:
      s += format(" invalidate_rkey 0x{:x}", w.imm_or_rkey);
      break;
  }
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      s += format(" remote 0x{:x} rkey 0x{:x}", w.remote_addr, w.rkey);
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      s += format(" remote 0x{:x} rkey 0x{:x} compare 0x{:x} swap 0x{:x}", w.remote_addr, w.rkey,
                  w.compare_add, w.swap);
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      s += format(" remote 0x{:x} rkey 0x{:x} add 0x{:x}", w.remote_addr, w.rkey, w.compare_add);
      break;
  }
  return s;
}

std::string bind_text(uint32_t mw_rkey, uint32_t new_rkey, uint32_t mr_lkey, uint64_t addr,
                      uint64_t length, unsigned access) {
  return format(" mw 0x{:x} new_rkey 0x{:x} mr 0x{:x} addr 0x{:x} length {} access {}", mw_rkey,
                new_rkey, mr_lkey, addr, length, access_flags(access));
}

std::string bind_text(uint32_t mw_rkey, uint32_t new_rkey, const ibv_mw_bind_info& b) {
  return bind_text(mw_rkey, new_rkey, b.mr ? b.mr->lkey : 0, b.addr, b.length, b.mw_access_flags);
}

std::string srq_attr(const ibv_srq_attr& a) {
  return format("max_wr {} max_sge {} srq_limit {}", a.max_wr, a.max_sge, a.srq_limit);
}

std::string cap_text(const ibv_qp_cap& c) {
  return format("{{send_wr {} recv_wr {} send_sge {} recv_sge {} inline {}}}", c.max_send_wr,
                c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data);
}

void emit(const std::string& line) noexcept {
  diagnostics::write_tagged_line(diagnostics::kVerbs, line);
}

// Formatting may throw (out of memory): a lost trace line must not become
// a lost verb.
template <typename F>
void trace(F&& build) noexcept {
  try {
    emit(build());
  } catch (...) {
  }
}

std::string qpn_text(const ibv_qp* qp) { return format("qp 0x{:x}", qp ? qp->qp_num : 0); }

}  // namespace

std::string result(int ret) { return ret ? format("= {} ({})", ret, errno_text(ret)) : "= 0"; }

std::string null_result(int err) { return format("= NULL ({})", errno_text(err)); }

std::string access_flags(unsigned access) {
  static constexpr Flag kAccess[] = {{IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE"},
                                     {IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE"},
                                     {IBV_ACCESS_REMOTE_READ, "REMOTE_READ"},
                                     {IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"},
                                     {IBV_ACCESS_MW_BIND, "MW_BIND"},
                                     {IBV_ACCESS_ZERO_BASED, "ZERO_BASED"},
                                     {IBV_ACCESS_ON_DEMAND, "ON_DEMAND"},
                                     {IBV_ACCESS_HUGETLB, "HUGETLB"},
                                     {IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING"}};
  return flag_names(access, kAccess);
}

std::string ah_attr(const ibv_ah_attr& ah) {
  std::string s = format("{{dlid {} sl {} src_path_bits {} port {}", ah.dlid, ah.sl,
                         ah.src_path_bits, ah.port_num);
  if (ah.is_global)
    s += format(" dgid {} sgid_index {} hop_limit {} flow_label 0x{:x} traffic_class {}",
                gid_text(ah.grh.dgid.raw), ah.grh.sgid_index, ah.grh.hop_limit, ah.grh.flow_label,
                ah.grh.traffic_class);
  return s + "}";
}

// In the order of enum ibv_qp_attr_mask, the order the spec lists them in.
std::string qp_attr(const ibv_qp_attr& a, int mask) {
  std::string s;
  auto add = [&](int bit, const std::string& text) {
    if (mask & bit) s += (s.empty() ? "" : " ") + text;
  };
  add(IBV_QP_STATE, format("state {}", qp_state_name(a.qp_state)));
  add(IBV_QP_CUR_STATE, format("cur_state {}", qp_state_name(a.cur_qp_state)));
  add(IBV_QP_EN_SQD_ASYNC_NOTIFY, format("sqd_async_notify {}", a.en_sqd_async_notify));
  add(IBV_QP_ACCESS_FLAGS, format("access {}", access_flags(a.qp_access_flags)));
  add(IBV_QP_PKEY_INDEX, format("pkey_index {}", a.pkey_index));
  add(IBV_QP_PORT, format("port {}", a.port_num));
  add(IBV_QP_QKEY, format("qkey 0x{:x}", a.qkey));
  add(IBV_QP_AV, "ah " + ah_attr(a.ah_attr));
  add(IBV_QP_PATH_MTU, format("path_mtu {}", mtu_bytes(a.path_mtu)));
  add(IBV_QP_TIMEOUT, format("timeout {}", a.timeout));
  add(IBV_QP_RETRY_CNT, format("retry_cnt {}", a.retry_cnt));
  add(IBV_QP_RNR_RETRY, format("rnr_retry {}", a.rnr_retry));
  add(IBV_QP_RQ_PSN, format("rq_psn 0x{:x}", a.rq_psn));
  add(IBV_QP_MAX_QP_RD_ATOMIC, format("max_rd_atomic {}", a.max_rd_atomic));
  add(IBV_QP_ALT_PATH, "alt_ah " + ah_attr(a.alt_ah_attr));
  add(IBV_QP_MIN_RNR_TIMER, format("min_rnr_timer {}", a.min_rnr_timer));
  add(IBV_QP_SQ_PSN, format("sq_psn 0x{:x}", a.sq_psn));
  add(IBV_QP_MAX_DEST_RD_ATOMIC, format("max_dest_rd_atomic {}", a.max_dest_rd_atomic));
  add(IBV_QP_PATH_MIG_STATE, format("path_mig_state {}", int(a.path_mig_state)));
  add(IBV_QP_CAP, "cap " + cap_text(a.cap));
  add(IBV_QP_DEST_QPN, format("dest_qp 0x{:x}", a.dest_qp_num));
  add(IBV_QP_RATE_LIMIT, format("rate_limit {}", a.rate_limit));
  const int known = (IBV_QP_RATE_LIMIT << 1) - 1;
  if (mask & ~known) s += format("{}mask 0x{:x}", s.empty() ? "" : " ", unsigned(mask & ~known));
  return s.empty() ? "mask 0" : s;
}

std::string qp_init_attr(const ibv_qp_init_attr_ex& a) {
  std::string s = qp_type_name(a.qp_type);
  if ((a.comp_mask & IBV_QP_INIT_ATTR_PD) && a.pd) s += format(" pd {}", a.pd->handle);
  if ((a.comp_mask & IBV_QP_INIT_ATTR_XRCD) && a.xrcd) s += format(" xrcd {}", fmt::ptr(a.xrcd));
  s += format(" send_cq {} recv_cq {}", fmt::ptr(a.send_cq), fmt::ptr(a.recv_cq));
  if (a.srq) s += format(" srq {}", fmt::ptr(a.srq));
  s += " cap " + cap_text(a.cap) + format(" sig_all {}", a.sq_sig_all);
  if (a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
    s += format(" send_ops_flags 0x{:x}", a.send_ops_flags);
  if (a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS)
    s += format(" create_flags 0x{:x}", a.create_flags);
  return s;
}

std::string send_wrs(const ibv_send_wr* wr) {
  std::string s;
  for (; wr; wr = wr->next) {
    if (!s.empty()) s += "; ";
    const bool atomic =
        wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    const bool inv = wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV;
    SendWrView v{wr->wr_id,
                 wr->opcode,
                 wr->send_flags,
                 wr->sg_list,
                 wr->num_sge,
                 atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr,
                 atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey,
                 inv ? wr->invalidate_rkey : wr->imm_data,
                 wr->wr.atomic.compare_add,
                 wr->wr.atomic.swap};
    s += send_wr_common(v);
    if (wr->opcode == IBV_WR_BIND_MW && wr->bind_mw.mw)
      s += bind_text(wr->bind_mw.mw->rkey, wr->bind_mw.rkey, wr->bind_mw.bind_info);
    // The UD address is read only where the QP is UD; here the AH is named
    // whenever one is set, which is harmless for other QPs' WRs (zeroed).
    if (wr->wr.ud.ah && !atomic && wr->opcode != IBV_WR_RDMA_WRITE &&
        wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IBV_WR_RDMA_READ)
      s += format(" ah {} remote_qpn 0x{:x} remote_qkey 0x{:x}", fmt::ptr(wr->wr.ud.ah),
                  wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
  }
  return s;
}

std::string recv_wrs(const ibv_recv_wr* wr) {
  std::string s;
  for (; wr; wr = wr->next) {
    if (!s.empty()) s += "; ";
    s += format("wr_id {} ", wr->wr_id) + sge_list(wr->sg_list, wr->num_sge);
  }
  return s;
}

std::string send_wqes(const engine::SendWqe* wqes, uint32_t count) {
  std::string s;
  for (uint32_t i = 0; i < count; ++i) {
    const engine::SendWqe& w = wqes[i];
    ibv_sge sges[engine::DeviceLimits::kMaxSge];
    for (int k = 0; k < w.num_sge; ++k) sges[k] = {w.sge[k].addr, w.sge[k].length, w.sge[k].lkey};
    if (i) s += "; ";
    s += send_wr_common({w.wr_id, unsigned(w.opcode), w.flags, sges, w.num_sge, w.remote_addr,
                         w.rkey, w.imm_or_rkey, w.compare_add, w.swap});
    if (w.opcode == engine::WrOpcode::kBindMw)
      s += bind_text(w.bind.mw_rkey, w.bind.new_rkey, w.bind.mr_lkey, w.bind.addr, w.bind.length,
                     w.bind.access);
    if (w.av.dlid || w.remote_qpn)
      s += format(" dlid {} remote_qpn 0x{:x} remote_qkey 0x{:x}", w.av.dlid, w.remote_qpn,
                  w.remote_qkey);
    if (w.dc_key) s += format(" dc_key 0x{:x}", w.dc_key);
    if (w.remote_srqn) s += format(" remote_srqn 0x{:x}", w.remote_srqn);
  }
  return s;
}

// IBA 11.4.2.1: of an error completion only wr_id, status, qp_num and
// vendor_err are defined; the rest is not shown.
std::string work_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS)
    return format("{{wr_id {} status {} ({}) vendor_err 0x{:x} qp 0x{:x}}}", wc.wr_id,
                  int(wc.status), ibv_wc_status_str(wc.status), wc.vendor_err, wc.qp_num);
  std::string s = format("{{wr_id {} status success {} byte_len {} qp 0x{:x}", wc.wr_id,
                         wc_opcode_name(wc.opcode), wc.byte_len, wc.qp_num);
  if (wc.opcode & IBV_WC_RECV)
    s += format(" src_qp 0x{:x} slid {} sl {}", wc.src_qp, wc.slid, wc.sl);
  if (wc.wc_flags & IBV_WC_WITH_IMM) s += format(" imm 0x{:08x}", be32toh(wc.imm_data));
  if (wc.wc_flags & IBV_WC_WITH_INV) s += format(" invalidated 0x{:x}", wc.invalidated_rkey);
  if (wc.wc_flags & IBV_WC_GRH) s += " grh";
  return s + "}";
}

void trace_wr_complete(uint32_t qpn, const engine::SendWqe* wqes, uint32_t count,
                       int ret) noexcept {
  trace([&] {
    return format("ibv_wr_complete(qp 0x{:x}, {}) {}", qpn, send_wqes(wqes, count), result(ret));
  });
}

}  // namespace ibemu::provider::verb_trace

using namespace ibemu::provider::verb_trace;
using fmt::format;

namespace {
const char* dev_name(const ibv_context* c) { return c && c->device ? c->device->name : "?"; }
}  // namespace

extern "C" {

bool ibemu_trace_verbs_on(void) {
  return ibemu::provider::diagnostics::on(ibemu::provider::diagnostics::kVerbs);
}

void ibemu_trace_open_device(const char* name, ibv_context* c, int err) {
  trace([&] {
    return format("ibv_open_device({}) ", name) +
           (c ? format("= context {}", fmt::ptr(c)) : null_result(err));
  });
}

void ibemu_trace_close_device(const char* name) {
  trace([&] { return format("ibv_close_device({})", name); });
}

void ibemu_trace_query_device(ibv_context* c, size_t attr_size, const ibv_device_attr_ex* a,
                              int ret) {
  trace([&] {
    // ibv_query_device passes the classic structure's size.
    const char* verb =
        attr_size == sizeof(ibv_device_attr) ? "ibv_query_device" : "ibv_query_device_ex";
    std::string s = format("{}({}) {}", verb, dev_name(c), result(ret));
    const ibv_device_attr& d = a->orig_attr;
    if (!ret)
      s += format(
          " {{fw {} vendor 0x{:x} part {} ports {} max_qp {} max_qp_wr {} max_sge {} max_cq {} "
          "max_cqe {} max_mr {} max_mr_size 0x{:x} max_qp_rd_atom {} max_srq {} atomic_cap {}}}",
          d.fw_ver, d.vendor_id, d.vendor_part_id, d.phys_port_cnt, d.max_qp, d.max_qp_wr,
          d.max_sge, d.max_cq, d.max_cqe, d.max_mr, d.max_mr_size, d.max_qp_rd_atom, d.max_srq,
          int(d.atomic_cap));
    return s;
  });
}

void ibemu_trace_query_port(ibv_context* c, uint8_t port, const ibv_port_attr* a, int ret) {
  trace([&] {
    std::string s = format("ibv_query_port({}, port {}) {}", dev_name(c), port, result(ret));
    if (!ret)
      s += format(
          " {{state {} lid {} lmc {} sm_lid {} active_mtu {} max_mtu {} gid_tbl_len {} "
          "pkey_tbl_len {} link_layer {}}}",
          ibv_port_state_str(a->state), a->lid, a->lmc, a->sm_lid, mtu_bytes(a->active_mtu),
          mtu_bytes(a->max_mtu), a->gid_tbl_len, a->pkey_tbl_len,
          a->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB");
    return s;
  });
}

void ibemu_trace_alloc_pd(ibv_context* c, ibv_pd* pd, int err) {
  trace([&] {
    return format("ibv_alloc_pd({}) ", dev_name(c)) +
           (pd ? format("= pd {}", pd->handle) : null_result(err));
  });
}

void ibemu_trace_dealloc_pd(uint32_t pd, int ret) {
  trace([&] { return format("ibv_dealloc_pd(pd {}) {}", pd, result(ret)); });
}

void ibemu_trace_reg_mr(const char* verb, ibv_pd* pd, uint64_t addr, size_t length, int access,
                        ibv_mr* mr, int err) {
  trace([&] {
    return format("{}(pd {}, addr 0x{:x}, length {}, access {}) ", verb, pd->handle, addr, length,
                  access_flags(access)) +
           (mr ? format("= mr lkey 0x{:x} rkey 0x{:x}", mr->lkey, mr->rkey) : null_result(err));
  });
}

void ibemu_trace_rereg_mr(uint32_t lkey, int flags, ibv_pd* pd, void* addr, size_t length,
                          int access, int ret) {
  trace([&] {
    std::string s = format("ibv_rereg_mr(mr 0x{:x}, flags 0x{:x}", lkey, flags);
    if ((flags & IBV_REREG_MR_CHANGE_PD) && pd) s += format(", pd {}", pd->handle);
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION)
      s += format(", addr {}, length {}", fmt::ptr(addr), length);
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) s += ", access " + access_flags(access);
    return s + ") " + result(ret);
  });
}

void ibemu_trace_dereg_mr(uint32_t lkey, int ret) {
  trace([&] { return format("ibv_dereg_mr(mr 0x{:x}) {}", lkey, result(ret)); });
}

void ibemu_trace_create_cq(ibv_context* c, int cqe, int channel_fd, int comp_vector, ibv_cq* cq,
                           int err) {
  trace([&] {
    return format("ibv_create_cq({}, cqe {}, channel {}, comp_vector {}) ", dev_name(c), cqe,
                  channel_fd >= 0 ? format("fd {}", channel_fd) : "none", comp_vector) +
           (cq ? format("= cq {}", fmt::ptr(cq)) : null_result(err));
  });
}

void ibemu_trace_create_cq_ex(ibv_context* c, const ibv_cq_init_attr_ex* a, ibv_cq_ex* cq,
                              int err) {
  trace([&] {
    return format(
               "ibv_create_cq_ex({}, cqe {}, channel {}, comp_vector {}, wc_flags 0x{:x}, "
               "flags 0x{:x}) ",
               dev_name(c), a->cqe,
               a->channel ? format("fd {}", a->channel->fd) : std::string("none"), a->comp_vector,
               a->wc_flags, (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? a->flags : 0) +
           (cq ? format("= cq {}", fmt::ptr(ibv_cq_ex_to_cq(cq))) : null_result(err));
  });
}

void ibemu_trace_destroy_cq(const void* cq, int ret) {
  trace([&] { return format("ibv_destroy_cq(cq {}) {}", cq, result(ret)); });
}

void ibemu_trace_resize_cq(ibv_cq* cq, int cqe, int ret) {
  trace([&] { return format("ibv_resize_cq(cq {}, cqe {}) {}", fmt::ptr(cq), cqe, result(ret)); });
}

void ibemu_trace_poll_cq(ibv_cq* cq, int n, const ibv_wc* wc, int ret) {
  if (ret == 0)
    return;  // see docs/tracing.md: a busy-polling program polls empty millions of times
  trace([&] {
    std::string s = format("ibv_poll_cq(cq {}, {}) = {}", fmt::ptr(cq), n, ret);
    for (int i = 0; i < ret; ++i) s += ' ' + work_completion(wc[i]);
    return s;
  });
}

void ibemu_trace_poll_cq_ex(const char* verb, ibv_cq_ex* cq, const ibv_wc* wc, int ret) {
  if (ret == ENOENT) return;  // an empty CQ, as for ibv_poll_cq
  trace([&] {
    std::string s = format("{}(cq {}) {}", verb, fmt::ptr(ibv_cq_ex_to_cq(cq)), result(ret));
    if (!ret) s += ' ' + work_completion(*wc);
    return s;
  });
}

void ibemu_trace_req_notify_cq(ibv_cq* cq, int solicited_only, int ret) {
  trace([&] {
    return format("ibv_req_notify_cq(cq {}, solicited_only {}) {}", fmt::ptr(cq), solicited_only,
                  result(ret));
  });
}

void ibemu_trace_create_qp(const char* verb, const ibv_qp_init_attr_ex* asked, int dc_type,
                           const ibv_qp_cap* granted, ibv_qp* qp, int err) {
  trace([&] {
    std::string s = format("{}({}", verb, qp_init_attr(*asked));
    if (dc_type) s += dc_type == 1 ? " dc DCI" : " dc DCT";
    return s + ") " +
           (qp ? format("= qp 0x{:x} cap {}", qp->qp_num, cap_text(*granted)) : null_result(err));
  });
}

void ibemu_trace_open_qp(const ibv_qp_open_attr* a, ibv_qp* qp, int err) {
  trace([&] {
    return format("ibv_open_qp(qp 0x{:x}, xrcd {}) ", a->qp_num, fmt::ptr(a->xrcd)) +
           (qp ? std::string("= ") + qpn_text(qp) : null_result(err));
  });
}

void ibemu_trace_modify_qp(ibv_qp* qp, const ibv_qp_attr* attr, int mask, int ret) {
  trace([&] {
    return format("ibv_modify_qp({}, {}) {}", qpn_text(qp), qp_attr(*attr, mask), result(ret));
  });
}

void ibemu_trace_query_qp(ibv_qp* qp, const ibv_qp_attr* attr, int mask, int ret) {
  trace([&] {
    std::string s = format("ibv_query_qp({}, mask 0x{:x}) {}", qpn_text(qp), mask, result(ret));
    // The QP answers every attribute, whatever the mask asked for.
    if (!ret) s += " {" + qp_attr(*attr, mask) + "}";
    return s;
  });
}

void ibemu_trace_destroy_qp(uint32_t qpn, int ret) {
  trace([&] { return format("ibv_destroy_qp(qp 0x{:x}) {}", qpn, result(ret)); });
}

void ibemu_trace_post_send(ibv_qp* qp, const ibv_send_wr* wr, const ibv_send_wr* bad, int ret) {
  trace([&] {
    std::string s = format("ibv_post_send({}, {}) {}", qpn_text(qp), send_wrs(wr), result(ret));
    if (ret && bad) s += format(" bad_wr wr_id {}", bad->wr_id);
    return s;
  });
}

void ibemu_trace_post_recv(ibv_qp* qp, const ibv_recv_wr* wr, const ibv_recv_wr* bad, int ret) {
  trace([&] {
    std::string s = format("ibv_post_recv({}, {}) {}", qpn_text(qp), recv_wrs(wr), result(ret));
    if (ret && bad) s += format(" bad_wr wr_id {}", bad->wr_id);
    return s;
  });
}

void ibemu_trace_mcast(const char* verb, ibv_qp* qp, const ibv_gid* gid, uint16_t lid, int ret) {
  trace([&] {
    return format("{}({}, gid {}, lid 0x{:x}) {}", verb, qpn_text(qp), gid_text(gid->raw), lid,
                  result(ret));
  });
}

void ibemu_trace_create_srq(ibv_srq_init_attr_ex* a, ibv_srq* srq, int err) {
  trace([&] {
    std::string s = "ibv_create_srq(";
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC)
      s += format("XRC xrcd {} cq {} ", fmt::ptr(a->xrcd), fmt::ptr(a->cq));
    if ((a->comp_mask & IBV_SRQ_INIT_ATTR_PD) && a->pd) s += format("pd {} ", a->pd->handle);
    return s + srq_attr(a->attr) + ") " +
           (srq ? format("= srq {} {{{}}}", fmt::ptr(srq), srq_attr(a->attr)) : null_result(err));
  });
}

void ibemu_trace_modify_srq(ibv_srq* srq, const ibv_srq_attr* a, int mask, int ret) {
  trace([&] {
    return format("ibv_modify_srq(srq {}, mask 0x{:x}, {}) {}", fmt::ptr(srq), mask, srq_attr(*a),
                  result(ret));
  });
}

void ibemu_trace_query_srq(ibv_srq* srq, const ibv_srq_attr* a, int ret) {
  trace([&] {
    std::string s = format("ibv_query_srq(srq {}) {}", fmt::ptr(srq), result(ret));
    if (!ret) s += " {" + srq_attr(*a) + "}";
    return s;
  });
}

void ibemu_trace_destroy_srq(const void* srq, int ret) {
  trace([&] { return format("ibv_destroy_srq(srq {}) {}", srq, result(ret)); });
}

void ibemu_trace_get_srq_num(ibv_srq* srq, uint32_t srqn, int ret) {
  trace([&] {
    std::string s = format("ibv_get_srq_num(srq {}) {}", fmt::ptr(srq), result(ret));
    if (!ret) s += format(" srq_num 0x{:x}", srqn);
    return s;
  });
}

void ibemu_trace_post_srq_recv(ibv_srq* srq, const ibv_recv_wr* wr, const ibv_recv_wr* bad,
                               int ret) {
  trace([&] {
    std::string s =
        format("ibv_post_srq_recv(srq {}, {}) {}", fmt::ptr(srq), recv_wrs(wr), result(ret));
    if (ret && bad) s += format(" bad_wr wr_id {}", bad->wr_id);
    return s;
  });
}

void ibemu_trace_open_xrcd(const ibv_xrcd_init_attr* a, ibv_xrcd* xrcd, int err) {
  trace([&] {
    return format("ibv_open_xrcd(fd {}, oflags 0x{:x}) ", a->fd, a->oflags) +
           (xrcd ? format("= xrcd {}", fmt::ptr(xrcd)) : null_result(err));
  });
}

void ibemu_trace_close_xrcd(const void* xrcd, int ret) {
  trace([&] { return format("ibv_close_xrcd(xrcd {}) {}", xrcd, result(ret)); });
}

void ibemu_trace_create_ah(ibv_pd* pd, const ibv_ah_attr* a, ibv_ah* ah, int err) {
  trace([&] {
    return format("ibv_create_ah(pd {}, {}) ", pd->handle, ah_attr(*a)) +
           (ah ? format("= ah {}", fmt::ptr(ah)) : null_result(err));
  });
}

void ibemu_trace_destroy_ah(const void* ah, int ret) {
  trace([&] { return format("ibv_destroy_ah(ah {}) {}", ah, result(ret)); });
}

void ibemu_trace_alloc_mw(ibv_pd* pd, ibv_mw_type type, ibv_mw* mw, int err) {
  trace([&] {
    return format("ibv_alloc_mw(pd {}, type {}) ", pd->handle, int(type)) +
           (mw ? format("= mw rkey 0x{:x}", mw->rkey) : null_result(err));
  });
}

void ibemu_trace_dealloc_mw(uint32_t rkey, int ret) {
  trace([&] { return format("ibv_dealloc_mw(mw 0x{:x}) {}", rkey, result(ret)); });
}

void ibemu_trace_bind_mw(ibv_qp* qp, uint32_t old_rkey, ibv_mw* mw, const ibv_mw_bind* b, int ret) {
  trace([&] {
    std::string s = format("ibv_bind_mw({}, wr_id {}", qpn_text(qp), b->wr_id);
    if (b->send_flags) s += ' ' + flag_names(b->send_flags, kSendFlags);
    s += bind_text(old_rkey, ret ? old_rkey : mw->rkey, b->bind_info);
    return s + ") " + result(ret);
  });
}

}  // extern "C"
