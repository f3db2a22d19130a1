/*
 * Helpers shared by ibemu's DC test programs (dc_transfer, dc_fanout,
 * dc_errors): DCTs and DCIs made with mlx5dv_create_qp and moved through
 * their states with exactly the attribute masks the Linux mlx5 driver
 * accepts, completions polled with a deadline, and a data pattern that
 * differs for every (seed, offset), so stale or misplaced bytes show.
 */
#ifndef IBEMU_TEST_DC_COMMON_H
#define IBEMU_TEST_DC_COMMON_H

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

/* One HCA port: the context, the port number and what a QP needs of it. */
struct dc_port {
  struct ibv_context* ctx;
  uint8_t port;
  uint16_t lid;
  enum ibv_mtu mtu; /* the port's active MTU */
};

/* Opens device `name` and fills *p for port `port`. 0 or an errno. */
int dc_open_port(const char* name, uint8_t port, struct dc_port* p);
/* Splits "DEV:PORT" (or "DEV", port 1) into dev (of dev_len bytes) and
 * *port. 0, or -1 when it is malformed. */
int dc_parse_port(const char* text, char* dev, size_t dev_len, uint8_t* port);
/* Fills p->lid and p->mtu from p->ctx and p->port. 0 or an errno. */
int dc_query_port(struct dc_port* p);

/* A DCT with access key `key` that receives through `srq` (completions on
 * `cq`), left in RESET. NULL with errno set on failure. */
struct ibv_qp* dc_create_dct(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq,
                             struct ibv_srq* srq, uint64_t key);
/* RESET -> INIT (STATE|PKEY_INDEX|PORT|ACCESS_FLAGS) -> RTR
 * (STATE|AV|PATH_MTU|MIN_RNR_TIMER): a DCT serves from RTR on, and its
 * qp_num is valid from then. 0 or an errno. */
int dc_dct_ready(struct ibv_qp* dct, const struct dc_port* p, int access);

/* A DCI with `max_wr` send WRs of up to `max_sge` SGEs and the ibv_wr_*
 * operations `ops` (IBV_QP_EX_WITH_*), left in RESET. NULL with errno set. */
struct ibv_qp* dc_create_dci(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq,
                             uint32_t max_wr, uint32_t max_sge, uint64_t ops);

/* A DCI's send attributes: the local ACK timeout exponent, the transport
 * and RNR retry counts, how many READs/atomics it may have outstanding. */
struct dc_dci_attr {
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t max_rd_atomic;
};
/* timeout 14, retry_cnt 7, rnr_retry 7, max_rd_atomic 1 */
extern const struct dc_dci_attr dc_dci_defaults;

/* RESET -> INIT (STATE|PKEY_INDEX|PORT) -> RTR (STATE|AV|PATH_MTU) -> RTS
 * (STATE|TIMEOUT|RETRY_CNT|RNR_RETRY|SQ_PSN|MAX_QP_RD_ATOMIC). 0 or an errno. */
int dc_dci_ready(struct ibv_qp* dci, const struct dc_port* p, const struct dc_dci_attr* a);
/* A DCI in any state (ERR after a failed WR) back to RTS: -> RESET, then
 * dc_dci_ready. 0 or an errno. */
int dc_dci_recover(struct ibv_qp* dci, const struct dc_port* p, const struct dc_dci_attr* a);

/* The QP's state (ibv_query_qp), or -1 with errno set. */
int dc_qp_state(struct ibv_qp* qp);
const char* dc_state_str(int state);

/* Waits up to `timeout_ms` for one completion on `cq`. 1 with *wc filled,
 * 0 on timeout, -1 when ibv_poll_cq fails. */
int dc_poll_one(struct ibv_cq* cq, struct ibv_wc* wc, int timeout_ms);

/* An address handle toward `dlid` on p's port (no GRH). NULL on failure. */
struct ibv_ah* dc_create_ah(struct ibv_pd* pd, const struct dc_port* p, uint16_t dlid);

/* The pattern: byte `offset` of stream `seed`. dc_fill writes bytes
 * [offset, offset + len) of the stream to buf (inverted with `invert`, a
 * value that differs from the pattern in every byte); dc_check returns the
 * index in buf of the first byte that differs, or -1. */
uint8_t dc_pattern_byte(uint64_t seed, uint64_t offset);
void dc_fill(void* buf, size_t len, uint64_t seed, uint64_t offset, int invert);
long dc_check(const void* buf, size_t len, uint64_t seed, uint64_t offset, int invert);

/* All n bytes to/from fd (retrying short transfers and EINTR): 0, or -1
 * on an error or end of file. */
int dc_write_full(int fd, const void* p, size_t n);
int dc_read_full(int fd, void* p, size_t n);

/* Milliseconds on the monotonic clock. */
uint64_t dc_now_ms(void);

/* Ends the process with status 1 and `what` on stderr after `seconds`
 * without a call to dc_watchdog (0 disarms), so a hang fails instead of
 * blocking. */
void dc_watchdog(const char* what, unsigned seconds);

#endif
