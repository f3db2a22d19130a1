/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ibemu.ko: registers ibemud's emulated HCAs with ib_core. The data plane
 * stays in user space (the provider); the module owns what only a kernel can:
 * the devices in sysfs and /dev/infiniband, user contexts, completion
 * channels and async events, and the kernel QP0/QP1 that ib_mad and ib_umad
 * need. Kernel consumers' other objects (CQs, DMA and FRWR MRs, SRQs, RC,
 * UC and UD QPs) are shadowed here and carried out by the daemon's engine over the
 * data channel. See docs/kernel-mode.md and docs/design/kernel-consumers.md.
 */
#ifndef IBEMU_H
#define IBEMU_H

#include <linux/idr.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/rcupdate.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

#include "ibemu_abi.h"
#include "ibemu_compat.h"

struct ibemu_ctl_file;
struct ibemu_data_chan;
struct ibemu_srq;

struct ibemu_port_attr {
	u8 state;
	u8 phys_state;
	u16 lid;
	u16 sm_lid;
	u8 lmc;
	u8 sm_sl;
	u8 max_mtu;
	u8 active_mtu;
	u8 active_width;
	u8 active_speed;
	u16 pkeys[IBEMU_CTL_MAX_PKEYS];
	u32 port_cap_flags;
	u64 subnet_prefix;
	u64 port_guid;
};

struct ibemu_dev {
	struct ib_device ibdev;
	/* The HCA's place in the device tree, as a PCI function is a real
	 * one's: ib_core and IPoIB put the device's IPoIB interfaces under it
	 * (/sys/class/infiniband/<dev>/device/net/), where programs look for
	 * a device's IP addresses. */
	struct platform_device *parent;
	struct list_head node; /* ibemu_devices, under ibemu_devices_mutex */
	struct ibemu_ctl_add_device info;
	/* Guards ports[] and mad_qp[] (taken in the MAD paths, any context). */
	spinlock_t lock;
	struct ibemu_port_attr ports[IBEMU_CTL_MAX_PORTS];
	struct ibemu_qp *mad_qp[IBEMU_CTL_MAX_PORTS][2];
	/* CapabilityMask bits consumers set through modify_port (ib_cm's
	 * IsCommunicationManagementSupported, ib_umad's IsSM): kept here, as
	 * ib_cm sets its bit when the device registers, before a daemon owns
	 * it, and a restarted daemon must get them again. Under lock. */
	u32 consumer_caps[IBEMU_CTL_MAX_PORTS];
	/* Index part (bits 8-31) of the keys of kernel consumers' MRs. */
	struct ida mr_indexes;
	/*
	 * Kernel consumers' objects the daemon's engine mirrors (ibemu_cq.c,
	 * ibemu_kqp.c, ibemu_mr.c, ibemu_srq.c). obj_mutex is held by the
	 * verbs that create, change or destroy them while they queue their
	 * commands, and by a channel's attach from before it publishes
	 * dev->chan to the end of its replay, so that each object is
	 * announced to a channel exactly once. Lists under obj_mutex.
	 */
	struct mutex obj_mutex;
	struct ida pd_numbers;
	struct ida cq_handles;
	struct list_head kcqs;
	struct list_head kqps;
	struct list_head kmrs;
	struct list_head ksrqs;
	/* SRQ handle -> struct ibemu_srq (1 .. max_srq): read under RCU by
	 * COMPLETE's events, changed under obj_mutex. */
	struct xarray srqs;
	/* MR handle (key >> 8) -> struct ibemu_mr: COPY finds it under the
	 * xarray's lock and counts itself in (ibemu_mr.c). */
	struct xarray mrs;
	/* QPN -> struct ibemu_kqp, cyclic over the kernel QPN block; read
	 * under RCU by COMPLETE, changed under obj_mutex. */
	struct idr qpns;
	/* Async events of kernel objects, in order, out of the daemon's
	 * thread (a ULP's handler must not run there). */
	struct workqueue_struct *event_wq;
	/* A channel ended and channel_lost() has not run yet: under
	 * obj_mutex (set under ibemu_devices_mutex too). */
	bool lost_pending;
	/* Records the daemon named that no longer exist (stale tokens,
	 * destroyed QPs): counted, never acted on. */
	atomic_t dropped_records;
	/* The control file driving it and its index there; under ibemu_ctl_lock. */
	struct ibemu_ctl_file *owner;
	u8 owner_index;
	/*
	 * The data channel of that control file, while one is open: set and
	 * cleared under ibemu_devices_mutex and the channel's lock, read under
	 * RCU by the verbs that queue records (ibemu_data.c). chan_index is
	 * the device's index in the channel's records, under its lock.
	 */
	struct ibemu_data_chan __rcu *chan;
	u8 chan_index;
};

