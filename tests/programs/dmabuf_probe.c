/*
 * ibv_reg_dmabuf_mr on a CPU buffer (docs/gpu.md): a memfd stands for a
 * dma-buf exported by a CPU driver. The region on ibemu1 is written by RDMA
 * WRITE from ibemu0 and the bytes are read back through the fd's own
 * mapping; a closed fd is refused with EBADF. Exits 0 when all held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rc_common.h"

static int failed(const char* what) {
  fprintf(stderr, "dmabuf_probe: FAILURE: %s (%s)\n", what, strerror(errno));
  return 1;
}

int main(void) {
  enum { kSize = 3 * 4096 + 100, kOffset = 4096 };
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  struct rc_end a, b;
  if (open_rc_end("ibemu0", 4, &a) || open_rc_end("ibemu1", 4, &b)) return failed("devices");
  if (connect_rc_qp(a.qp, b.qp->qp_num, b.lid, IBV_MTU_1024, 14, 7, access) ||
      connect_rc_qp(b.qp, a.qp->qp_num, a.lid, IBV_MTU_1024, 14, 7, access))
    return failed("connecting");
  int fd = memfd_create("dmabuf_probe", 0);
  if (fd < 0 || ftruncate(fd, kOffset + kSize)) return failed("memfd");
  uint8_t* view = mmap(NULL, kOffset + kSize, PROT_READ, MAP_SHARED, fd, 0);
  if (view == MAP_FAILED) return failed("mmap");
  const uint64_t iova = 0x100000;  // the address the peer uses
  struct ibv_mr* dst = ibv_reg_dmabuf_mr(b.pd, kOffset, kSize, iova, fd, access);
  if (!dst) return failed("ibv_reg_dmabuf_mr");
  uint8_t* src = malloc(kSize);
  for (int i = 0; i < kSize; ++i) src[i] = (uint8_t)(i * 7 + 3);
  struct ibv_mr* smr = ibv_reg_mr(a.pd, src, kSize, access);
  struct ibv_sge sge = {(uintptr_t)src, kSize, smr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED,
                           .wr.rdma = {.remote_addr = iova, .rkey = dst->rkey}};
  struct ibv_send_wr* bad;
  if (ibv_post_send(a.qp, &wr, &bad)) return failed("ibv_post_send");
  struct ibv_wc wc;
  int n;
  while ((n = ibv_poll_cq(a.cq, 1, &wc)) == 0) {
  }
  if (n < 0 || wc.status != IBV_WC_SUCCESS) {
    fprintf(stderr, "dmabuf_probe: FAILURE: WRITE completed %s\n", ibv_wc_status_str(wc.status));
    return 1;
  }
  if (memcmp(view + kOffset, src, kSize)) return failed("the dma-buf does not hold the WRITE");
  printf("RDMA WRITE into a CPU dma-buf at offset %d: ok\n", kOffset);
  if (ibv_dereg_mr(dst)) return failed("ibv_dereg_mr");
  close(fd);
  errno = 0;
  if (ibv_reg_dmabuf_mr(b.pd, 0, 4096, iova, fd, access) || errno != EBADF)
    return failed("a closed fd must be EBADF");
  printf("a closed fd: EBADF: ok\n");
  return 0;
}
