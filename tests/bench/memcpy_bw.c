/*
 * memcpy_bw: the limit the benchmarks compare against — memcpy bandwidth of
 * this machine, same sizes, same run. Prints "SIZE MB_PER_SEC" lines.
 *
 *   memcpy_bw SIZE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    size_t size = strtoull(argv[i], NULL, 0);
    /* Rotate over buffers larger than the caches for large sizes, as a
     * stream of RDMA messages into a big region would. */
    size_t span = size < (64u << 20) / 16 ? 16 * size : size;
    if (span < (32u << 20)) span = 32u << 20;
    char *src = malloc(span), *dst = malloc(span);
    memset(src, 1, span);
    memset(dst, 2, span);
    size_t slots = span / size, total = 0;
    double start = now(), elapsed;
    do {
      for (size_t k = 0; k < 64; ++k) {
        size_t off = ((total / size) % slots) * size;
        memcpy(dst + off, src + off, size);
        total += size;
      }
      elapsed = now() - start;
    } while (elapsed < 0.3);
    printf("%zu %.1f\n", size, total / elapsed / 1e6);
    free(src);
    free(dst);
  }
  return 0;
}
