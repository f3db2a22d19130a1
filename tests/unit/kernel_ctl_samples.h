#pragma once
// Well-formed messages of each kind the daemon writes to /dev/ibemu, and
// well-formed records of each kind the data channel carries either way: the
// validator's unit test starts from them, and so does its fuzz target's corpus.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "emulator-daemon/kernel_messages.h"
#include "kernel/ibemu_ctl_validate.h"

namespace ibemu::testing {

inline ibemu_ctl_add_device valid_device() {
  auto m = kernel_message<ibemu_ctl_add_device>(IBEMU_CTL_ADD_DEVICE);
  m.abi_version = IBEMU_CTL_ABI_VERSION;
  m.num_ports = 2;
  std::strcpy(m.name, "ibemu0");
  std::strcpy(m.node_desc, "host ibemu0");
  m.max_cqe = 1024;
  m.max_sge = 16;
  m.kernel_qpn_first = 0xf00000;
  m.kernel_qpn_count = 0xfffff;
  return m;
}

inline ibemu_ctl_set_port valid_port() {
  auto m = kernel_message<ibemu_ctl_set_port>(IBEMU_CTL_SET_PORT);
  m.port = 1;
  m.state = 4;
  m.phys_state = 5;
  m.max_mtu = 5;
  m.active_mtu = 5;
  return m;
}

inline ibemu_ctl_mad_in valid_mad_in() {
  auto m = kernel_message<ibemu_ctl_mad_in>(IBEMU_CTL_MAD_IN);
  m.port = 1;
  return m;
}

inline ibemu_ctl_process_mad_reply valid_mad_reply() {
  auto m = kernel_message<ibemu_ctl_process_mad_reply>(IBEMU_CTL_PROCESS_MAD_REPLY);
  m.hdr.seq = 7;
  m.result = IBEMU_CTL_MAD_REPLY;
  return m;
}

// --- Data channel records: module -> daemon ---

inline constexpr uint32_t kSampleQpn = 0xf00001;

inline ibemu_data_create_cq valid_create_cq() {
  auto r = kernel_message<ibemu_data_create_cq>(IBEMU_DATA_CREATE_CQ);
  r.cq = 1;
  r.cqe = 256;
  return r;
}

inline ibemu_data_destroy_cq valid_destroy_cq() {
  auto r = kernel_message<ibemu_data_destroy_cq>(IBEMU_DATA_DESTROY_CQ);
  r.cq = 1;
  return r;
}

inline ibemu_data_reg_dma_mr valid_reg_dma_mr() {
  auto r = kernel_message<ibemu_data_reg_dma_mr>(IBEMU_DATA_REG_DMA_MR);
  r.key = 0x100;
  r.pd = 1;
  r.access = IBEMU_DATA_ACCESS_LOCAL_WRITE;
  return r;
}

inline ibemu_data_alloc_mr valid_alloc_mr() {
  auto r = kernel_message<ibemu_data_alloc_mr>(IBEMU_DATA_ALLOC_MR);
  r.key = 0x201;
  r.pd = 1;
  r.max_pages = 256;
  return r;
}

inline ibemu_data_dereg_mr valid_dereg_mr() {
  auto r = kernel_message<ibemu_data_dereg_mr>(IBEMU_DATA_DEREG_MR);
  r.mr = 2;
  return r;
}

inline ibemu_data_create_srq valid_create_srq() {
  auto r = kernel_message<ibemu_data_create_srq>(IBEMU_DATA_CREATE_SRQ);
  r.srq = 1;
  r.pd = 1;
  r.max_wr = 512;
  r.max_sge = 1;
  r.srq_limit = 16;
  return r;
}

inline ibemu_data_modify_srq valid_modify_srq() {
  auto r = kernel_message<ibemu_data_modify_srq>(IBEMU_DATA_MODIFY_SRQ);
  r.srq = 1;
  r.srq_limit = 32;
  return r;
}

inline ibemu_data_destroy_srq valid_destroy_srq() {
  auto r = kernel_message<ibemu_data_destroy_srq>(IBEMU_DATA_DESTROY_SRQ);
  r.srq = 1;
  return r;
}

// IPoIB's datagram QP: a UD QP of its own two CQs.
inline ibemu_data_create_qp valid_create_qp() {
  auto r = kernel_message<ibemu_data_create_qp>(IBEMU_DATA_CREATE_QP);
  r.qpn = kSampleQpn;
  r.pd = 1;
  r.send_cq = 1;
  r.recv_cq = 2;
  r.max_send_wr = 128;
  r.max_recv_wr = 256;
  r.max_send_sge = 16;
  r.max_recv_sge = 2;
  r.max_inline_data = 256;
  r.qp_type = IBEMU_DATA_QPT_UD;
  return r;
}

// An RC QP's INIT -> RTR, with everything that move requires.
inline ibemu_data_modify_qp valid_modify_qp() {
  auto r = kernel_message<ibemu_data_modify_qp>(IBEMU_DATA_MODIFY_QP);
  r.qpn = kSampleQpn;
  r.attr_mask = IBEMU_DATA_QP_STATE | IBEMU_DATA_QP_AV | IBEMU_DATA_QP_PATH_MTU |
                IBEMU_DATA_QP_DEST_QPN | IBEMU_DATA_QP_RQ_PSN | IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC |
                IBEMU_DATA_QP_MIN_RNR_TIMER;
  r.modify_seq = 2;
  r.qp_state = 2;  // RTR
  r.path_mtu = 5;
  r.dest_qpn = 0x000123;
  r.rq_psn = 0xabcdef;
  r.max_dest_rd_atomic = 16;
  r.min_rnr_timer = 12;
  r.av.dlid = 2;
  r.av.port = 1;
  return r;
}

inline ibemu_data_destroy_qp valid_destroy_qp() {
  auto r = kernel_message<ibemu_data_destroy_qp>(IBEMU_DATA_DESTROY_QP);
  r.qpn = kSampleQpn;
  return r;
}

// IPoIB's broadcast group of P_Key 0xffff.
inline ibemu_data_mcast valid_mcast(uint16_t type = IBEMU_DATA_MCAST_ATTACH) {
  auto r = kernel_message<ibemu_data_mcast>(type);
  const uint8_t mgid[16] = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0,    0,
                            0,    0,    0,    0,    0xff, 0xff, 0xff, 0xff};
  std::memcpy(r.mgid, mgid, sizeof(mgid));
  r.qpn = kSampleQpn;
  r.mlid = 0xc000;
  return r;
}

