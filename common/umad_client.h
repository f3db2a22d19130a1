/*
 * Connecting to a umad socket of ibemud and the request/reply exchange of
 * common/umad_protocol.h (C: the preload shim uses it too).
 */
#ifndef IBEMU_UMAD_CLIENT_H
#define IBEMU_UMAD_CLIENT_H

#include "umad_protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A connection to the daemon's umad socket at `path` (which may be longer
 * than a sockaddr_un holds): the fd, or -1 with errno (ENODEV when no daemon
 * listens there). */
int ibemu_umad_connect(const char* path, int nonblock);
/* Sends one request and waits for its reply: 0, or -1 with errno. */
int ibemu_umad_round_trip(int fd, const struct ibemu_umad_request* req,
                          struct ibemu_umad_reply* reply);

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_UMAD_CLIENT_H */
