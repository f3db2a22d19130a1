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

#include <linux/ioctl.h>
#include <linux/types.h>

/* 3: the data channel (IBEMU_IOC_*, struct ibemu_data_*) and the kernel QPN
 * block and FRWR limit of ADD_DEVICE. 4: the ports' GIDs in ADD_DEVICE. */
#define IBEMU_CTL_ABI_VERSION 4
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
	/*
	 * Each port's GID from the start (SET_PORT may change it later): the
	 * consumers that ib_register_device() adds the device to, IPoIB among
	 * them, read it at once. Ports past num_ports: 0.
	 */
	__u64 subnet_prefix;
	__u64 port_guids[IBEMU_CTL_MAX_PORTS];
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

/*
 * The data channel (ABI 3): the verbs of kernel consumers' QPs, CQs, SRQs
 * and MRs, which the daemon's engine carries out (docs/design/
 * kernel-consumers.md, section 4).
 *
 * IBEMU_IOC_OPEN_DATA on the control file returns a new file, the data fd,
 * bound to that control file (one per control file; closing either ends the
 * channel). read() of the data fd returns whole records the module has for
 * the daemon: commands first, in the order the verbs ran, then WQEs; poll()
 * says when some wait. The daemon hands back completions and events with
 * IBEMU_IOC_COMPLETE and moves payload with IBEMU_IOC_COPY.
 *
 * Every record starts with struct ibemu_data_hdr; `length` is the whole
 * record, a multiple of 8, so that records follow each other in a batch
 * without padding. A record of a fixed size is exactly its struct; a WQE is
 * its struct cut after its last SGE or inline byte (ibemu_ctl_validate.h
 * computes the length). Numbers are in host byte order, except the bytes of
 * GIDs and immediate data, which are as on the wire. No record carries a
 * pointer: WQEs are named by the module's tokens, CQs and SRQs by its
 * handles, MRs by their keys or handles (IBEMU_DATA_MR_HANDLE), QPs by QPN.
 * Handles are per device and never 0.
 *
 * Values: the fields marked "engine" carry the numbers the daemon's engine
 * (transport/engine/types.h) and the kernel's ib_verbs.h share — QP types
 * and states, path MTUs, attribute masks, access flags, send flags, WC
 * statuses, async event types — and the module passes them through (it
 * checks that they agree at build time). The fields marked "mapped" use the
 * engine's numbers where the kernel's differ (WR and WC opcodes, WC flags):
 * the module converts them by name, never by number.
 */

#define IBEMU_IOC_MAGIC 0xbe
/* Returns the data fd (O_CLOEXEC) or EBUSY when this control file has one. */
#define IBEMU_IOC_OPEN_DATA _IO(IBEMU_IOC_MAGIC, 0)
/* struct ibemu_data_complete: a batch of CQE and EVENT records. */
#define IBEMU_IOC_COMPLETE _IOW(IBEMU_IOC_MAGIC, 1, struct ibemu_data_complete)
/* struct ibemu_data_copy: payload between kernel memory and the daemon. */
#define IBEMU_IOC_COPY _IOWR(IBEMU_IOC_MAGIC, 2, struct ibemu_data_copy)

/* Scatter/gather entries of a WQE; the device's max_sge is the real limit. */
#define IBEMU_DATA_MAX_SGE 32
/* Inline bytes of a SEND_WQE (the device's max_inline_data is the limit). */
#define IBEMU_DATA_MAX_INLINE 256
/*
 * Sanity caps of queue sizes, above the engine's limits (which ADD_DEVICE
 * advertises and the module enforces): they stop a corrupted command from
 * sizing the daemon's rings.
 */