enum ibemu_cq_arm {
	IBEMU_CQ_ARM_NONE,
	IBEMU_CQ_ARM_NEXT,
	IBEMU_CQ_ARM_SOLICITED,
};

struct ibemu_cq {
	struct ib_cq ibcq;
	spinlock_t lock;
	bool user; /* a verbs program's CQ: the provider holds its entries */
	/* The rest is a kernel CQ's. Under lock: */
	u8 arm; /* enum ibemu_cq_arm */
	bool overrun;
	u32 size, head, count;
	struct ib_wc *wcs;
	/* The engine's name for it, never 0. */
	u32 handle;
	struct ibemu_dev *dev;
	struct list_head node; /* dev->kcqs */
	/* On a COMPLETE batch's list of CQs whose handler is due (under
	 * the channel's complete_mutex). */
	struct list_head fire_node;
	bool fire;
	struct work_struct err_work; /* IB_EVENT_CQ_ERR, on an overrun */
	struct ibemu_data_cmd *destroy_cmd;
};

struct ibemu_recv_wqe {
	u64 wr_id; /* or its union twin wr_cqe: ib_wc has the same union */
	int num_sge;
	struct ib_sge sge[IBEMU_MAD_QP_MAX_SGE];
};

struct ibemu_kqp;

/* A kernel QP: QP0 or QP1 of one port (the fields below), or a QP the
 * daemon's engine carries out (kqp, ibemu_kqp.c). */
struct ibemu_qp {
	struct ib_qp ibqp;
	struct ibemu_kqp *kqp;
	struct ibemu_dev *dev;
	u8 port;
	spinlock_t lock;
	enum ib_qp_state state;
	bool sq_sig_all;
	u32 qkey;
	u32 rq_size, rq_head, rq_count;
	struct ibemu_recv_wqe *rq;
};

/* A PD is a number the engine's MRs and QPs carry (kernel consumers'). */
struct ibemu_pd {
	struct ib_pd ibpd;
	u32 number; /* 0 for a program's PD */
};

struct ibemu_ucontext {
	struct ib_ucontext ibuc;
};

struct ibemu_ah {
	struct ib_ah ibah;
	u16 dlid;
	u8 sl;
	u8 path_bits;
	u8 port_num;
	u8 static_rate;
	bool has_grh;
	struct ib_global_route grh; /* its sgid_attr is not kept */
};

static inline struct ibemu_dev *to_dev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct ibemu_dev, ibdev);
}

static inline struct ibemu_cq *to_cq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct ibemu_cq, ibcq);
}

static inline struct ibemu_qp *to_qp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct ibemu_qp, ibqp);
}

static inline struct ibemu_ah *to_ah(struct ib_ah *ibah)
{
	return container_of(ibah, struct ibemu_ah, ibah);
}

static inline struct ibemu_pd *to_pd(struct ib_pd *ibpd)
{
	return container_of(ibpd, struct ibemu_pd, ibpd);
}

