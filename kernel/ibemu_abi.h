/* SPDX-License-Identifier: (GPL-2.0 OR MIT) */
/*
 * The control device of ibemu.ko (/dev/ibemu): the one ABI between the module
 * and ibemud. Included by the module (kernel C) and by the daemon (C++).
 *
 * The daemon opens /dev/ibemu and writes messages; each write() carries
 * exactly one message and returns its length or a negative errno (EINVAL for
 * anything malformed). read() returns one message the module has for the
 * daemon (MADs the kernel's QP0/QP1 send, SMPs that reach process_mad), and
 * poll() says when one is waiting. Closing the file (the daemon exiting, or
 * dying) turns every port it drove DOWN; the devices stay registered so that
 * open contexts stay valid, and a daemon that comes back adopts them by name.
 *
 * Every message starts with struct ibemu_ctl_hdr; `length` is the whole
 * message. Numbers (GUIDs and the subnet prefix included) are in host byte
 * order; MAD and GRH bytes are as on the wire. A message about a device names
 * it by the daemon's index in the byte right after the header, and its port
 * in the next one.
 */
#ifndef IBEMU_ABI_H
#define IBEMU_ABI_H

#include <linux/types.h>

/* 3: the data channel (IBEMU_IOC_*, struct ibemu_data_*) and the kernel QPN
 * block and FRWR limit of ADD_DEVICE. */
#define IBEMU_CTL_ABI_VERSION 3
#define IBEMU_CTL_DEVICE_NAME "ibemu"
#define IBEMU_CTL_NAME_MAX 64
#define IBEMU_CTL_MAX_PORTS 8
#define IBEMU_CTL_MAX_DEVICES 16
/* Entries of a port's P_Key table (NodeInfo:PartitionCap). */
#define IBEMU_CTL_MAX_PKEYS 16
#define IBEMU_CTL_MAD_SIZE 256
#define IBEMU_CTL_GRH_SIZE 40
/* The largest FRWR page list, which the module allocates per MR. */
#define IBEMU_CTL_MAX_FAST_REG_PAGES 4096
/* The one QPN that is never a QP's: multicast (IBA 10.5.2). */
#define IBEMU_CTL_MULTICAST_QPN 0xffffff
/* The uverbs ABI of the provider (sysfs uverbsN/abi_version). */
#define IBEMU_UVERBS_ABI_VERSION 1

enum ibemu_ctl_type {
	/* daemon -> module */
	IBEMU_CTL_ADD_DEVICE = 1,
	IBEMU_CTL_SET_PORT = 2,
	IBEMU_CTL_MAD_IN = 3,
	IBEMU_CTL_PROCESS_MAD_REPLY = 4,
	/* module -> daemon */
	IBEMU_CTL_MAD_OUT = 16,
	IBEMU_CTL_PROCESS_MAD = 17,
	IBEMU_CTL_PORT_CAP = 18,
};

struct ibemu_ctl_hdr {
	__u16 type;
	__u16 length;
	__u32 seq; /* pairs PROCESS_MAD with its reply; 0 elsewhere */
};

/*
 * Registers (or, after a daemon restart, adopts) device `index` of this
 * control file under `name`. Errors: EINVAL (bad field), EEXIST (the name is
 * driven by another open control file), EBUSY (an existing device of that
 * name has another port count), ENOSPC (too many devices).
 */
struct ibemu_ctl_add_device {
	struct ibemu_ctl_hdr hdr;
	__u32 abi_version;
	__u8 index; /* the daemon's device index, < IBEMU_CTL_MAX_DEVICES */
	__u8 num_ports; /* 1 .. IBEMU_CTL_MAX_PORTS */
	__u16 reserved;
	char name[IBEMU_CTL_NAME_MAX]; /* NUL-terminated, e.g. "ibemu0" */
	char node_desc[IBEMU_CTL_NAME_MAX]; /* NUL-terminated */
	__u64 node_guid;
	__u64 sys_image_guid;
	__u64 fw_ver;
	__u32 vendor_id;
	__u32 vendor_part_id;
	__u32 hw_ver;
	__u32 max_qp;
	__u32 max_qp_wr;
	__u32 max_sge;
	__u32 max_cq;
	__u32 max_cqe;
	__u32 max_mr;
	__u32 max_pd;
	__u32 max_srq;
	__u32 max_srq_wr;
	__u64 max_mr_size;
	/*
	 * The QPNs the module gives kernel QPs (RC, UC, UD): kernel_qpn_first ..
	 * kernel_qpn_first + kernel_qpn_count - 1, which the daemon keeps out of
	 * its own QP numbering. 0xFFFFFF (the multicast QPN) is never in it, nor
	 * are QP0 and QP1; a count of 0 (first 0 too) gives kernel QPs no numbers.
	 */
	__u32 kernel_qpn_first;
	__u32 kernel_qpn_count;
	/* max_fast_reg_page_list_len, 0 .. IBEMU_CTL_MAX_FAST_REG_PAGES; 0: no
	 * fast registration (IB_DEVICE_MEM_MGT_EXTENSIONS unadvertised). */
	__u32 max_fast_reg_pages;
	__u32 reserved2; /* 0 */
};