#define IBEMU_DATA_MAX_WR 65536
#define IBEMU_DATA_MAX_CQE (1u << 22)
/* Limits of one IBEMU_IOC_COMPLETE batch and one IBEMU_IOC_COPY. */
#define IBEMU_DATA_MAX_BATCH 65536
#define IBEMU_DATA_MAX_COPY_SEGMENTS 64
#define IBEMU_DATA_MAX_COPY_LENGTH (1u << 20)
/* Bounds of an FRWR mapping's page size (mr->page_size), a power of two. */
#define IBEMU_DATA_MIN_PAGE_SIZE 4096
#define IBEMU_DATA_MAX_PAGE_SIZE (1u << 30)
/* An MR's key is its handle << 8 plus the key byte FRWR changes. */
#define IBEMU_DATA_MR_HANDLE(key) ((key) >> 8)

enum ibemu_data_type {
	/* module -> daemon: commands */
	IBEMU_DATA_CREATE_CQ = 1,
	IBEMU_DATA_DESTROY_CQ = 2,
	IBEMU_DATA_REG_DMA_MR = 3,
	IBEMU_DATA_ALLOC_MR = 4,
	IBEMU_DATA_DEREG_MR = 5,
	IBEMU_DATA_CREATE_SRQ = 6,
	IBEMU_DATA_MODIFY_SRQ = 7,
	IBEMU_DATA_DESTROY_SRQ = 8,
	IBEMU_DATA_CREATE_QP = 9,
	IBEMU_DATA_MODIFY_QP = 10,
	IBEMU_DATA_DESTROY_QP = 11,
	IBEMU_DATA_MCAST_ATTACH = 12,
	IBEMU_DATA_MCAST_DETACH = 13,
	/* module -> daemon: WQEs */
	IBEMU_DATA_SEND_WQE = 32,
	IBEMU_DATA_RECV_WQE = 33,
	/* daemon -> module, in IBEMU_IOC_COMPLETE */
	IBEMU_DATA_CQE = 64,
	IBEMU_DATA_EVENT = 65,
};

struct ibemu_data_hdr {
	__u16 type; /* enum ibemu_data_type */
	__u16 length; /* bytes of the whole record, a multiple of 8 */
	__u8 index; /* the daemon's device index, < IBEMU_CTL_MAX_DEVICES */
	__u8 reserved[3]; /* 0 */
};

/* Engine values: access flags (IB_ACCESS_*, engine::Access) a kernel MR or
 * QP may carry; remote write or atomic needs local write (IBA 10.6.3.1). */
#define IBEMU_DATA_ACCESS_LOCAL_WRITE 1
#define IBEMU_DATA_ACCESS_REMOTE_WRITE 2
#define IBEMU_DATA_ACCESS_REMOTE_READ 4
#define IBEMU_DATA_ACCESS_REMOTE_ATOMIC 8

/* Engine values: QP types (IB_QPT_*, engine::QpType) of the data channel. */
#define IBEMU_DATA_QPT_RC 2
#define IBEMU_DATA_QPT_UC 3
#define IBEMU_DATA_QPT_UD 4

/* Engine values: QP states (IB_QPS_*, engine::QpState), RESET 0 .. ERR 6. */
#define IBEMU_DATA_QPS_RESET 0
#define IBEMU_DATA_QPS_ERR 6

/* A new CQ of `cqe` entries (engine CompletionQueue). */
struct ibemu_data_create_cq {
	struct ibemu_data_hdr hdr;
	__u32 cq; /* handle */
	__u32 cqe; /* capacity, 1 .. IBEMU_DATA_MAX_CQE */
};

struct ibemu_data_destroy_cq {
	struct ibemu_data_hdr hdr;
	__u32 cq;
	__u32 reserved; /* 0 */
};

/*
 * A PD's DMA MR (get_dma_mr): every kernel virtual address of direct-mapped
 * RAM, iova = address, reached through IBEMU_IOC_COPY with generation 0.
 */
