/*
 * The preload shim's NETLINK_RDMA: what a kernel with ib_core answers about
 * ibemu's HCAs, so that `rdma dev`, `rdma link` (iproute2) and libibverbs'
 * own netlink device discovery work on a machine whose kernel has no RDMA.
 *
 * An emulated netlink socket is an AF_UNIX datagram socket bound to an
 * abstract name of its own (netlink_socket.c). A request the program sends
 * is answered at once (rdma_netlink.c, from the fake sysfs tree) by datagrams
 * the socket sends to itself, so recv(), poll() and epoll see replies exactly
 * where a netlink socket would have them.
 */
#ifndef IBEMU_SHIM_NETLINK_H
#define IBEMU_SHIM_NETLINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rdma_netlink.c: the replies ---- */

/* Called for every reply datagram; returns 0 or -errno. */
typedef int (*shim_nl_emit_fn)(void* ctx, const void* datagram, size_t len);

/*
 * Answers the netlink messages in req[0, len) as the kernel's RDMA_NL_NLDEV
 * client would, for the devices of the fake sysfs tree at `root`: device and
 * port queries (one or all), the uverbs char device and the system
 * settings; every other command gets an error reply (EOPNOTSUPP). `portid`
 * is the requesting socket's, echoed in every reply. Returns 0, or emit's
 * failure.
 */
int shim_rdma_nl_answer(const char* root, uint32_t portid, const void* req, size_t len,
                        shim_nl_emit_fn emit, void* ctx);

/* ---- netlink_socket.c: the socket ---- */

/* A new emulated NETLINK_RDMA socket (type: SOCK_RAW or SOCK_DGRAM, with
 * SOCK_CLOEXEC/SOCK_NONBLOCK as the caller asked): its fd or -1 with errno. */
int shim_nl_socket(int type);
/* Whether fd still is the emulated socket the shim handed out (a program
 * may close it behind the shim's back). */
int shim_nl_is_ours(int fd);
/* newfd is a duplicate of the emulated socket oldfd. */
void shim_nl_inherit(int oldfd, int newfd);
int shim_nl_bind(int fd, const struct sockaddr* addr, socklen_t len);
int shim_nl_connect(int fd, const struct sockaddr* addr, socklen_t len);
int shim_nl_getsockname(int fd, struct sockaddr* addr, socklen_t* len);
int shim_nl_getpeername(int fd, struct sockaddr* addr, socklen_t* len);
int shim_nl_setsockopt(int fd, int level, int name, const void* value, socklen_t len);
int shim_nl_getsockopt(int fd, int level, int name, void* value, socklen_t* len);
/* Sends a request (the program's bytes) to the emulated kernel. */
ssize_t shim_nl_sendmsg(const char* root, int fd, const struct msghdr* msg);
/* Receives a reply; the source address is the kernel's (portid 0). */
ssize_t shim_nl_recvmsg(int fd, struct msghdr* msg, int flags);

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_SHIM_NETLINK_H */
