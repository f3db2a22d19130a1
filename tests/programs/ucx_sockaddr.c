/*
 * UCX's client/server connection establishment (a UCP listener, endpoints
 * made from socket addresses) with its data checked:
 *   ucx_sockaddr server ADDR PORT [MESSAGES [BYTES]]
 *   ucx_sockaddr client ADDR PORT [MESSAGES [BYTES]]
 * The client sends MESSAGES tagged messages of BYTES, each with a pattern
 * naming it; the server checks every byte and answers with one message;
 * the client closes after that answer, so the server has taken all its
 * data before the connection goes (UCX's own example closes at once and
 * races its server). UCX_SOCKADDR_TLS_PRIORITY=rdmacm makes UCX connect
 * through rdma_cm. Prints "ok ..." and exits 0 when all arrived intact.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#include "ipv4_address.h"

enum { kDataTag = 1, kAnswerTag = 2 };

static ucp_worker_h worker;
static ucs_status_t peer_status = UCS_OK;

static void die(const char* what, ucs_status_t status) {
  fprintf(stderr, "%s: %s\n", what, ucs_status_string(status));
  exit(1);
}

static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)arg;
  (void)ep;
  peer_status = status;
}

/* Progresses the worker until the request is done; its status. */
static ucs_status_t wait_for(void* request) {
  if (request == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS)
    ucp_worker_progress(worker);
  ucp_request_free(request);
  return status;
}

static uint8_t pattern(int message, size_t i) {
  return (uint8_t)(i * 13 + (size_t)message * 7 + 3);
}

static ucp_ep_params_t endpoint_params(void) {
  ucp_ep_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = on_peer_error;
  return p;
}

static void on_connection(ucp_conn_request_h request, void* arg) {
  ucp_conn_request_h* slot = arg;
  if (*slot == NULL)
    *slot = request;
  else
    ucp_listener_reject(NULL, request); /* one client */
}

static void serve(struct sockaddr_in* at, int messages, size_t bytes) {
  ucp_conn_request_h request = NULL;
  ucp_listener_params_t lp;
  memset(&lp, 0, sizeof lp);
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = (const struct sockaddr*)at;
  lp.sockaddr.addrlen = sizeof *at;
  lp.conn_handler.cb = on_connection;
  lp.conn_handler.arg = &request;
  ucp_listener_h listener;
  ucs_status_t status = ucp_listener_create(worker, &lp, &listener);
  if (status != UCS_OK) die("ucp_listener_create", status);
  printf("listening\n");
  fflush(stdout);
  while (request == NULL) ucp_worker_progress(worker);

  ucp_ep_params_t ep_params = endpoint_params();
  ep_params.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
  ep_params.conn_request = request;
  ucp_ep_h ep;
  status = ucp_ep_create(worker, &ep_params, &ep);
  if (status != UCS_OK) die("ucp_ep_create (server)", status);

  uint8_t* buf = malloc(bytes);
  ucp_request_param_t none = {.op_attr_mask = 0};
  for (int m = 0; m < messages; m++) {
    memset(buf, 0, bytes);
    status = wait_for(ucp_tag_recv_nbx(worker, buf, bytes, kDataTag, ~(ucp_tag_t)0, &none));
    if (status != UCS_OK) die("receive", status);
    for (size_t i = 0; i < bytes; i++)
      if (buf[i] != pattern(m, i)) {
        fprintf(stderr, "message %d: byte %zu is 0x%02x, not 0x%02x\n", m, i, buf[i],
                pattern(m, i));
        exit(1);
      }
  }
  uint32_t answer = (uint32_t)messages;
  status = wait_for(ucp_tag_send_nbx(ep, &answer, sizeof answer, kAnswerTag, &none));
  if (status != UCS_OK) die("answer", status);
  printf("ok server received %d messages of %zu bytes intact\n", messages, bytes);
  /* The client closes once it has the answer: the server waits for that
   * (its endpoint then reports the reset) and only then lets its own go, so
   * that nothing the client still flushes meets a QP already gone. */
  const time_t deadline = time(NULL) + 30;
  while (peer_status == UCS_OK && time(NULL) < deadline) ucp_worker_progress(worker);
  if (peer_status == UCS_OK) {
    fprintf(stderr, "the client did not close its endpoint\n");
    exit(1);
  }
  ucp_request_param_t force = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_EP_CLOSE_FLAG_FORCE};
  wait_for(ucp_ep_close_nbx(ep, &force));
  ucp_listener_destroy(listener);
  free(buf);
}

static void connect_and_send(struct sockaddr_in* to, int messages, size_t bytes) {
  ucp_ep_params_t ep_params = endpoint_params();
  ep_params.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep_params.sockaddr.addr = (const struct sockaddr*)to;
  ep_params.sockaddr.addrlen = sizeof *to;
  ucp_ep_h ep;
  ucs_status_t status = ucp_ep_create(worker, &ep_params, &ep);
  if (status != UCS_OK) die("ucp_ep_create (client)", status);

  uint8_t* buf = malloc(bytes);
  ucp_request_param_t none = {.op_attr_mask = 0};
  for (int m = 0; m < messages; m++) {
    for (size_t i = 0; i < bytes; i++) buf[i] = pattern(m, i);
    status = wait_for(ucp_tag_send_nbx(ep, buf, bytes, kDataTag, &none));
    if (status != UCS_OK) die("send", status);
  }
  uint32_t answer = 0;
  status =
      wait_for(ucp_tag_recv_nbx(worker, &answer, sizeof answer, kAnswerTag, ~(ucp_tag_t)0, &none));
  if (status != UCS_OK || answer != (uint32_t)messages) {
    fprintf(stderr, "the server's answer: %s, %u\n", ucs_status_string(status), answer);
    exit(1);
  }
  status = wait_for(ucp_ep_close_nbx(ep, &none));
  if (status != UCS_OK && peer_status == UCS_OK) die("ucp_ep_close_nbx", status);
  printf("ok client sent %d messages of %zu bytes, the server took them all\n", messages, bytes);
  free(buf);
}

int main(int argc, char** argv) {
  if (argc < 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
    fprintf(stderr, "usage: ucx_sockaddr server|client ADDR PORT [MESSAGES [BYTES]]\n");
    return 2;
  }
  struct sockaddr_in addr = ipv4_address(argv[2], atoi(argv[3]));
  const int messages = argc > 4 ? atoi(argv[4]) : 10;
  const size_t bytes = argc > 5 ? (size_t)atol(argv[5]) : 65536;

  ucp_config_t* config;
  ucs_status_t status = ucp_config_read(NULL, NULL, &config);
  if (status != UCS_OK) die("ucp_config_read", status);
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) die("ucp_init", status);
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context, &wp, &worker);
  if (status != UCS_OK) die("ucp_worker_create", status);

  if (argv[1][0] == 's')
    serve(&addr, messages, bytes);
  else
    connect_and_send(&addr, messages, bytes);

  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return 0;
}
