/*
 * Probes rdma_cm's events and errors, written against Debian's librdmacm.
 *   cm_probe listen ADDR PORT [stall|reject|accept]
 *       binds and listens, prints "listening", waits for a connect request
 *       and prints "request <private data>"; then stalls forever, rejects
 *       with private data "no thanks", or accepts and waits for the peer to
 *       disconnect, printing each event;
 *   cm_probe connect ADDR PORT [TIMEOUT_MS]
 *       resolves and connects with private data "hello", polling the
 *       channel's fd in non-blocking mode; prints every event as
 *       "event NAME status N" and, for REJECTED, the private data; after
 *       ESTABLISHED it disconnects and waits for DISCONNECTED.
 * Exits 0 when the calls behaved as documented, whatever the outcome.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct rdma_event_channel* channel;

static void die(const char* what) {
  perror(what);
  exit(1);
}

static struct rdma_cm_event* next_event(void) {
  struct rdma_cm_event* e;
  for (;;) {
    if (rdma_get_cm_event(channel, &e) == 0) break;
    if (errno != EAGAIN) die("rdma_get_cm_event");
    struct pollfd p = {.fd = channel->fd, .events = POLLIN};
    if (poll(&p, 1, 30000) != 1) die("poll: no event in 30 s");
  }
  printf("event %s status %d\n", rdma_event_str(e->event), e->status);
  fflush(stdout);
  return e;
}

static void address(const char* host, const char* port, struct sockaddr_storage* out) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res;
  if (getaddrinfo(host, port, &hints, &res)) die("getaddrinfo");
  memcpy(out, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
}

static void print_private_data(const char* label, const void* data, int len) {
  char text[64] = "";
  if (data && len > 0) snprintf(text, sizeof text, "%.*s", len < 63 ? len : 63, (const char*)data);
  printf("%s %s\n", label, text);
  fflush(stdout);
}

static int listen_side(const char* host, const char* port, const char* mode) {
  struct rdma_cm_id* listener;
  struct sockaddr_storage addr;
  address(host, port, &addr);
  if (rdma_create_id(channel, &listener, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_bind_addr(listener, (struct sockaddr*)&addr)) die("rdma_bind_addr");
  if (rdma_listen(listener, 4)) die("rdma_listen");
  printf("listening port %d\n", ntohs(rdma_get_src_port(listener)));
  fflush(stdout);
  struct rdma_cm_event* e = next_event();
  if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) return 1;
  struct rdma_cm_id* id = e->id;
  print_private_data("request", e->param.conn.private_data, e->param.conn.private_data_len);
  rdma_ack_cm_event(e);
  if (!strcmp(mode, "stall")) {
    for (;;) pause();
  }
  if (!strcmp(mode, "reject")) {
    if (rdma_reject(id, "no thanks", 10)) die("rdma_reject");
    rdma_destroy_id(id);
    rdma_destroy_id(listener);
    return 0;
  }
  struct rdma_conn_param param = {.responder_resources = 1, .initiator_depth = 1};
  struct ibv_qp_init_attr qp = {
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  if (rdma_create_qp(id, NULL, &qp)) die("rdma_create_qp");
  if (rdma_accept(id, &param)) die("rdma_accept");
  for (;;) {
    e = next_event();
    enum rdma_cm_event_type type = e->event;
    rdma_ack_cm_event(e);
    if (type == RDMA_CM_EVENT_DISCONNECTED) break;
    if (type != RDMA_CM_EVENT_ESTABLISHED) return 1;
  }
  rdma_disconnect(id);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(listener);
  return 0;
}

static int connect_side(const char* host, const char* port, int timeout_ms) {
  struct rdma_cm_id* id;
  struct sockaddr_storage addr;
  struct rdma_cm_event* e;
  address(host, port, &addr);
  if (rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) die("rdma_create_id");
  if (rdma_resolve_addr(id, NULL, (struct sockaddr*)&addr, timeout_ms)) die("rdma_resolve_addr");
  e = next_event();
  if (e->event != RDMA_CM_EVENT_ADDR_RESOLVED) return rdma_ack_cm_event(e), 0;
  rdma_ack_cm_event(e);
  if (rdma_resolve_route(id, timeout_ms)) die("rdma_resolve_route");
  e = next_event();
  if (e->event != RDMA_CM_EVENT_ROUTE_RESOLVED) return rdma_ack_cm_event(e), 0;
  rdma_ack_cm_event(e);
  struct ibv_qp_init_attr qp = {
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  if (rdma_create_qp(id, NULL, &qp)) die("rdma_create_qp");
  struct rdma_conn_param param = {.private_data = "hello",
                                  .private_data_len = 6,
                                  .responder_resources = 1,
                                  .initiator_depth = 1,
                                  .retry_count = 7,
                                  .rnr_retry_count = 7};
  if (rdma_connect(id, &param)) die("rdma_connect");
  e = next_event();
  if (e->event == RDMA_CM_EVENT_REJECTED)
    print_private_data("rejected", e->param.conn.private_data, e->param.conn.private_data_len);
  enum rdma_cm_event_type type = e->event;
  rdma_ack_cm_event(e);
  if (type == RDMA_CM_EVENT_ESTABLISHED) {
    if (rdma_disconnect(id)) die("rdma_disconnect");
    e = next_event();
    rdma_ack_cm_event(e);
  }
  rdma_destroy_qp(id);
  if (rdma_destroy_id(id)) die("rdma_destroy_id");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: cm_probe listen|connect ADDR PORT [MODE|TIMEOUT_MS]\n");
    return 2;
  }
  channel = rdma_create_event_channel();
  if (!channel) die("rdma_create_event_channel");
  if (fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK)) die("fcntl");
  struct rdma_cm_event* e;
  if (rdma_get_cm_event(channel, &e) == 0 || errno != EAGAIN) {
    fprintf(stderr, "an empty non-blocking channel must give EAGAIN\n");
    return 1;
  }
  int ret = !strcmp(argv[1], "listen")
                ? listen_side(argv[2], argv[3], argc > 4 ? argv[4] : "accept")
                : connect_side(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 2000);
  rdma_destroy_event_channel(channel);
  return ret;
}
