/*
 * Helpers shared by ibemu's test programs: the TCP side channel on which two
 * processes exchange what they need to connect their QPs, as every verbs
 * example does.
 */
#ifndef IBEMU_TEST_RC_COMMON_H
#define IBEMU_TEST_RC_COMMON_H

#include <stddef.h>

/* With a server name: connects (retrying while the server starts).
 * Without: listens on tcp_port and accepts one connection. -1 on error. */
int tcp_connect(const char* server_name, int tcp_port);
/* Sends n bytes and receives n bytes from the peer. 0 or -1. */
int exchange(int fd, const void* out, void* in, size_t n);

#endif
