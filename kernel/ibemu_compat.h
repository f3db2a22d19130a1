/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Everything in ibemu.ko that depends on the kernel version, in one place.
 * Supported: 6.1 (Debian 12) to 6.12 (Debian 12's newer kernel, Debian 13).
 */
#ifndef IBEMU_COMPAT_H
#define IBEMU_COMPAT_H

#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "ibemu.ko needs Linux 6.1 or newer"
#endif

#define IBEMU_MAD_QP_MAX_SGE 4

/*
 * Since 6.11 create_cq gets the whole uverbs attribute bundle instead of its
 * udata. Either way the argument is NULL for a kernel consumer's CQ.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
#define IBEMU_CREATE_CQ_ARG struct uverbs_attr_bundle *from_user
#else
#define IBEMU_CREATE_CQ_ARG struct ib_udata *from_user
#endif

#endif /* IBEMU_COMPAT_H */
