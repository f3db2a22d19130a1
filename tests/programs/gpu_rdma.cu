/*
 * GPU memory as RDMA memory on ibemu: two processes, A on ibemu0 and B on
 * ibemu1, joined by an RC QP. Each has a GPU buffer and a host buffer
 * registered with ibv_reg_mr (and a GPU buffer through ibv_reg_dmabuf_mr);
 * A drives, B serves commands over a socket. For every size from 1 byte to
 * 64 MiB: RDMA WRITE host -> GPU, GPU -> host and GPU -> GPU, RDMA READ
 * from GPU memory, SEND into a GPU receive buffer; every GPU buffer is
 * filled and checked by kernels on the GPU. Then a bad rkey on a GPU region
 * must fail with IBV_WC_REM_ACCESS_ERR, and so must a WRITE into GPU memory
 * freed while its region is still registered; regions deregister both
 * while their memory is allocated and after it was freed. Prints one line per step and exits 0
 * when everything held.
 *
 *   gpu_rdma [-m MAX_BYTES] [-d DEVICE_ORDINAL] [-w SECONDS]
 *
 * -w waits that long once the regions are registered, before the transfers
 * (time to look at `ibemu status`).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "rc_common.h"
}

static const char* role = "gpu_rdma";

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: FAILURE: ", role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

#define CUDA_OK(call)                                                     \
  do {                                                                    \
    cudaError_t e_ = (call);                                              \
    if (e_ != cudaSuccess) fail("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

/* ---- the data: byte i of message `seed` ---- */

__host__ __device__ static inline uint8_t pattern_byte(uint64_t i, uint32_t seed) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed << 32 | seed);
  x ^= x >> 29;
  return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

__global__ void fill_kernel(uint8_t* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    p[i] = pattern_byte(i, seed);
}

__global__ void check_kernel(const uint8_t* p, uint64_t n, uint32_t seed, unsigned long long* bad) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    if (p[i] != pattern_byte(i, seed)) atomicAdd(bad, 1ull);
}

static void gpu_fill(uint8_t* p, uint64_t n, uint32_t seed) {
  fill_kernel<<<256, 256>>>(p, n, seed);
  CUDA_OK(cudaDeviceSynchronize());
}

/* How many bytes of the GPU buffer differ from message `seed`. */
static unsigned long long gpu_mismatches(const uint8_t* p, uint64_t n, uint32_t seed) {
  unsigned long long* bad;
  CUDA_OK(cudaMalloc(&bad, sizeof(*bad)));
  CUDA_OK(cudaMemset(bad, 0, sizeof(*bad)));
  check_kernel<<<256, 256>>>(p, n, seed, bad);
  unsigned long long count = 0;
  CUDA_OK(cudaMemcpy(&count, bad, sizeof(count), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(bad));
  return count;
}

static void host_fill(uint8_t* p, uint64_t n, uint32_t seed) {
  for (uint64_t i = 0; i < n; ++i) p[i] = pattern_byte(i, seed);
}

static uint64_t host_mismatches(const uint8_t* p, uint64_t n, uint32_t seed) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += p[i] != pattern_byte(i, seed);
  return bad;
}

/* ---- one side: device, QP, regions ---- */

enum { kGpu, kHost, kDmabuf, kRegions };

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  uint8_t* buf[kRegions];
  struct ibv_mr* mr[kRegions];
  uint16_t lid;
};

struct endpoint_info {
  uint16_t lid;
  uint32_t qpn;
  uint64_t addr[kRegions];
  uint32_t rkey[kRegions];
  int has_dmabuf;
};

static const int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