/* ibemu_device.c */
extern struct mutex ibemu_devices_mutex;
extern struct list_head ibemu_devices;
struct ibemu_dev *ibemu_find_device(const char *name);
struct ibemu_dev *ibemu_create_device(const struct ibemu_ctl_add_device *info);
void ibemu_destroy_device(struct ibemu_dev *dev);
void ibemu_set_port(struct ibemu_dev *dev, u8 port,
		    const struct ibemu_port_attr *attr);
void ibemu_ports_down(struct ibemu_dev *dev);

/* ibemu_verbs.c: the ops ib_core calls */
extern const struct ib_device_ops ibemu_dev_ops;
/* The limits kernel QPs and CQs get (what query_device reports). */
u32 ibemu_max_qp_wr(const struct ibemu_dev *dev);
u32 ibemu_max_sge(const struct ibemu_dev *dev);
u32 ibemu_max_cqe(const struct ibemu_dev *dev);

/* ibemu_mr.c: kernel consumers' DMA and FRWR MRs, and the copy service */
struct ib_mr *ibemu_get_dma_mr(struct ib_pd *pd, int access);
struct ib_mr *ibemu_alloc_mr(struct ib_pd *pd, enum ib_mr_type type,
			     u32 max_num_sg);
int ibemu_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		    unsigned int *sg_offset);
int ibemu_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
/*
 * The registration an IB_WR_REG_MR (of an RC or UC QP) carries in its
 * SEND_WQE record; freezes the MR's page list as its new mapping. Called by
 * the post path under the QP's lock, any context; 0 or -EINVAL (not an FRWR
 * MR of this device, a key of another MR, not mapped).
 */
int ibemu_mr_fill_reg_wr(struct ibemu_dev *dev, const struct ib_reg_wr *reg,
			 struct ibemu_data_fast_reg *out);
void ibemu_mr_replay(struct ibemu_dev *dev);
long ibemu_mr_copy(struct ibemu_dev *dev,
		   const struct ibemu_data_copy_segment *seg, void *bounce);

/* ibemu_cq.c */
int ibemu_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		    IBEMU_CREATE_CQ_ARG);
int ibemu_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int ibemu_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc);
int ibemu_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
/* Adds a completion; true when the CQ's handler is due (the caller runs
 * it with ibemu_cq_fire() once it holds no lock). Any context. */
bool ibemu_cq_add(struct ibemu_cq *cq, const struct ib_wc *wc);
/* The same for a completion that may be solicited (IBA 11.4.2.2). */
bool ibemu_cq_add_solicited(struct ibemu_cq *cq, const struct ib_wc *wc,
			    bool solicited);
/* Runs the handler of a CQ ibemu_cq_add() said is due. */
void ibemu_cq_fire(struct ibemu_cq *cq);
/* ibemu_cq_add(), then the handler if due (the MAD QPs). */
void ibemu_cq_push(struct ibemu_cq *cq, const struct ib_wc *wc);
/* Drops the CQ's entries of a QP being destroyed. */
void ibemu_cq_purge_qp(struct ibemu_cq *cq, struct ib_qp *qp);
void ibemu_cq_replay(struct ibemu_dev *dev);

/* ibemu_srq.c: kernel consumers' SRQs */
u32 ibemu_max_srq_wr(const struct ibemu_dev *dev);
int ibemu_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		     struct ib_udata *udata);
int ibemu_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		     enum ib_srq_attr_mask mask, struct ib_udata *udata);
int ibemu_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int ibemu_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int ibemu_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
/* The WQE a receive completion's token names is done: its wr_id, and its
 * slot is free again; false when the token names no WQE the engine got.
 * In the daemon's thread, any lock of a QP may be held. */
bool ibemu_srq_retire(struct ibemu_srq *srq, u64 token, u64 *wr_id);
void ibemu_srq_event(struct ibemu_dev *dev, const struct ibemu_data_event *e);
void ibemu_srq_replay(struct ibemu_dev *dev);

/* ibemu_kqp.c: kernel consumers' RC, UC and UD QPs */
/* A WR's scatter/gather list as a record carries it. */
void ibemu_copy_sges(struct ibemu_data_sge *to, const struct ib_sge *from,
		     int num_sge);
