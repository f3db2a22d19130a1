/*
 * An MPI program of the kind users run on ibemu, every result checked:
 *   mpirun -np N mpi_check
 * 1. ping-pong between ranks 0 and 1, 1 byte to 1 MiB, each reply the
 *    message it answers, bit for bit;
 * 2. a 4 MiB message around the ring (each rank to the next), its pattern
 *    naming the sender;
 * 3. MPI_Allreduce of 1 Mi integers (4 MiB) and of one double;
 * 4. MPI_Bcast of 4 MiB from the last rank, and a barrier.
 * Rank 0 prints "ok ..." per step; any wrong byte aborts the job with exit
 * status 1 after printing what differed.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRingBytes = 4 << 20, kReduceCount = 1 << 20, kPingIterations = 20 };

static int rank, size;

static void fail(const char* what, size_t at, unsigned got, unsigned want) {
  fprintf(stderr, "rank %d: %s: byte %zu is 0x%02x, not 0x%02x\n", rank, what, at, got, want);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void say(const char* what) {
  if (rank == 0) printf("ok %s\n", what);
  fflush(stdout);
}

static uint8_t pattern(int sender, size_t i) { return (uint8_t)(i * 7 + (size_t)sender * 31 + 1); }

static void fill(uint8_t* buf, size_t len, int sender) {
  for (size_t i = 0; i < len; i++) buf[i] = pattern(sender, i);
}

static void expect(const uint8_t* buf, size_t len, int sender, const char* what) {
  for (size_t i = 0; i < len; i++)
    if (buf[i] != pattern(sender, i)) fail(what, i, buf[i], pattern(sender, i));
}

static void ping_pong(void) {
  if (size < 2) return;
  uint8_t* buf = malloc(1 << 20);
  for (size_t len = 1; len <= (1 << 20); len *= 4) {
    for (int i = 0; i < kPingIterations; i++) {
      if (rank == 0) {
        fill(buf, len, i);
        MPI_Send(buf, (int)len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        memset(buf, 0, len);
        MPI_Recv(buf, (int)len, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        expect(buf, len, i, "ping-pong reply");
      } else if (rank == 1) {
        MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        expect(buf, len, i, "ping-pong message");
        MPI_Send(buf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
      }
    }
  }
  free(buf);
  say("ping-pong 1 B to 1 MiB between ranks 0 and 1");
}

static void ring(void) {
  uint8_t* out = malloc(kRingBytes);
  uint8_t* in = calloc(1, kRingBytes);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  fill(out, kRingBytes, rank);
  MPI_Sendrecv(out, kRingBytes, MPI_BYTE, next, 3, in, kRingBytes, MPI_BYTE, prev, 3,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  expect(in, kRingBytes, prev, "4 MiB ring message");
  free(out);
  free(in);
  say("4 MiB message from each rank to the next");
}

static void allreduce(void) {
  int* values = malloc(sizeof(int) * kReduceCount);
  int* sums = malloc(sizeof(int) * kReduceCount);
  for (int i = 0; i < kReduceCount; i++) values[i] = i + rank;
  MPI_Allreduce(values, sums, kReduceCount, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const int rank_sum = size * (size - 1) / 2;
  for (int i = 0; i < kReduceCount; i++)
    if (sums[i] != size * i + rank_sum) {
      fprintf(stderr, "rank %d: allreduce element %d is %d, not %d\n", rank, i, sums[i],
              size * i + rank_sum);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  double mine = rank + 0.5, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (total != size * (size - 1) / 2.0 + size * 0.5) {
    fprintf(stderr, "rank %d: allreduce of doubles is %g\n", rank, total);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  free(values);
  free(sums);
  say("allreduce of 1 Mi integers and of one double");
}

static void broadcast(void) {
  uint8_t* buf = calloc(1, kRingBytes);
  if (rank == size - 1) fill(buf, kRingBytes, rank);
  MPI_Bcast(buf, kRingBytes, MPI_BYTE, size - 1, MPI_COMM_WORLD);
  expect(buf, kRingBytes, size - 1, "4 MiB broadcast");
  free(buf);
  MPI_Barrier(MPI_COMM_WORLD);
  say("4 MiB broadcast from the last rank, barrier");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ping_pong();
  ring();
  allreduce();
  broadcast();
  if (rank == 0) printf("all checks passed on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
