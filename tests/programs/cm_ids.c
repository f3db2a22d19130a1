/*
 * rdma_cm ids as middleware uses them, written against Debian's librdmacm:
 *   cm_ids ADDR PORT
 * 1. rdma_getaddrinfo(NULL, NULL, hints) with the addresses only in the
 *    hints (libfabric's verbs provider asks so) gives them back, with the
 *    hints' flags, QP type and port space;
 * 2. an id bound to ADDR, and one whose address was resolved to ADDR, have
 *    a protection domain of their device, one for the device (UCX creates
 *    its QPs with id->pd), on which a QP can be created;
 * 3. a synchronous id moved to an event channel (libfabric resolves with
 *    rdma_create_ep, then rdma_migrate_id) has its kept event acknowledged
 *    on the way, so rdma_destroy_id returns instead of waiting for it;
 * 4. an id destroyed while its route is being resolved (libfabric tears
 *    endpoints down so) hears nothing of the SA's late answer (a sanitized
 *    build reports any use of the freed id).
 * Prints what it checked; exits 0 when all was as rdma-core's librdmacm does.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ipv4_address.h"

static int failures;

static void check(int ok, const char* what) {
  printf("%s %s\n", ok ? "ok" : "FAILED", what);
  failures += !ok;
}

static void addresses_from_hints(const char* ip, int port) {
  struct sockaddr_in src = ipv4_address(ip, 0), dst = ipv4_address(ip, port);
  struct rdma_addrinfo hints = {0}, *res = NULL;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_qp_type = IBV_QPT_RC;
  hints.ai_family = AF_INET;
  hints.ai_src_addr = (struct sockaddr*)&src;
  hints.ai_src_len = sizeof(src);
  hints.ai_dst_addr = (struct sockaddr*)&dst;
  hints.ai_dst_len = sizeof(dst);
  const int ret = rdma_getaddrinfo(NULL, NULL, &hints, &res);
  check(ret == 0 && res, "rdma_getaddrinfo(NULL, NULL, hints) succeeds");
  if (ret || !res) return;
  check(res->ai_dst_len == sizeof(dst) && !memcmp(res->ai_dst_addr, &dst, sizeof(dst)),
        "the destination is the hints'");
  check(res->ai_src_len == sizeof(src) && !memcmp(res->ai_src_addr, &src, sizeof(src)),
        "the source is the hints'");
  check(res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC &&
            res->ai_family == AF_INET,
        "the port space, QP type and family are the hints'");
  rdma_freeaddrinfo(res);
}

static int qp_on_the_ids_pd(struct rdma_cm_id* id) {
  struct ibv_cq* cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
  if (!cq) return 0;
  struct ibv_qp_init_attr attr = {
      .send_cq = cq,
      .recv_cq = cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(id->pd, &attr);
  const int ok = qp != NULL;
  if (qp) ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  return ok;
}

static void ids_have_a_pd(const char* ip) {
  struct rdma_cm_id *bound = NULL, *resolved = NULL;
  if (rdma_create_id(NULL, &bound, NULL, RDMA_PS_TCP) ||
      rdma_create_id(NULL, &resolved, NULL, RDMA_PS_TCP)) {
    perror("rdma_create_id");
    exit(1);
  }
  check(bound->pd == NULL, "a new id has no protection domain yet");
  struct sockaddr_in src = ipv4_address(ip, 0), dst = ipv4_address(ip, 7);
  check(rdma_bind_addr(bound, (struct sockaddr*)&src) == 0, "rdma_bind_addr");
  check(bound->verbs && bound->pd && bound->pd->context == bound->verbs,
        "a bound id has a protection domain of its device");
  check(rdma_resolve_addr(resolved, NULL, (struct sockaddr*)&dst, 2000) == 0, "rdma_resolve_addr");
  check(resolved->pd && resolved->pd->context == resolved->verbs,
        "an id whose address is resolved has a protection domain of its device");
  check(resolved->pd == bound->pd, "ids of one device share its protection domain");
  check(bound->pd && qp_on_the_ids_pd(bound), "a QP is created on id->pd");
  rdma_destroy_id(resolved);
  rdma_destroy_id(bound);
}

static void sync_id_moves_to_a_channel(const char* ip) {
  struct rdma_cm_id* id = NULL;
  struct rdma_event_channel* channel = rdma_create_event_channel();
  if (!channel || rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)) {
    perror("rdma_create_id");
    exit(1);
  }
  struct sockaddr_in dst = ipv4_address(ip, 7);
  check(rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, 2000) == 0 && id->event,
        "a synchronous id keeps its ADDR_RESOLVED event");
  errno = 0;
  check(rdma_migrate_id(id, NULL) == -1 && errno == EINVAL,
        "a synchronous id cannot move to a channel of its own (EINVAL)");
  check(rdma_migrate_id(id, channel) == 0 && id->event == NULL && id->channel == channel,
        "rdma_migrate_id to a channel acknowledges the kept event");
  alarm(10);  // a destroy waiting for an acknowledgement never comes back
  check(rdma_destroy_id(id) == 0, "rdma_destroy_id of the moved id returns");
  alarm(0);
  rdma_destroy_event_channel(channel);
}

static void destroyed_while_resolving_route(const char* ip) {
  struct rdma_event_channel* channel = rdma_create_event_channel();
  struct rdma_cm_id* id = NULL;
  if (!channel || rdma_create_id(channel, &id, NULL, RDMA_PS_TCP)) {
    perror("rdma_create_id");
    exit(1);
  }
  struct sockaddr_in dst = ipv4_address(ip, 7);
  struct rdma_cm_event* event = NULL;
  int resolved = rdma_resolve_addr(id, NULL, (struct sockaddr*)&dst, 2000) == 0 &&
                 rdma_get_cm_event(channel, &event) == 0 &&
                 event->event == RDMA_CM_EVENT_ADDR_RESOLVED;
  if (event) rdma_ack_cm_event(event);
  check(resolved && rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route started");
  check(rdma_destroy_id(id) == 0, "rdma_destroy_id while the route is resolved");
  usleep(300 * 1000);  // the SA's answer arrives for an id that is gone
  rdma_destroy_event_channel(channel);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cm_ids ADDR PORT\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);  // what was checked shows even if the alarm ends it
  addresses_from_hints(argv[1], atoi(argv[2]));
  ids_have_a_pd(argv[1]);
  sync_id_moves_to_a_channel(argv[1]);
  destroyed_while_resolving_route(argv[1]);
  return failures ? 1 : 0;
}