// A UD datagram of two pieces.
inline ibemu_data_send_wqe valid_send_wqe() {
  auto r = kernel_message<ibemu_data_send_wqe>(IBEMU_DATA_SEND_WQE);
  r.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(2, 0));
  r.token = 0x100000007;
  r.qpn = kSampleQpn;
  r.flags = IBEMU_DATA_SEND_SIGNALED;
  r.remote_qpn = 0xf00002;
  r.remote_qkey = 0x0b1b;
  r.opcode = IBEMU_DATA_WR_SEND;
  r.num_sge = 2;
  r.av.dlid = 3;
  r.av.port = 1;
  r.sge[0] = {0xffff888001000000, 4, 0x100};
  r.sge[1] = {0xffff888001234000, 2044, 0x100};
  return r;
}

// A small RC send whose bytes the module copied at post time.
inline ibemu_data_send_wqe valid_inline_send_wqe() {
  auto r = kernel_message<ibemu_data_send_wqe>(IBEMU_DATA_SEND_WQE);
  const char text[] = "inline bytes";  // 13 with its NUL: padding follows
  r.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(0, sizeof(text)));
  r.token = 8;
  r.qpn = kSampleQpn;
  r.flags = IBEMU_DATA_SEND_SIGNALED | IBEMU_DATA_SEND_INLINE;
  r.opcode = IBEMU_DATA_WR_SEND_WITH_IMM;
  r.imm_or_rkey = 0x01020304;
  r.inline_len = sizeof(text);
  std::memcpy(r.inline_data, text, sizeof(text));
  return r;
}

// nvme-rdma's fast registration of 8 pages.
inline ibemu_data_send_wqe valid_reg_mr_wqe() {
  auto r = kernel_message<ibemu_data_send_wqe>(IBEMU_DATA_SEND_WQE);
  r.hdr.length = static_cast<uint16_t>(ibemu_data_send_wqe_length(0, 0));
  r.token = 9;
  r.qpn = kSampleQpn;
  r.opcode = IBEMU_DATA_WR_REG_MR;
  r.reg.iova = 0xffff888002000000;
  r.reg.length = 8 * 4096;
  r.reg.key = 0x202;
  r.reg.access = IBEMU_DATA_ACCESS_LOCAL_WRITE | IBEMU_DATA_ACCESS_REMOTE_READ |
                 IBEMU_DATA_ACCESS_REMOTE_WRITE;
  r.reg.generation = 1;
  r.reg.page_size = 4096;
  return r;
}

inline ibemu_data_recv_wqe valid_recv_wqe() {
  auto r = kernel_message<ibemu_data_recv_wqe>(IBEMU_DATA_RECV_WQE);
  r.hdr.length = static_cast<uint16_t>(ibemu_data_recv_wqe_length(1));
  r.token = 10;
  r.qpn = kSampleQpn;
  r.num_sge = 1;
  r.sge[0] = {0xffff888003000000, 2048 + 40, 0x100};
  return r;
}