struct ibemu_data_reg_dma_mr {
	struct ibemu_data_hdr hdr;
	__u32 key; /* lkey = rkey; its key byte is 0 */
	__u32 pd; /* the module's PD number */
	__u32 access; /* engine: IBEMU_DATA_ACCESS_* */
	__u32 reserved; /* 0 */
};

/* An FRWR MR (alloc_mr IB_MR_TYPE_MEM_REG), free until a REG_MR WQE. */
struct ibemu_data_alloc_mr {
	struct ibemu_data_hdr hdr;
	__u32 key; /* the initial key */
	__u32 pd;
	__u32 max_pages; /* 1 .. IBEMU_CTL_MAX_FAST_REG_PAGES */
	__u32 reserved; /* 0 */
};

/* Either kind of MR. */
struct ibemu_data_dereg_mr {
	struct ibemu_data_hdr hdr;
	__u32 mr; /* handle: IBEMU_DATA_MR_HANDLE(key) */
	__u32 reserved; /* 0 */
};

/* A basic SRQ (engine SharedReceiveQueue). */
struct ibemu_data_create_srq {
	struct ibemu_data_hdr hdr;
	__u32 srq; /* handle */
	__u32 pd;
	__u32 max_wr; /* 1 .. IBEMU_DATA_MAX_WR */
	__u32 max_sge; /* 1 .. IBEMU_DATA_MAX_SGE */
	__u32 srq_limit; /* <= max_wr; 0: not armed */
	__u32 reserved; /* 0 */
};

/* IB_SRQ_LIMIT, the only attribute that changes (no resize, as the engine). */
struct ibemu_data_modify_srq {
	struct ibemu_data_hdr hdr;
	__u32 srq;
	__u32 srq_limit; /* <= IBEMU_DATA_MAX_WR; 0 disarms */
};

struct ibemu_data_destroy_srq {
	struct ibemu_data_hdr hdr;
	__u32 srq;
	__u32 reserved; /* 0 */
};

/*
 * A QP in RESET (engine QpInit). Capacities are what the module granted and
 * wrote back into ib_qp_init_attr.cap.
 */
struct ibemu_data_create_qp {
	struct ibemu_data_hdr hdr;
	__u32 qpn; /* in the device's kernel QPN block */
	__u32 pd;
	__u32 send_cq; /* CQ handles */
	__u32 recv_cq;
	__u32 srq; /* SRQ handle, 0: the QP has its own receive queue */
	__u32 max_send_wr; /* 0 .. IBEMU_DATA_MAX_WR */
	__u32 max_recv_wr; /* 0 .. IBEMU_DATA_MAX_WR; 0 with an SRQ */
	__u32 max_send_sge; /* 0 .. IBEMU_DATA_MAX_SGE */
	__u32 max_recv_sge; /* 0 .. IBEMU_DATA_MAX_SGE; 0 with an SRQ */
	__u32 max_inline_data; /* bytes, 0 .. IBEMU_DATA_MAX_INLINE */
	__u8 qp_type; /* engine: IBEMU_DATA_QPT_* */
	__u8 sq_sig_all; /* 1: every send WQE completes (IB_SIGNAL_ALL_WR) */
	__u8 reserved[6]; /* 0 */
};

/*
 * An address vector (rdma_ah_attr, engine AddressVector): the destination of
 * a UD send and the primary path of an RC or UC QP.
 */
struct ibemu_data_av {
	__u8 dgid[16]; /* wire order; meaningful with is_global */
	__u32 flow_label; /* 20 bits */
	__u16 dlid;
	__u8 sl; /* 0 .. 15 */
	__u8 src_path_bits; /* 0 .. 127 */
	__u8 port; /* 1 .. IBEMU_CTL_MAX_PORTS; 0 in an unused one */
	__u8 is_global; /* 0 or 1: a GRH goes with each packet */
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 reserved[3]; /* 0 */
};

