/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
#ifndef IBEMU_CTL_VALIDATE_H
#define IBEMU_CTL_VALIDATE_H

#ifdef __KERNEL__
#include <linux/errno.h>
#else
#include <errno.h>
#endif
#include "ibemu_abi.h"

/* enum ib_port_state's range, which user space has no header for. */
#define IBEMU_PORT_DOWN 1
#define IBEMU_PORT_ACTIVE_DEFER 5

#ifdef __cplusplus
extern "C" {
#endif

/* 0 if `msg` (the `len` bytes of one write()) is a well-formed message the
 * daemon may send; -EINVAL otherwise. It does not know which devices exist. */
int ibemu_ctl_validate(const void *msg, unsigned long len);

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_CTL_VALIDATE_H */