inline ibemu_data_recv_wqe valid_srq_recv_wqe() {
  auto r = valid_recv_wqe();
  r.qpn = 0;
  r.srq = 1;
  return r;
}

// --- Data channel records: daemon -> module ---

// A UD receive with a GRH.
inline ibemu_data_cqe valid_cqe() {
  auto r = kernel_message<ibemu_data_cqe>(IBEMU_DATA_CQE);
  r.token = 10;
  r.cq = 2;
  r.qpn = kSampleQpn;
  r.byte_len = 40 + 1500;
  r.src_qp = 0xf00002;
  r.flags = IBEMU_DATA_WC_GRH;
  r.slid = 3;
  r.opcode = IBEMU_DATA_WC_RECV;
  return r;
}

// The engine gave up retrying: the QP is in ERR after modify 4.
inline ibemu_data_event valid_event() {
  auto r = kernel_message<ibemu_data_event>(IBEMU_DATA_EVENT);
  r.handle = kSampleQpn;
  r.modify_seq = 4;
  r.object = IBEMU_DATA_EVENT_ON_QP;
  r.event = IBEMU_DATA_EVENT_QP_STATE;
  r.qp_state = IBEMU_DATA_QPS_ERR;
  return r;
}

inline ibemu_data_copy_segment valid_copy_segment() {
  ibemu_data_copy_segment s{};
  s.iova = 0xffff888001000000;
  s.buffer = 0x7f0000001000;
  s.mr = 1;
  s.length = 4096;
  s.direction = IBEMU_DATA_COPY_FROM_KERNEL;
  return s;
}

inline ibemu_data_copy valid_copy() {
  ibemu_data_copy c{};
  c.segments = 0x7f0000002000;
  c.count = 2;
  return c;
}

inline ibemu_data_complete valid_complete() {
  ibemu_data_complete c{};
  c.records = 0x7f0000003000;
  c.length = sizeof(ibemu_data_cqe) + sizeof(ibemu_data_event);
  return c;
}

/// A record's bytes as the channel carries them: the first hdr.length.
template <typename Record>
std::vector<uint8_t> record_bytes(const Record& r) {
  const auto* p = reinterpret_cast<const uint8_t*>(&r);
  return {p, p + r.hdr.length};
}

struct DataSample {
  std::string name;
  ibemu_data_direction direction;
  std::vector<uint8_t> bytes;
};

/// One well-formed record of each kind (and each shape of WQE).
inline std::vector<DataSample> data_samples() {
  const auto to_daemon = IBEMU_DATA_TO_DAEMON;
  const auto to_module = IBEMU_DATA_TO_MODULE;
  return {
      {"create_cq", to_daemon, record_bytes(valid_create_cq())},
      {"destroy_cq", to_daemon, record_bytes(valid_destroy_cq())},
      {"reg_dma_mr", to_daemon, record_bytes(valid_reg_dma_mr())},
      {"alloc_mr", to_daemon, record_bytes(valid_alloc_mr())},
      {"dereg_mr", to_daemon, record_bytes(valid_dereg_mr())},
      {"create_srq", to_daemon, record_bytes(valid_create_srq())},
      {"modify_srq", to_daemon, record_bytes(valid_modify_srq())},
      {"destroy_srq", to_daemon, record_bytes(valid_destroy_srq())},
      {"create_qp", to_daemon, record_bytes(valid_create_qp())},
      {"modify_qp", to_daemon, record_bytes(valid_modify_qp())},
      {"destroy_qp", to_daemon, record_bytes(valid_destroy_qp())},
      {"mcast_attach", to_daemon, record_bytes(valid_mcast(IBEMU_DATA_MCAST_ATTACH))},
      {"mcast_detach", to_daemon, record_bytes(valid_mcast(IBEMU_DATA_MCAST_DETACH))},
      {"send_wqe", to_daemon, record_bytes(valid_send_wqe())},
      {"inline_send_wqe", to_daemon, record_bytes(valid_inline_send_wqe())},
      {"reg_mr_wqe", to_daemon, record_bytes(valid_reg_mr_wqe())},
      {"recv_wqe", to_daemon, record_bytes(valid_recv_wqe())},
      {"srq_recv_wqe", to_daemon, record_bytes(valid_srq_recv_wqe())},
      {"cqe", to_module, record_bytes(valid_cqe())},
      {"event", to_module, record_bytes(valid_event())},
  };
}

}  // namespace ibemu::testing
