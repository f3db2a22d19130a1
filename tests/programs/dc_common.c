#include "dc_common.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const struct dc_dci_attr dc_dci_defaults = {
    .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};

int dc_query_port(struct dc_port* p) {
  struct ibv_port_attr attr;
  int err = ibv_query_port(p->ctx, p->port, &attr);
  if (err) return err;
  if (attr.state != IBV_PORT_ACTIVE || !attr.lid) return ENETDOWN;
  p->lid = attr.lid;
  p->mtu = attr.active_mtu;
  return 0;
}

int dc_open_port(const char* name, uint8_t port, struct dc_port* p) {
  struct ibv_device** list = ibv_get_device_list(NULL);
  if (!list) return errno ? errno : ENODEV;
  memset(p, 0, sizeof(*p));
  for (int i = 0; list[i]; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), name)) p->ctx = ibv_open_device(list[i]);
  int err = p->ctx ? 0 : (errno ? errno : ENODEV);
  ibv_free_device_list(list);
  if (err) return err;
  p->port = port;
  return dc_query_port(p);
}

int dc_parse_port(const char* text, char* dev, size_t dev_len, uint8_t* port) {
  const char* colon = strchr(text, ':');
  const size_t n = colon ? (size_t)(colon - text) : strlen(text);
  if (n == 0 || n >= dev_len) return -1;
  memcpy(dev, text, n);
  dev[n] = 0;
  const int p = colon ? atoi(colon + 1) : 1;
  if (p < 1 || p > 255) return -1;
  *port = (uint8_t)p;
  return 0;
}

struct ibv_qp* dc_create_dct(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq,
                             struct ibv_srq* srq, uint64_t key) {
  struct ibv_qp_init_attr_ex attr = {.qp_type = IBV_QPT_DRIVER,
                                     .send_cq = cq,
                                     .recv_cq = cq,
                                     .srq = srq,
                                     .comp_mask = IBV_QP_INIT_ATTR_PD,
                                     .pd = pd};
  struct mlx5dv_qp_init_attr dv = {
      .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
      .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCT, .dct_access_key = key}};
  return mlx5dv_create_qp(ctx, &attr, &dv);
}

int dc_dct_ready(struct ibv_qp* dct, const struct dc_port* p, int access) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = p->port, .qp_access_flags = access};
  int err =
      ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (err) return err;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p->mtu;
  a.min_rnr_timer = 12; /* 0.64 ms before an RNR-NAKed DCI retries */
  a.ah_attr.port_num = p->port;
  return ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER);
}

struct ibv_qp* dc_create_dci(struct ibv_context* ctx, struct ibv_pd* pd, struct ibv_cq* cq,
                             uint32_t max_wr, uint32_t max_sge, uint64_t ops) {
  struct ibv_qp_init_attr_ex attr = {
      .qp_type = IBV_QPT_DRIVER,
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = max_wr, .max_send_sge = max_sge},
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = pd,
      .send_ops_flags = ops};
  struct mlx5dv_qp_init_attr dv = {
      .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC | MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
      .create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
      .dc_init_attr = {.dc_type = MLX5DV_DCTYPE_DCI}};
  return mlx5dv_create_qp(ctx, &attr, &dv);
}

int dc_dci_ready(struct ibv_qp* dci, const struct dc_port* p, const struct dc_dci_attr* d) {
  /* No ACCESS_FLAGS: the Linux mlx5 driver refuses them on a DCI. */
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = p->port};
  int err = ibv_modify_qp(dci, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
  if (err) return err;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p->mtu;
  a.ah_attr.port_num = p->port;
  err = ibv_modify_qp(dci, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU);
  if (err) return err;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = d->timeout;
  a.retry_cnt = d->retry_cnt;
  a.rnr_retry = d->rnr_retry;
  a.sq_psn = 0;
  a.max_rd_atomic = d->max_rd_atomic;
  return ibv_modify_qp(dci, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int dc_dci_recover(struct ibv_qp* dci, const struct dc_port* p, const struct dc_dci_attr* d) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
  int err = ibv_modify_qp(dci, &a, IBV_QP_STATE);
  return err ? err : dc_dci_ready(dci, p, d);
}

int dc_qp_state(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr init;
  int err = ibv_query_qp(qp, &a, IBV_QP_STATE, &init);
  if (err) {
    errno = err;
    return -1;
  }
  return a.qp_state;
}

const char* dc_state_str(int state) {
  static const char* const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state >= 0 && state < (int)(sizeof(names) / sizeof(names[0])) ? names[state] : "?";
}

uint64_t dc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dc_poll_one(struct ibv_cq* cq, struct ibv_wc* wc, int timeout_ms) {
  const uint64_t deadline = dc_now_ms() + timeout_ms;
  for (unsigned spins = 0;; ++spins) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n) return n < 0 ? -1 : 1;
    if (spins > 64) {
      /* Leave the CPU to the progress threads on a small machine. */
      if (dc_now_ms() > deadline) return 0;
      usleep(20);
    }
  }
}

struct ibv_ah* dc_create_ah(struct ibv_pd* pd, const struct dc_port* p, uint16_t dlid) {
  struct ibv_ah_attr a = {.dlid = dlid, .port_num = p->port};
  return ibv_create_ah(pd, &a);
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t pattern_word(uint64_t seed, uint64_t word) {
  return mix64(seed * 0x9e3779b97f4a7c15ull + word);
}

uint8_t dc_pattern_byte(uint64_t seed, uint64_t offset) {
  return (uint8_t)(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

void dc_fill(void* buf, size_t len, uint64_t seed, uint64_t offset, int invert) {
  uint8_t* b = buf;
  const uint8_t x = invert ? 0xff : 0;
  for (size_t i = 0; i < len;) {
    const uint64_t at = offset + i, w = pattern_word(seed, at / 8);
    for (unsigned k = at % 8; k < 8 && i < len; ++k, ++i) b[i] = (uint8_t)(w >> (8 * k)) ^ x;
  }
}

long dc_check(const void* buf, size_t len, uint64_t seed, uint64_t offset, int invert) {
  const uint8_t* b = buf;
  const uint8_t x = invert ? 0xff : 0;
  for (size_t i = 0; i < len;) {
    const uint64_t at = offset + i, w = pattern_word(seed, at / 8);
    for (unsigned k = at % 8; k < 8 && i < len; ++k, ++i)
      if (b[i] != ((uint8_t)(w >> (8 * k)) ^ x)) return (long)i;
  }
  return -1;
}

int dc_write_full(int fd, const void* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = write(fd, (const char*)p + done, n - done);
    if (r < 0 && errno != EINTR) return -1;
    if (r > 0) done += r;
  }
  return 0;
}

int dc_read_full(int fd, void* p, size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = read(fd, (char*)p + done, n - done);
    if (r == 0 || (r < 0 && errno != EINTR)) return -1;
    if (r > 0) done += r;
  }
  return 0;
}

static const char* watchdog_what = "";

static void watchdog_fired(int sig) {
  (void)sig;
  static const char head[] = "TIMEOUT: no progress: ";
  ssize_t r = write(2, head, sizeof(head) - 1);
  r = write(2, watchdog_what, strlen(watchdog_what));
  r = write(2, "\n", 1);
  (void)r;
  _exit(1);
}

void dc_watchdog(const char* what, unsigned seconds) {
  static int installed;
  if (!installed) {
    struct sigaction sa = {.sa_handler = watchdog_fired};
    sigaction(SIGALRM, &sa, NULL);
    installed = 1;
  }
  watchdog_what = what;
  alarm(seconds);
}
