/*
 * Helpers shared by ibemu's test programs: the TCP side channel on which two
 * processes exchange what they need to connect their QPs, as every verbs
 * example does.
 */
#ifndef IBEMU_TEST_RC_COMMON_H
#define IBEMU_TEST_RC_COMMON_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* With a server name: connects (retrying while the server starts).
 * Without: listens on tcp_port and accepts one connection. -1 on error. */
int tcp_connect(const char* server_name, int tcp_port);
/* Sends n bytes and receives n bytes from the peer. 0 or -1. */
int exchange(int fd, const void* out, void* in, size_t n);

/* RESET -> INIT -> RTR -> RTS for an RC QP on port 1 toward (remote_lid,
 * remote_qpn): path MTU, local ACK timeout and RNR retry as given, retry_cnt
 * 7, one outstanding READ/atomic each way. Returns 0 or an errno. */
int connect_rc_qp(struct ibv_qp* qp, uint32_t remote_qpn, uint16_t remote_lid, enum ibv_mtu mtu,
                  uint8_t timeout, uint8_t rnr_retry, int access);
/* The same with the first PSNs of each direction (connect_rc_qp: 0). */
int connect_rc_qp_psn(struct ibv_qp* qp, uint32_t remote_qpn, uint16_t remote_lid, enum ibv_mtu mtu,
                      uint8_t timeout, uint8_t rnr_retry, int access, uint32_t sq_psn,
                      uint32_t rq_psn);

/* The path MTU of `bytes` (256..4096), or 0 for any other number. */
enum ibv_mtu mtu_from_bytes(int bytes);

/* One HCA of a pair in one process: port 1 of `device`, a PD, a CQ and an
 * RC QP in RESET with `depth` WRs of one SGE each way. 0 or -1. */
struct rc_end {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  uint16_t lid;
};
int open_rc_end(const char* device, int depth, struct rc_end* e);

#endif
