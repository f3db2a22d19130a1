/*
 * udp_bw: raw UDP throughput between two addresses, the limit the fabric's
 * inter-host bandwidth is compared with in `make bench`.
 *
 *   udp_bw recv BIND_ADDR PORT          prints "<MB/s> <datagrams>" once the
 *                                       sender has been quiet for 0.5 s
 *   udp_bw send ADDR PORT SECONDS SIZE  sends SIZE-byte datagrams for SECONDS
 */
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int udp_socket(const char* addr, int port, struct sockaddr_in* sa) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int big = 8 << 20;
  /* The same socket buffers as ibemud's fabric link. */
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big))
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big))
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons(port);
  if (fd < 0 || inet_pton(AF_INET, addr, &sa->sin_addr) != 1) {
    fprintf(stderr, "udp_bw: bad address %s\n", addr);
    exit(2);
  }
  return fd;
}

int main(int argc, char** argv) {
  static char buf[65536];
  struct sockaddr_in sa;
  if (argc == 4 && !strcmp(argv[1], "recv")) {
    int fd = udp_socket(argv[2], atoi(argv[3]), &sa);
    if (bind(fd, (struct sockaddr*)&sa, sizeof sa)) {
      perror("udp_bw: bind");
      return 1;
    }
    double first = 0, last = 0;
    unsigned long long bytes = 0, count = 0;
    for (;;) {
      struct pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, count ? 500 : 30000) <= 0) break;
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) continue;
      last = now();
      if (!count++)
        first = last;
      else
        bytes += (unsigned long long)n; /* the first datagram starts the clock */
    }
    printf("%.1f %llu\n", last > first ? bytes / (last - first) / 1e6 : 0.0, count);
    return 0;
  }
  if (argc == 6 && !strcmp(argv[1], "send")) {
    int fd = udp_socket(argv[2], atoi(argv[3]), &sa);
    const double end = now() + atof(argv[4]);
    const size_t size = (size_t)atoi(argv[5]);
    if (size < 1 || size > sizeof buf) return 2;
    while (now() < end)
      for (int i = 0; i < 64; ++i) sendto(fd, buf, size, 0, (struct sockaddr*)&sa, sizeof sa);
    return 0;
  }
  fprintf(stderr, "usage: udp_bw recv BIND_ADDR PORT | udp_bw send ADDR PORT SECONDS SIZE\n");
  return 2;
}