/*
 * Engine values: the attributes (IB_QP_*, engine::QpAttrMask) MODIFY_QP may
 * name. IB_QP_ALT_PATH, IB_QP_CAP and IB_QP_RATE_LIMIT are refused by the
 * module; IB_QP_PATH_MIG_STATE has no value (there is only the primary path,
 * always MIGRATED).
 */
#define IBEMU_DATA_QP_STATE (1u << 0)
#define IBEMU_DATA_QP_CUR_STATE (1u << 1)
#define IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY (1u << 2)
#define IBEMU_DATA_QP_ACCESS_FLAGS (1u << 3)
#define IBEMU_DATA_QP_PKEY_INDEX (1u << 4)
#define IBEMU_DATA_QP_PORT (1u << 5)
#define IBEMU_DATA_QP_QKEY (1u << 6)
#define IBEMU_DATA_QP_AV (1u << 7)
#define IBEMU_DATA_QP_PATH_MTU (1u << 8)
#define IBEMU_DATA_QP_TIMEOUT (1u << 9)
#define IBEMU_DATA_QP_RETRY_CNT (1u << 10)
#define IBEMU_DATA_QP_RNR_RETRY (1u << 11)
#define IBEMU_DATA_QP_RQ_PSN (1u << 12)
#define IBEMU_DATA_QP_MAX_QP_RD_ATOMIC (1u << 13)
#define IBEMU_DATA_QP_MIN_RNR_TIMER (1u << 15)
#define IBEMU_DATA_QP_SQ_PSN (1u << 16)
#define IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC (1u << 17)
#define IBEMU_DATA_QP_PATH_MIG_STATE (1u << 18)
#define IBEMU_DATA_QP_DEST_QPN (1u << 20)

/*
 * ib_modify_qp after the module's checks (engine QpAttr + mask). Only the
 * fields attr_mask names mean anything; the module's shadow already holds
 * the result, so the engine applies it without an answer.
 */
struct ibemu_data_modify_qp {
	struct ibemu_data_hdr hdr;
	__u32 qpn;
	__u32 attr_mask; /* engine: IBEMU_DATA_QP_* */
	/* This QP's count of MODIFY_QPs, from 1: EVENTs name the last one. */
	__u32 modify_seq;
	__u32 qkey;
	__u32 rq_psn; /* 24 bits */
	__u32 sq_psn; /* 24 bits */
	__u32 dest_qpn; /* 24 bits */
	__u32 access_flags; /* engine: IBEMU_DATA_ACCESS_* */
	__u16 pkey_index; /* < IBEMU_CTL_MAX_PKEYS */
	__u8 qp_state; /* engine: IBEMU_DATA_QPS_RESET .. IBEMU_DATA_QPS_ERR */
	__u8 cur_qp_state; /* the same */
	__u8 path_mtu; /* engine: IB_MTU_256 (1) .. IB_MTU_4096 (5) */
	__u8 en_sqd_async_notify; /* 0 or 1 */
	__u8 max_rd_atomic; /* 0 .. 16 */
	__u8 max_dest_rd_atomic; /* 0 .. 16 */
	__u8 min_rnr_timer; /* IBA encoding, 0 .. 31 */
	__u8 port; /* 1 .. IBEMU_CTL_MAX_PORTS */
	__u8 timeout; /* IBA encoding (4.096 us * 2^timeout), 0 .. 31 */
	__u8 retry_cnt; /* 0 .. 7 */
	__u8 rnr_retry; /* 0 .. 7, 7: for ever */
	__u8 reserved[3]; /* 0 */
	struct ibemu_data_av av; /* with IBEMU_DATA_QP_AV */
};

/* The QP goes; the module has already flushed its shadow and CQ entries. */
struct ibemu_data_destroy_qp {
	struct ibemu_data_hdr hdr;
	__u32 qpn;
	__u32 reserved; /* 0 */
};