static void open_side(struct side* s, const char* devname, uint64_t size, int* has_dmabuf) {
  int n;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !s->ctx; ++i)
    if (!strcmp(ibv_get_device_name(list[i]), devname)) s->ctx = ibv_open_device(list[i]);
  if (!s->ctx) fail("no device %s", devname);
  ibv_free_device_list(list);
  struct ibv_port_attr pa;
  if (ibv_query_port(s->ctx, 1, &pa)) fail("ibv_query_port");
  s->lid = pa.lid;
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = s->pd ? ibv_create_cq(s->ctx, 64, NULL, NULL, 0) : NULL;
  if (!s->cq) fail("PD/CQ: %s", strerror(errno));
  CUDA_OK(cudaMalloc(&s->buf[kGpu], size));
  CUDA_OK(cudaMallocHost(&s->buf[kHost], size));
  s->mr[kGpu] = ibv_reg_mr(s->pd, s->buf[kGpu], size, kAccess);
  s->mr[kHost] = ibv_reg_mr(s->pd, s->buf[kHost], size, kAccess);
  if (!s->mr[kGpu] || !s->mr[kHost]) fail("ibv_reg_mr: %s", strerror(errno));
  /* A dma-buf of GPU memory, as NCCL registers it: iova = its GPU address. */
  const size_t dsize = 2u << 20;
  CUDA_OK(cudaMalloc(&s->buf[kDmabuf], dsize));
  int fd = -1;
  CUresult r = cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)s->buf[kDmabuf], dsize,
                                             CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  *has_dmabuf = r == CUDA_SUCCESS;
  if (*has_dmabuf) {
    s->mr[kDmabuf] =
        ibv_reg_dmabuf_mr(s->pd, 0, dsize, (uint64_t)(uintptr_t)s->buf[kDmabuf], fd, kAccess);
    if (!s->mr[kDmabuf]) fail("ibv_reg_dmabuf_mr: %s", strerror(errno));
  }
  struct ibv_qp_init_attr qa = {};
  qa.send_cq = qa.recv_cq = s->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  s->qp = ibv_create_qp(s->pd, &qa);
  if (!s->qp) fail("ibv_create_qp: %s", strerror(errno));
}

static void connect_side(struct side* s, const struct endpoint_info* peer) {
  if (int err = connect_rc_qp(s->qp, peer->qpn, peer->lid, IBV_MTU_4096, 14, 7, kAccess))
    fail("connecting the QP: %s", strerror(err));
}

static struct endpoint_info describe(const struct side* s, int has_dmabuf) {
  struct endpoint_info e = {};
  e.lid = s->lid;
  e.qpn = s->qp->qp_num;
  for (int r = 0; r < kRegions; ++r)
    if (s->mr[r]) {
      e.addr[r] = (uint64_t)(uintptr_t)s->buf[r];
      e.rkey[r] = s->mr[r]->rkey;
    }
  e.has_dmabuf = has_dmabuf;
  return e;
}

static struct ibv_wc wait_wc(struct side* s) {
  struct ibv_wc wc;
  for (long spins = 0;; ++spins) {
    int n = ibv_poll_cq(s->cq, 1, &wc);
    if (n < 0) fail("ibv_poll_cq");
    if (n == 1) return wc;
    if (spins > 2000000000L) fail("no completion");
  }
}

static void post(struct side* s, enum ibv_wr_opcode op, int region, uint64_t n, uint64_t raddr,
                 uint32_t rkey) {
  struct ibv_sge sge = {(uint64_t)(uintptr_t)s->buf[region], (uint32_t)n, s->mr[region]->lkey};
  struct ibv_send_wr wr = {}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (ibv_post_send(s->qp, &wr, &bad)) fail("ibv_post_send: %s", strerror(errno));
}

/* ---- B: the passive side, serving A's commands ---- */

enum cmd { kFill, kCheck, kPostRecv, kWaitRecv, kReconnect, kFreeGpu, kDeregGpu, kQuit };
struct request {
  int cmd, region;
  uint64_t n;
  uint32_t seed;
};

static void io(int fd, void* p, size_t n, int write_it) {
  for (size_t done = 0; done < n;) {
    ssize_t r =
        write_it ? write(fd, (char*)p + done, n - done) : read(fd, (char*)p + done, n - done);
    if (r <= 0) fail("socket: %s", r ? strerror(errno) : "closed");
    done += (size_t)r;
  }
}

static void fill(struct side* s, int region, uint64_t n, uint32_t seed) {
  if (region == kHost)
    host_fill(s->buf[kHost], n, seed);
  else
    gpu_fill(s->buf[region], n, seed);
}

static uint64_t mismatches(struct side* s, int region, uint64_t n, uint32_t seed) {
  return region == kHost ? host_mismatches(s->buf[kHost], n, seed)
                         : gpu_mismatches(s->buf[region], n, seed);
}

/* Back to RTS after an error: RESET, then connected again. */
static void reconnect(struct side* s, const struct endpoint_info* peer) {
  struct ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE)) fail("RESET");
  connect_side(s, peer);
}

