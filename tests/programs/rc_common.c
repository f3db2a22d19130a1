#include "rc_common.h"

#include <netdb.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

int tcp_connect(const char* server_name, int tcp_port) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res, *it;
  char port[16];
  int fd = -1;
  snprintf(port, sizeof(port), "%d", tcp_port);
  if (server_name) {
    if (getaddrinfo(server_name, port, &hints, &res)) return -1;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      for (it = res; it; it = it->ai_next) {
        fd = socket(it->ai_family, it->ai_socktype, 0);
        if (fd >= 0 && connect(fd, it->ai_addr, it->ai_addrlen) == 0) break;
        if (fd >= 0) close(fd);
        fd = -1;
      }
      if (fd < 0) usleep(50000); /* the server may not listen yet */
    }
    freeaddrinfo(res);
    return fd;
  }
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(NULL, port, &hints, &res)) return -1;
  int lfd = socket(res->ai_family, res->ai_socktype, 0), one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 1)) {
    perror("bind/listen");
    freeaddrinfo(res);
    return -1;
  }
  freeaddrinfo(res);
  fd = accept(lfd, NULL, NULL);
  close(lfd);
  return fd;
}

int exchange(int fd, const void* out, void* in, size_t n) {
  if (write(fd, out, n) != (ssize_t)n) return -1;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char*)in + got, n - got);
    if (r <= 0) return -1;
    got += r;
  }
  return 0;
}
