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

/* Which side of the data channel reads a record: each checks what it gets. */
enum ibemu_data_direction {
	IBEMU_DATA_TO_DAEMON = 1, /* commands and WQEs, from read() */
	IBEMU_DATA_TO_MODULE = 2, /* CQEs and EVENTs, from IBEMU_IOC_COMPLETE */
};

/* 0 if `rec`, `len` bytes, 8-byte aligned, is exactly one well-formed
 * record that goes `dir`; -EINVAL otherwise. */
int ibemu_data_record_valid(const void *rec, unsigned long len,
			    enum ibemu_data_direction dir);

/* 0 if `buf` (8-byte aligned) is one or more whole well-formed records
 * that go `dir` and fill exactly `len` bytes; -EINVAL otherwise. */
int ibemu_data_batch_valid(const void *buf, unsigned long len,
			   enum ibemu_data_direction dir);

/* The ioctls' arguments and segments: 0 or -EINVAL. */
int ibemu_data_complete_valid(const struct ibemu_data_complete *arg);
int ibemu_data_copy_valid(const struct ibemu_data_copy *arg);
int ibemu_data_copy_segment_valid(const struct ibemu_data_copy_segment *seg);

/* The length of a WQE record that carries `num_sge` SGEs or `inline_len`
 * inline bytes (the builders' and the checks' one formula). */
unsigned int ibemu_data_send_wqe_length(unsigned int num_sge,
					unsigned int inline_len);
unsigned int ibemu_data_recv_wqe_length(unsigned int num_sge);

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_CTL_VALIDATE_H */