static int serve(int sock, struct side* b, const struct endpoint_info* peer) {
  for (;;) {
    struct request q;
    io(sock, &q, sizeof(q), 0);
    uint64_t answer = 0;
    switch (q.cmd) {
      case kFill:
        fill(b, q.region, q.n, q.seed);
        break;
      case kCheck:
        answer = mismatches(b, q.region, q.n, q.seed);
        break;
      case kPostRecv: {
        struct ibv_sge sge = {(uint64_t)(uintptr_t)b->buf[q.region], (uint32_t)q.n,
                              b->mr[q.region]->lkey};
        struct ibv_recv_wr wr = {}, *bad;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (ibv_post_recv(b->qp, &wr, &bad)) fail("ibv_post_recv");
        break;
      }
      case kWaitRecv: {
        struct ibv_wc wc = wait_wc(b);
        answer = wc.status == IBV_WC_SUCCESS ? wc.byte_len : ~0ull;
        break;
      }
      case kReconnect:
        reconnect(b, peer);
        break;
      case kFreeGpu:  // the program frees GPU memory its region still names
        CUDA_OK(cudaFree(b->buf[kGpu]));
        break;
      case kDeregGpu:
        answer = (uint64_t)ibv_dereg_mr(b->mr[kGpu]);
        break;
      case kQuit:
        return 0;
    }
    io(sock, &answer, sizeof(answer), 1);
  }
}

static uint64_t ask(int sock, int cmd, int region, uint64_t n, uint32_t seed) {
  struct request q = {cmd, region, n, seed};
  uint64_t answer;
  io(sock, &q, sizeof(q), 1);
  io(sock, &answer, sizeof(answer), 0);
  return answer;
}

/* ---- A: the tests ---- */

static const char* names[kRegions] = {"GPU", "host", "GPU dma-buf"};

static void expect_wc(struct side* a, enum ibv_wc_status want, const char* what) {
  struct ibv_wc wc = wait_wc(a);
  if (wc.status != want)
    fail("%s: completion %s, want %s", what, ibv_wc_status_str(wc.status), ibv_wc_status_str(want));
}

static void run_size(int sock, struct side* a, const struct endpoint_info* b, uint64_t n,
                     uint32_t seed, uint64_t dmabuf_size) {
  char what[128];
  /* RDMA WRITE: host -> GPU, GPU -> host, GPU -> GPU. */
  const int writes[][2] = {{kHost, kGpu}, {kGpu, kHost}, {kGpu, kGpu}, {kGpu, kDmabuf}};
  for (size_t w = 0; w < sizeof(writes) / sizeof(writes[0]); ++w) {
    const int from = writes[w][0], to = writes[w][1];
    if (to == kDmabuf && (!b->has_dmabuf || n > dmabuf_size)) continue;
    snprintf(what, sizeof(what), "RDMA WRITE %s -> %s, %lu bytes", names[from], names[to],
             (unsigned long)n);
    fill(a, from, n, ++seed);
    post(a, IBV_WR_RDMA_WRITE, from, n, b->addr[to], b->rkey[to]);
    expect_wc(a, IBV_WC_SUCCESS, what);
    uint64_t bad = ask(sock, kCheck, to, n, seed);
    if (bad) fail("%s: %lu bytes wrong", what, (unsigned long)bad);
  }
  /* RDMA READ from GPU memory, into GPU and host memory. */
  for (int to = kGpu; to <= kHost; ++to) {
    snprintf(what, sizeof(what), "RDMA READ GPU -> %s, %lu bytes", names[to], (unsigned long)n);
    ask(sock, kFill, kGpu, n, ++seed);
    post(a, IBV_WR_RDMA_READ, to, n, b->addr[kGpu], b->rkey[kGpu]);
    expect_wc(a, IBV_WC_SUCCESS, what);
    uint64_t bad = mismatches(a, to, n, seed);
    if (bad) fail("%s: %lu bytes wrong", what, (unsigned long)bad);
  }
  /* SEND from GPU memory into a GPU receive buffer. */
  snprintf(what, sizeof(what), "SEND GPU -> GPU receive buffer, %lu bytes", (unsigned long)n);
  ask(sock, kPostRecv, kGpu, n, 0);
  fill(a, kGpu, n, ++seed);
  post(a, IBV_WR_SEND, kGpu, n, 0, 0);
  expect_wc(a, IBV_WC_SUCCESS, what);
  if (ask(sock, kWaitRecv, kGpu, 0, 0) != n) fail("%s: receive failed or wrong length", what);
  uint64_t bad = ask(sock, kCheck, kGpu, n, seed);
  if (bad) fail("%s: %lu bytes wrong", what, (unsigned long)bad);
  printf("%lu bytes: WRITE host->GPU, GPU->host, GPU->GPU%s; READ from GPU; SEND into GPU: ok\n",
         (unsigned long)n, b->has_dmabuf && n <= dmabuf_size ? ", GPU->dma-buf" : "");
}

