/*
 * shm_pingpong: the limit for latency beside busy CPUs — two processes that
 * take turns through a word of shared memory, each spinning on it as
 * perftest's latency tests spin, and each busy for WORK_NS before it
 * answers (as long as a message's own handling, so that a run lasts long
 * enough for the scheduler to take turns). No RDMA and no emulator: what is
 * left of its tail is the scheduler keeping a spinning process off its CPU.
 * Prints "TYPICAL_US P99_US" of the one-way latency (half a round trip,
 * as perftest reports).
 *
 *   shm_pingpong ITERATIONS WORK_NS
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void busy(uint64_t ns) {
  for (const uint64_t start = now_ns(); now_ns() - start < ns;) {
  }
}

static int by_value(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: shm_pingpong ITERATIONS WORK_NS\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  const uint64_t work = strtoull(argv[2], NULL, 0);
  if (n < 100) return 2;
  /* The two words on different cache lines: ping and pong. */
  atomic_int* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t* rtt = malloc(sizeof(uint64_t) * (size_t)n);
  if (shared == MAP_FAILED || !rtt) return 1;
  atomic_int* ping = &shared[0];
  atomic_int* pong = &shared[16];
  const pid_t peer = fork();
  if (peer == 0) {
    for (int i = 1; i <= n; ++i) {
      while (atomic_load(ping) != i) {
      }
      busy(work);
      atomic_store(pong, i);
    }
    return 0;
  }
  for (int i = 1; i <= n; ++i) {
    busy(work);
    const uint64_t sent = now_ns();
    atomic_store(ping, i);
    while (atomic_load(pong) != i) {
    }
    rtt[i - 1] = now_ns() - sent;
  }
  waitpid(peer, NULL, 0);
  qsort(rtt, (size_t)n, sizeof(uint64_t), by_value);
  printf("%.2f %.2f\n", rtt[n / 2] / 2e3, rtt[(size_t)n * 99 / 100] / 2e3);
  return 0;
}