/* MCAST_ATTACH and MCAST_DETACH of a UD QP. */
struct ibemu_data_mcast {
	struct ibemu_data_hdr hdr;
	__u8 mgid[16]; /* wire order, first byte 0xff */
	__u32 qpn;
	__u16 mlid; /* 0xc000 .. 0xfffe */
	__u16 reserved; /* 0 */
};

/* One scatter/gather entry (ib_sge, engine Sge). */
struct ibemu_data_sge {
	__u64 addr; /* in the MR of lkey: a kernel virtual address in a DMA MR */
	__u32 length; /* bytes */
	__u32 lkey;
};

/*
 * Mapped: WR opcodes (enum ib_wr_opcode by name), the engine's WrOpcode
 * values. BIND_MW, LSO and RDMA_READ_WITH_INV are refused by the module.
 */
enum ibemu_data_wr_opcode {
	IBEMU_DATA_WR_RDMA_WRITE = 0,
	IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM = 1,
	IBEMU_DATA_WR_SEND = 2,
	IBEMU_DATA_WR_SEND_WITH_IMM = 3,
	IBEMU_DATA_WR_RDMA_READ = 4,
	IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP = 5,
	IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD = 6,
	IBEMU_DATA_WR_LOCAL_INV = 7,
	IBEMU_DATA_WR_SEND_WITH_INV = 9,
	/* Outside the verbs ABI's opcodes: the engine's kRegMr (step 3). */
	IBEMU_DATA_WR_REG_MR = 0x20,
};

/* Engine values: send flags (IB_SEND_*, engine::SendFlag). */
#define IBEMU_DATA_SEND_FENCE 1
#define IBEMU_DATA_SEND_SIGNALED 2
#define IBEMU_DATA_SEND_SOLICITED 4
#define IBEMU_DATA_SEND_INLINE 8

/*
 * IB_WR_REG_MR (struct ib_reg_wr): the MR's page list as map_mr_sg left it
 * becomes mapping `generation`, which IBEMU_IOC_COPY names from then on.
 */
struct ibemu_data_fast_reg {
	__u64 iova; /* mr->iova */
	__u64 length; /* mr->length, bytes; iova + length does not wrap */
	__u32 key; /* the new key; IBEMU_DATA_MR_HANDLE(key) names the MR */
	__u32 access; /* engine: IBEMU_DATA_ACCESS_* */
	__u32 generation; /* >= 1 (0 is a DMA MR's) */
	/* mr->page_size: IBEMU_DATA_MIN_PAGE_SIZE .. IBEMU_DATA_MAX_PAGE_SIZE */
	__u32 page_size;
};

/*
 * A send queue WQE (ib_post_send, engine SendWqe). Fields an opcode does
 * not use are 0. A record carries `num_sge` SGEs, or with
 * IBEMU_DATA_SEND_INLINE the `inline_len` bytes the module copied at post
 * time (then num_sge is 0), padded with zeros to a multiple of 8: the record
 * ends there.
 */
struct ibemu_data_send_wqe {
	struct ibemu_data_hdr hdr;
	__u64 token; /* the module's name for this WQE, returned in its CQE */
	__u64 remote_addr; /* RDMA and atomics */
	__u64 compare_add; /* atomics: the compare or add operand */
	__u64 swap; /* compare and swap */
	__u32 qpn;
	__u32 flags; /* engine: IBEMU_DATA_SEND_* */
	/* WITH_IMM: immediate data (wire order); SEND_WITH_INV and LOCAL_INV:
	 * the rkey to invalidate */
	__u32 imm_or_rkey;
	__u32 rkey; /* RDMA and atomics */
	__u32 remote_qpn; /* UD: the destination QP, 24 bits */
	__u32 remote_qkey; /* UD */
	__u8 opcode; /* mapped: enum ibemu_data_wr_opcode */
	__u8 num_sge; /* 0 .. IBEMU_DATA_MAX_SGE */
	__u16 inline_len; /* bytes, 0 .. IBEMU_DATA_MAX_INLINE */
	__u32 reserved; /* 0 */
	struct ibemu_data_av av; /* UD: the AH's address vector */
	struct ibemu_data_fast_reg reg; /* IBEMU_DATA_WR_REG_MR */
	union {
		struct ibemu_data_sge sge[IBEMU_DATA_MAX_SGE];
		__u8 inline_data[IBEMU_DATA_MAX_INLINE];
	};
};

