/*
 * RDMA WRITE into GPU memory against its limit: one process, a QP on ibemu0
 * writing from host memory into a GPU buffer registered on ibemu1, at each
 * size given, beside cudaMemcpy HtoD from the same host buffer into the same
 * GPU buffer, measured in the same run. Prints one line per size:
 *
 *   gpu_write  SIZE  RDMA_MBps  HTOD_MBps  RATIO
 *
 *   gpu_write_bw [SIZE...]        (default 65536 16777216)
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "rc_common.h"
}

static void fail(const char* what) {
  fprintf(stderr, "gpu_write_bw: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_s() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  size_t sizes[8] = {65536, 16u << 20};
  int count = 2;
  if (argc > 1) {
    count = 0;
    for (int i = 1; i < argc && count < 8; ++i) sizes[count++] = strtoull(argv[i], NULL, 0);
  }
  size_t max = 0;
  for (int i = 0; i < count; ++i) max = sizes[i] > max ? sizes[i] : max;
  if (cudaFree(0) != cudaSuccess) {
    fprintf(stderr, "gpu_write_bw: no CUDA device\n");
    return 1;
  }
  struct rc_end a, b;
  if (open_rc_end("ibemu0", 128, &a) || open_rc_end("ibemu1", 128, &b)) fail("devices");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (connect_rc_qp(a.qp, b.qp->qp_num, b.lid, IBV_MTU_4096, 14, 7, access) ||
      connect_rc_qp(b.qp, a.qp->qp_num, a.lid, IBV_MTU_4096, 14, 7, access))
    fail("connecting");
  uint8_t* host = (uint8_t*)malloc(max);
  void* gpu;
  if (!host || cudaMalloc(&gpu, max) != cudaSuccess) fail("buffers");
  memset(host, 0x5a, max);
  struct ibv_mr* src = ibv_reg_mr(a.pd, host, max, access);
  struct ibv_mr* dst = ibv_reg_mr(b.pd, gpu, max, access);
  if (!src || !dst) fail("ibv_reg_mr");
  for (int k = 0; k < count; ++k) {
    const size_t n = sizes[k];
    const int iters = n >= (1u << 20) ? 50 : 2000;
    // The limit: the same bytes moved by the CUDA runtime.
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) cudaMemcpy(gpu, host, n, cudaMemcpyHostToDevice);
    const double htod = n * (double)iters / (now_s() - t0) / 1e6;
    // RDMA WRITE, up to 32 in flight.
    struct ibv_sge sge = {(uint64_t)(uintptr_t)host, (uint32_t)n, src->lkey};
    struct ibv_send_wr wr = {}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)gpu;
    wr.wr.rdma.rkey = dst->rkey;
    int posted = 0, done = 0;
    t0 = now_s();
    while (done < iters) {
      while (posted < iters && posted - done < 32) {
        if (ibv_post_send(a.qp, &wr, &bad)) fail("ibv_post_send");
        ++posted;
      }
      struct ibv_wc wc[32];
      int got = ibv_poll_cq(a.cq, 32, wc);
      for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS) {
          fprintf(stderr, "gpu_write_bw: %s\n", ibv_wc_status_str(wc[i].status));
          return 1;
        }
      done += got;
    }
    const double rdma = n * (double)iters / (now_s() - t0) / 1e6;
    printf("gpu_write %10zu %10.1f %10.1f %7.3f\n", n, rdma, htod, rdma / htod);
  }
  return 0;
}