int ibemu_create_kqp(struct ib_qp *ibqp, struct ib_qp_init_attr *init);
int ibemu_modify_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask);
int ibemu_query_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_qp_init_attr *init);
int ibemu_destroy_kqp(struct ib_qp *ibqp);
int ibemu_post_kqp_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr);
int ibemu_post_kqp_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
int ibemu_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int ibemu_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
/* The COMPLETE records of one device, in the daemon's thread under RCU;
 * CQs whose handler is due go on `fire`. */
void ibemu_kqp_cqe(struct ibemu_dev *dev, const struct ibemu_data_cqe *c,
		   struct list_head *fire);
void ibemu_kqp_event(struct ibemu_dev *dev, const struct ibemu_data_event *e);
void ibemu_kqp_replay(struct ibemu_dev *dev);
void ibemu_kqp_channel_lost(struct ibemu_dev *dev);

/* ibemu_mad_qp.c */
int ibemu_create_mad_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init);
int ibemu_modify_mad_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask);
int ibemu_destroy_mad_qp(struct ib_qp *ibqp);
int ibemu_post_mad_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr);
int ibemu_post_mad_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
void ibemu_deliver_mad(struct ibemu_dev *dev, const struct ibemu_ctl_mad_in *in);

/*
 * ibemu_data.c: the data channel, through which the daemon's engine carries
 * out kernel consumers' verbs (docs/design/kernel-consumers.md, section 4).
 * The verbs hand it records and never wait for the daemon: with no channel
 * open a record is dropped, and the replay of a channel that opens later
 * tells the daemon what exists.
 */

/*
 * A command record (CREATE_QP, MODIFY_QP, DESTROY_CQ...) allocated ahead:
 * a verb that must not fail, such as a destroy, allocates its record when
 * the object is created and submits it later.
 */
struct ibemu_data_cmd;

/*
 * A queue of WQE records (a QP's send or receive queue, an SRQ) that the
 * channel's reader copies straight out of its owner's ring, so that posting
 * allocates nothing. The owner numbers its records 0, 1, 2... (u32,
 * wrapping), and keeps records from the one last delivered up to `posted`
 * unchanged in their slots until the reader has taken them or the owner has
 * called ibemu_data_producer_stop(). ibemu_data_ring_doorbell() and
 * ibemu_data_producer_stop() are called with the owner's lock held, which
 * serializes them; that lock is taken before the channel's, never after.
 */
struct ibemu_data_producer {
	struct ibemu_dev *dev;
	/*
	 * Copies record `seq` into `buf` and returns its length (a multiple of
	 * 8; the reader fills in the device index), or 0 when it needs more
	 * than `room` bytes. The reader calls it under the channel's lock with
	 * interrupts off: it must not sleep or take the owner's lock, and reads
	 * the slot as the rule above guarantees it to be.
	 */
	unsigned int (*emit)(struct ibemu_data_producer *p, u32 seq, void *buf,
			     unsigned int room);
	/*
	 * The channel whose doorbell (or reading) list holds it, NULL while it
	 * is idle; the other fields are under that channel's lock while it is
	 * set, and the owner's while it is NULL (then delivered == posted).
	 */
	struct ibemu_data_chan *chan;
	struct list_head node;
	u32 posted; /* records before this one exist */
	u32 delivered; /* records before this one went to the daemon */
	u32 snapshot; /* the reader's: taken, not yet delivered */
};

/*
 * A kernel consumer's SRQ (ibemu_srq.c). Under lock: the slots, the lists,
 * head and limit; the rest is fixed at create.
 */
