/*
 * idle_probe: an idle verbs process — device open, an RC QP in RTR with a
 * receive posted, then nothing for SECONDS. Prints the CPU time it used,
 * as a percentage of one core. A real HCA costs its host nothing here.
 *
 *   idle_probe [SECONDS]
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char** argv) {
  int seconds = argc > 1 ? atoi(argv[1]) : 5;
  struct ibv_device** list = ibv_get_device_list(NULL);
  struct ibv_context* ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
  if (!ctx) return 2;
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
  static char buf[4096];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr init = {
      .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .cap = {4, 4, 1, 1, 0}};
  struct ibv_qp* qp = ibv_create_qp(pd, &init);
  struct ibv_port_attr pa;
  ibv_query_port(ctx, 1, &pa);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  struct ibv_sge sge = {(uintptr_t)buf, sizeof(buf), mr->lkey};
  struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &wr, &bad)) return 2;
  double before = cpu_seconds();
  sleep(seconds);
  printf("%.3f\n", 100.0 * (cpu_seconds() - before) / seconds);
  return 0;
}