/* A receive WQE (ib_post_recv or ib_post_srq_recv, engine RecvWqe). */
struct ibemu_data_recv_wqe {
	struct ibemu_data_hdr hdr;
	__u64 token;
	__u32 qpn; /* the QP's receive queue; 0 for an SRQ's WQE */
	__u32 srq; /* SRQ handle; 0 for a QP's WQE */
	__u8 num_sge; /* 0 .. IBEMU_DATA_MAX_SGE; the record ends after them */
	__u8 reserved[7]; /* 0 */
	struct ibemu_data_sge sge[IBEMU_DATA_MAX_SGE];
};

/*
 * Mapped: WC opcodes (enum ib_wc_opcode by name), the engine's WcOpcode
 * values. IB_WC_REG_MR's own number moves after Linux 6.1.
 */
enum ibemu_data_wc_opcode {
	IBEMU_DATA_WC_SEND = 0,
	IBEMU_DATA_WC_RDMA_WRITE = 1,
	IBEMU_DATA_WC_RDMA_READ = 2,
	IBEMU_DATA_WC_COMP_SWAP = 3,
	IBEMU_DATA_WC_FETCH_ADD = 4,
	IBEMU_DATA_WC_LOCAL_INV = 6,
	IBEMU_DATA_WC_REG_MR = 0x20, /* the engine's kRegMr (step 3) */
	IBEMU_DATA_WC_RECV = 128,
	IBEMU_DATA_WC_RECV_RDMA_WITH_IMM = 129,
};

/* Mapped: WC flags (engine::WcFlag; the kernel's WITH_INVALIDATE is 4). */
#define IBEMU_DATA_WC_GRH 1
#define IBEMU_DATA_WC_WITH_IMM 2
#define IBEMU_DATA_WC_WITH_INV 8

/* Engine values: the last WC status (IB_WC_*, engine::WcStatus). */
#define IBEMU_DATA_WC_GENERAL_ERR 21

/*
 * A completion (engine Completion) of the WQE `token` names. The module
 * retires that WQE and the unsignaled ones before it on the same queue, and
 * fills struct ib_wc from its shadow (wr_id, qp) and these fields.
 */
struct ibemu_data_cqe {
	struct ibemu_data_hdr hdr;
	__u64 token;
	__u32 cq; /* handle */
	__u32 qpn;
	__u32 byte_len;
	/* WITH_IMM: immediate data (wire order); WITH_INV: the invalidated rkey */
	__u32 imm_or_rkey;
	__u32 src_qp; /* receives: the sender's QPN, 24 bits */
	__u32 flags; /* mapped: IBEMU_DATA_WC_GRH, _WITH_IMM, _WITH_INV */
	__u32 vendor_err;
	__u16 slid;
	__u16 pkey_index; /* < IBEMU_CTL_MAX_PKEYS */
	__u8 status; /* engine: IB_WC_SUCCESS (0) .. IBEMU_DATA_WC_GENERAL_ERR */
	__u8 opcode; /* mapped: enum ibemu_data_wc_opcode */
	__u8 sl; /* 0 .. 15 */
	__u8 dlid_path_bits; /* 0 .. 127 */
	__u8 solicited; /* 0 or 1: the message asked for a solicited event */
	__u8 reserved[3]; /* 0 */
};

enum ibemu_data_event_object {
	IBEMU_DATA_EVENT_ON_QP = 1, /* handle: QPN */
	IBEMU_DATA_EVENT_ON_SRQ = 2,
	IBEMU_DATA_EVENT_ON_CQ = 3,
};