/* The attributes of one port as its SMA holds them (IBA 14.2.5.6). */
struct ibemu_ctl_set_port {
	struct ibemu_ctl_hdr hdr;
	__u8 index;
	__u8 port; /* 1-based */
	__u8 state; /* enum ib_port_state: 1 DOWN .. 4 ACTIVE */
	__u8 phys_state; /* 2 POLLING, 3 DISABLED, 5 LINK_UP */
	__u16 lid;
	__u16 sm_lid;
	__u8 lmc;
	__u8 sm_sl;
	__u8 max_mtu; /* enum ib_mtu */
	__u8 active_mtu;
	__u8 active_width; /* IB_WIDTH_* */
	__u8 active_speed; /* IB_SPEED_* */
	__u16 reserved;
	__u16 pkeys[IBEMU_CTL_MAX_PKEYS]; /* the P_Key table; 0: an empty entry */
	__u32 port_cap_flags;
	__u64 subnet_prefix;
	__u64 port_guid;
};

/* A MAD for a kernel QP0 (SMPs) or QP1 (GMPs) of a port. */
struct ibemu_ctl_mad_in {
	struct ibemu_ctl_hdr hdr;
	__u8 index;
	__u8 port;
	__u8 qpn; /* 0 or 1 */
	__u8 sl;
	__u32 src_qp;
	__u16 slid;
	__u16 pkey_index;
	__u8 dlid_path_bits;
	__u8 has_grh;
	__u16 reserved;
	__u8 grh[IBEMU_CTL_GRH_SIZE];
	__u8 mad[IBEMU_CTL_MAD_SIZE];
};

/* A MAD a kernel QP0/QP1 sent: the daemon routes it as it routes umad's. */
struct ibemu_ctl_mad_out {
	struct ibemu_ctl_hdr hdr;
	__u8 index;
	__u8 port;
	__u8 qpn; /* 0 or 1 */
	__u8 sl;
	__u32 remote_qpn;
	__u32 remote_qkey;
	__u16 dlid;
	__u16 pkey_index;
	__u8 mad[IBEMU_CTL_MAD_SIZE];
};

/*
 * An SMP for the local port's SMA (process_mad): the daemon answers with
 * PROCESS_MAD_REPLY carrying the same seq, within a second or the module
 * reports the MAD unanswered.
 */
struct ibemu_ctl_process_mad {
	struct ibemu_ctl_hdr hdr;
	__u8 index;
	__u8 port;
	__u16 slid;
	__u32 reserved;
	__u8 mad[IBEMU_CTL_MAD_SIZE];
};

/*
 * Capability bits ib_modify_port sets or clears (an SM opening
 * /dev/infiniband/issmN sets IsSM, closing it clears it). The daemon's SMA
 * owns PortInfo:CapabilityMask and sends the result back with SET_PORT.
 */
struct ibemu_ctl_port_cap {
	struct ibemu_ctl_hdr hdr;
	__u8 index;
	__u8 port;
	__u16 reserved;
	__u32 set_mask; /* IB_PORT_* capability bits */
	__u32 clear_mask;
};

enum ibemu_ctl_mad_result {
	IBEMU_CTL_MAD_IGNORED = 0, /* not the SMA's: pass it on */
	IBEMU_CTL_MAD_CONSUMED = 1, /* handled, no reply */
	IBEMU_CTL_MAD_REPLY = 2, /* `mad` holds the response */
};

struct ibemu_ctl_process_mad_reply {
	struct ibemu_ctl_hdr hdr;
	__u32 result; /* enum ibemu_ctl_mad_result */
	__u32 reserved;
	__u8 mad[IBEMU_CTL_MAD_SIZE];
};

#endif /* IBEMU_ABI_H */