int main(int argc, char** argv) {
  uint64_t max = 64ull << 20;
  int ordinal = 0, wait_s = 0, c;
  while ((c = getopt(argc, argv, "m:d:w:")) != -1) {
    if (c == 'm')
      max = strtoull(optarg, NULL, 0);
    else if (c == 'd')
      ordinal = atoi(optarg);
    else if (c == 'w')
      wait_s = atoi(optarg);
    else
      return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) fail("socketpair");
  /* Fork before CUDA starts: a CUDA context does not survive fork(). */
  pid_t pid = fork();
  if (pid < 0) fail("fork");
  int me = pid == 0 ? sv[1] : sv[0];
  role = pid == 0 ? "gpu_rdma B" : "gpu_rdma A";
  CUDA_OK(cudaSetDevice(ordinal));
  CUDA_OK(cudaFree(0));
  struct side s = {};
  int has_dmabuf = 0;
  open_side(&s, pid == 0 ? "ibemu1" : "ibemu0", max, &has_dmabuf);
  struct endpoint_info mine = describe(&s, has_dmabuf), peer;
  io(me, &mine, sizeof(mine), 1);
  io(me, &peer, sizeof(peer), 0);
  connect_side(&s, &peer);
  if (pid == 0) return serve(me, &s, &peer);

  printf("GPU %d, dma-buf %s\n", ordinal,
         peer.has_dmabuf ? "registered" : "not offered by this CUDA driver: skipped");
  if (wait_s) sleep(wait_s);
  uint32_t seed = 1;
  for (uint64_t n = 1; n <= max; n = n < 4096 ? n * 64 : n * 16) {
    run_size(me, &s, &peer, n, seed, 2u << 20);
    seed += 16;
  }
  run_size(me, &s, &peer, max, seed, 2u << 20);

  /* A bad rkey on a GPU region: a remote access error, nothing written. */
  ask(me, kFill, kGpu, 4096, 999);
  fill(&s, kHost, 4096, 1000);
  post(&s, IBV_WR_RDMA_WRITE, kHost, 4096, peer.addr[kGpu], peer.rkey[kGpu] ^ 0x80);
  expect_wc(&s, IBV_WC_REM_ACCESS_ERR, "RDMA WRITE with a bad rkey");
  if (ask(me, kCheck, kGpu, 4096, 999)) fail("a refused WRITE changed GPU memory");
  printf("bad rkey on a GPU region: IBV_WC_REM_ACCESS_ERR, GPU memory untouched: ok\n");

  /* GPU memory freed under a registered region: refused, no crash. */
  reconnect(&s, &peer);
  ask(me, kReconnect, 0, 0, 0);
  ask(me, kFreeGpu, 0, 0, 0);
  post(&s, IBV_WR_RDMA_WRITE, kHost, 4096, peer.addr[kGpu], peer.rkey[kGpu]);
  expect_wc(&s, IBV_WC_REM_ACCESS_ERR, "RDMA WRITE into freed GPU memory");
  if (ask(me, kDeregGpu, 0, 0, 0)) fail("ibv_dereg_mr of a region whose GPU memory was freed");
  if (ibv_dereg_mr(s.mr[kGpu])) fail("ibv_dereg_mr of a GPU region: %s", strerror(errno));
  printf(
      "WRITE into freed GPU memory: IBV_WC_REM_ACCESS_ERR; deregistration before and after "
      "cudaFree: ok\n");

  struct request quit = {kQuit, 0, 0, 0};
  io(me, &quit, sizeof(quit), 1);
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) fail("B failed");
  printf("gpu_rdma: all passed\n");
  return 0;
}