/*
 * Engine values: async event types (enum ib_event_type, engine QpEvent),
 * the ones the engine raises on each object. IBEMU_DATA_EVENT_QP_STATE is
 * ibemu's own: the engine moved the QP (retries exhausted -> ERR, a UD send
 * error -> SQE) and the ULP gets no event, only the new state.
 */
enum ibemu_data_event_type {
	IBEMU_DATA_EVENT_CQ_ERR = 0,
	IBEMU_DATA_EVENT_QP_FATAL = 1,
	IBEMU_DATA_EVENT_QP_REQ_ERR = 2,
	IBEMU_DATA_EVENT_QP_ACCESS_ERR = 3,
	IBEMU_DATA_EVENT_COMM_EST = 4,
	IBEMU_DATA_EVENT_SQ_DRAINED = 5,
	IBEMU_DATA_EVENT_SRQ_ERR = 14,
	IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED = 15,
	IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED = 16,
	IBEMU_DATA_EVENT_QP_STATE = 0x80,
};

/*
 * An async event or an engine-made state change. The module applies a QP's
 * new state only when modify_seq is still the QP's latest, so that a later
 * modify by the ULP is not undone.
 */
struct ibemu_data_event {
	struct ibemu_data_hdr hdr;
	__u32 handle; /* QPN, or SRQ or CQ handle */
	__u32 modify_seq; /* QP: the last MODIFY_QP the engine applied; else 0 */
	__u8 object; /* enum ibemu_data_event_object */
	__u8 event; /* enum ibemu_data_event_type, one of the object's */
	__u8 qp_state; /* QP: engine state after the event; else 0 */
	__u8 reserved[5]; /* 0 */
};

/* The argument of IBEMU_IOC_COMPLETE. Returns 0, or EINVAL (and acts on
 * none of them) when a record is malformed. */
struct ibemu_data_complete {
	__u64 records; /* user address of the CQE and EVENT records */
	__u32 length; /* bytes of whole records, 8 .. IBEMU_DATA_MAX_BATCH */
	__u32 reserved; /* 0 */
};

enum ibemu_data_copy_direction {
	IBEMU_DATA_COPY_TO_KERNEL = 1, /* buffer -> kernel memory (engine write) */
	IBEMU_DATA_COPY_FROM_KERNEL = 2, /* kernel memory -> buffer (engine read) */
};

/* One piece of payload: `length` bytes at `iova` of an MR's mapping. */
struct ibemu_data_copy_segment {
	__u64 iova; /* DMA MR: a kernel virtual address; FRWR: in the mapping */
	__u64 buffer; /* the daemon's user address; iova and buffer do not wrap */
	__u32 mr; /* handle: IBEMU_DATA_MR_HANDLE(key) */
	__u32 generation; /* 0 for a DMA MR, else the REG_MR's mapping */
	__u32 length; /* bytes, 1 .. IBEMU_DATA_MAX_COPY_LENGTH */
	__u8 index; /* device index */
	__u8 direction; /* enum ibemu_data_copy_direction */
	__u16 reserved; /* 0 */
};

/*
 * The argument of IBEMU_IOC_COPY. The segments are copied in order; the
 * ioctl returns the bytes moved, or the errno of the first that fails:
 * EACCES (outside the MR or its mapping, or not direct-mapped RAM), ESTALE
 * (an older mapping), ENOENT (no such MR), EFAULT (the buffer), EINVAL (a
 * malformed segment). `done` comes back as the number of segments copied
 * before it.
 */
struct ibemu_data_copy {
	__u64 segments; /* user address of struct ibemu_data_copy_segment[] */
	__u32 count; /* 1 .. IBEMU_DATA_MAX_COPY_SEGMENTS */
	__u32 done; /* 0 in; out: the segments copied */
};

#endif /* IBEMU_ABI_H */
