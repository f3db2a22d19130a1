/*
 * The preload shim's umad files (umad.c), called from preload.c's wrappers
 * for fds it tracks as umad files.
 */
#ifndef IBEMU_SHIM_UMAD_H
#define IBEMU_SHIM_UMAD_H

#include <sys/types.h>

#define SHIM_UMAD_FD_SLOTS 65536 /* the fds the shim tracks: preload.c's FD_SLOTS */

/* Opens /dev/infiniband/umad<index>: the fd, or -1 with errno. */
int shim_umad_open(unsigned index, int flags);
/* Opens /dev/infiniband/issm<index>: holds the port's IsSM bit while open.
 * Waits while another program holds it (EAGAIN with O_NONBLOCK). */
int shim_issm_open(unsigned index, int flags);
/* newfd is a duplicate of the umad file oldfd. */
void shim_umad_inherit(int oldfd, int newfd);
int shim_umad_ioctl(int fd, unsigned long request, void* arg);
ssize_t shim_umad_read(int fd, void* buf, size_t count);
ssize_t shim_umad_write(int fd, const void* buf, size_t count);

/* preload.c: the daemon's socket for umad<index> in the fake tree. */
int shim_umad_socket_path(unsigned index, char* buf /* PATH_MAX */);

#endif /* IBEMU_SHIM_UMAD_H */
