/* An IPv4 address and port from the command line, for the test programs
 * that name their peer by address; exits 2 on one that is not an address. */
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline struct sockaddr_in ipv4_address(const char* ip, int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
    fprintf(stderr, "not an IPv4 address: %s\n", ip);
    exit(2);
  }
  return a;
}
