#include "rc_common.h"

#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_connect(const char* server_name, int tcp_port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res, *it;
  char port[16];
  int fd = -1;
  snprintf(port, sizeof(port), "%d", tcp_port);
  if (server_name) {
    if (getaddrinfo(server_name, port, &hints, &res)) return -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      for (it = res; it; it = it->ai_next) {
        fd = socket(it->ai_family, it->ai_socktype, 0);
        if (fd >= 0 && connect(fd, it->ai_addr, it->ai_addrlen) == 0) break;
        if (fd >= 0) close(fd);
        fd = -1;
      }
      if (fd < 0) usleep(50000); /* the server may not listen yet */
    }
    freeaddrinfo(res);
    return fd;
  }
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(NULL, port, &hints, &res)) return -1;
  int lfd = socket(res->ai_family, res->ai_socktype, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 1)) {
    perror("bind/listen");
    freeaddrinfo(res);
    return -1;
  }
  freeaddrinfo(res);
  fd = accept(lfd, NULL, NULL);
  close(lfd);
  return fd;
}

int exchange(int fd, const void* out, void* in, size_t n) {
  if (write(fd, out, n) != (ssize_t)n) return -1;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char*)in + got, n - got);
    if (r <= 0) return -1;
    got += r;
  }
  return 0;
}

int connect_rc_qp(struct ibv_qp* qp, uint32_t remote_qpn, uint16_t remote_lid, enum ibv_mtu mtu,
                  uint8_t timeout, uint8_t rnr_retry, int access) {
  return connect_rc_qp_psn(qp, remote_qpn, remote_lid, mtu, timeout, rnr_retry, access, 0, 0);
}

int connect_rc_qp_psn(struct ibv_qp* qp, uint32_t remote_qpn, uint16_t remote_lid, enum ibv_mtu mtu,
                      uint8_t timeout, uint8_t rnr_retry, int access, uint32_t sq_psn,
                      uint32_t rq_psn) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
  int err =
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (err) return err;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = remote_lid;
  a.ah_attr.port_num = 1;
  err = ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (err) return err;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.max_rd_atomic = 1;
  a.sq_psn = sq_psn;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

enum ibv_mtu mtu_from_bytes(int bytes) {
  for (enum ibv_mtu m = IBV_MTU_256; m <= IBV_MTU_4096; ++m)
    if (bytes == 128 << m) return m;
  return 0;
}

int open_rc_end(const char* device, int depth, struct rc_end* e) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  memset(e, 0, sizeof(*e));
  for (int i = 0; list && i < n && !e->ctx; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), device)) e->ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  struct ibv_port_attr pa;
  if (!e->ctx || ibv_query_port(e->ctx, 1, &pa)) return -1;
  e->lid = pa.lid;
  e->pd = ibv_alloc_pd(e->ctx);
  e->cq = e->pd ? ibv_create_cq(e->ctx, 2 * depth, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr qa = {
      .send_cq = e->cq,
      .recv_cq = e->cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 1, .max_recv_sge = 1}};
  e->qp = e->cq ? ibv_create_qp(e->pd, &qa) : NULL;
  return e->qp ? 0 : -1;
}