struct srq_slot;
struct ibemu_srq {
	struct ib_srq ibsrq;
	struct ibemu_dev *dev;
	spinlock_t lock;
	u32 handle; /* the engine's name for it, never 0 */
	u32 pd;
	u32 max_wr, max_sge;
	u32 limit; /* armed limit, 0: not armed */
	u32 head; /* the number of the next record posted */
	u32 ring_size; /* a power of two, >= max_wr */
	u32 *ring; /* record number -> slot, for the channel's reader */
	u32 slot_bytes;
	struct srq_slot *slots; /* max_wr of them */
	u8 *recs; /* each slot's record */
	struct list_head free, posted;
	struct ibemu_data_producer prod;
	struct list_head node; /* dev->ksrqs, under obj_mutex */
	struct ibemu_data_cmd *destroy_cmd;
};

static inline struct ibemu_srq *to_srq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct ibemu_srq, ibsrq);
}

void ibemu_data_producer_init(struct ibemu_data_producer *p,
			      struct ibemu_dev *dev,
			      unsigned int (*emit)(struct ibemu_data_producer *,
						   u32, void *, unsigned int));
/*
 * Records before `posted` exist: links the producer on the channel's
 * doorbell list unless it is there already, and wakes the reader. Any
 * context. Returns false when no channel is open: those records will never
 * be delivered, and the caller completes them itself.
 */
bool ibemu_data_ring_doorbell(struct ibemu_data_producer *p, u32 posted);
/*
 * Takes the producer off its channel (a QP's reset or destroy): once it
 * returns, the reader reads none of its slots, and records not yet
 * delivered never will be. Any context.
 */
void ibemu_data_producer_stop(struct ibemu_data_producer *p);

/*
 * Queues a command for the daemon driving `dev`, after every command queued
 * before it and before every WQE posted after it returns. `rec` is a whole
 * record as the ABI defines it (its device index is filled in here); a
 * malformed one is the module's bug (a warning, -EINVAL). Returns 0 when
 * queued or when no channel is open (nothing to tell: the replay will),
 * -ENOMEM when out of memory or when the daemon has left too many commands
 * unread. gfp: GFP_KERNEL where the verb may sleep, else GFP_ATOMIC.
 */
int ibemu_data_queue_command(struct ibemu_dev *dev, const void *rec,
			     size_t len, gfp_t gfp);
struct ibemu_data_cmd *ibemu_data_cmd_alloc(const void *rec, size_t len,
					    gfp_t gfp);
void ibemu_data_cmd_free(struct ibemu_data_cmd *cmd);
/* Queues (or, with no channel, frees) a command from ibemu_data_cmd_alloc:
 * never fails, and does not count against the limit of unread commands. */
void ibemu_data_cmd_submit(struct ibemu_dev *dev, struct ibemu_data_cmd *cmd);

/* For ibemu_ctl.c, under ibemu_devices_mutex unless said otherwise. */
/* IBEMU_IOC_OPEN_DATA on the control file whose channel pointer is `slot`
 * and whose devices are `devs`; takes the mutex itself. */
int ibemu_data_open(struct ibemu_data_chan **slot,
		    struct ibemu_dev *const *devs);
/* A device the control file has just added (or adopted). */
void ibemu_data_attach(struct ibemu_data_chan *chan, struct ibemu_dev *dev,
		       u8 index);
/* The control file's release: ends its channel, if any; takes the mutex. */
void ibemu_data_close_ctl(struct ibemu_data_chan **slot);

/* ibemu_ctl.c: the control device */
int ibemu_ctl_register(void);
void ibemu_ctl_unregister(void);
/* Queues a message for the daemon driving `dev`, naming the device by its
 * index there; false when no daemon drives it. */
bool ibemu_ctl_send(struct ibemu_dev *dev, const void *msg, size_t len);
void ibemu_ctl_port_caps(struct ibemu_dev *dev, u32 port, u32 set, u32 clear);
/* An SMP for the daemon's SMA; returns an enum ibemu_ctl_mad_result or < 0. */
int ibemu_ctl_process_mad(struct ibemu_dev *dev, u8 port, const void *mad,
			  void *reply);

#endif /* IBEMU_H */
