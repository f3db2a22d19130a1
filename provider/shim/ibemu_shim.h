/*
 * Public face of libibemu-preload.so, the no-kernel-mode preload shim.
 *
 * The shim is loaded with LD_PRELOAD into every process of an emulated
 * environment. When IBEMU_SYSFS names the fake sysfs tree written by ibemud it
 *   - redirects /sys/class/infiniband{,_verbs,_mad}[/...] and
 *     /sys/devices/virtual/ibemu[/...] (where the class entries' links
 *     point) into that tree,
 *   - lists /dev/infiniband from $IBEMU_SYSFS/dev/infiniband and makes
 *     /dev/infiniband/uverbsN (for every uverbsN of the fake tree) look like a
 *     character device backed by /dev/null,
 *   - answers IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL written to such a fd with
 *     the read end of a pipe (every other command fails with ENOSYS),
 *   - answers NETLINK_RDMA (shim_netlink.h) for the devices of the fake tree,
 *     as the kernel's nldev does: libibverbs' device discovery, `rdma dev`
 *     and `rdma link` see them.
 * Without IBEMU_SYSFS it forwards every call untouched.
 *
 * A completion channel fd handed out by the shim is the read end of a pipe.
 * The provider posts a completion event (8 bytes, struct
 * ib_uverbs_comp_event_desc) by writing to a writer it opens itself with
 * open("/proc/self/fd/<channel fd>", O_WRONLY | O_NONBLOCK | O_CLOEXEC). The
 * shim keeps its own write end open until the application closes the
 * channel, so a reader blocks (and poll() reports nothing) while no event is
 * pending, as with the kernel's channel, instead of seeing end-of-file.
 */
#ifndef IBEMU_SHIM_H
#define IBEMU_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Returns 1. Exists so that the provider can find out with
 * dlsym(RTLD_DEFAULT, "ibemu_shim_active") whether the shim is loaded.
 */
int ibemu_shim_active(void);

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_SHIM_H */
