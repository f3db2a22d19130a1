/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ibemu.ko: registers ibemud's emulated HCAs with ib_core. The data plane
 * stays in user space (the provider); the module owns what only a kernel can:
 * the devices in sysfs and /dev/infiniband, user contexts, completion
 * channels and async events, and the kernel QP0/QP1 that ib_mad and ib_umad
 * need. See docs/kernel-mode.md.
 */
#ifndef IBEMU_H
#define IBEMU_H

#include <linux/idr.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <rdma/ib_verbs.h>

#include "ibemu_abi.h"
#include "ibemu_compat.h"

struct ibemu_ctl_file;

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
	struct list_head node; /* ibemu_devices, under ibemu_devices_mutex */
	struct ibemu_ctl_add_device info;
	/* Guards ports[] and mad_qp[] (taken in the MAD paths, any context). */
	spinlock_t lock;
	struct ibemu_port_attr ports[IBEMU_CTL_MAX_PORTS];
	struct ibemu_qp *mad_qp[IBEMU_CTL_MAX_PORTS][2];
	/* Index part (bits 8-31) of the keys of kernel consumers' MRs. */
	struct ida mr_indexes;
	/* The control file driving it and its index there; under ibemu_ctl_lock. */
	struct ibemu_ctl_file *owner;
	u8 owner_index;
};

struct ibemu_cq {
	struct ib_cq ibcq;
	spinlock_t lock;
	bool user; /* a verbs program's CQ: the provider holds its entries */
	bool armed;
	u32 size, head, count;
	struct ib_wc *wcs; /* kernel CQs only */
};

struct ibemu_recv_wqe {
	u64 wr_id; /* or its union twin wr_cqe: ib_wc has the same union */
	int num_sge;
	struct ib_sge sge[IBEMU_MAD_QP_MAX_SGE];
};

/* A kernel QP0 or QP1 of one port (the only kernel QPs there are). */
struct ibemu_qp {
	struct ib_qp ibqp;
	struct ibemu_dev *dev;
	u8 port;
	spinlock_t lock;
	enum ib_qp_state state;
	bool sq_sig_all;
	u32 qkey;
	u32 rq_size, rq_head, rq_count;
	struct ibemu_recv_wqe *rq;
};

/* PDs and user contexts hold nothing of ibemu's: ib_core wants a type. */
struct ibemu_pd {
	struct ib_pd ibpd;
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
void ibemu_cq_push(struct ibemu_cq *cq, const struct ib_wc *wc);

/* ibemu_mad_qp.c */
int ibemu_create_mad_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init);
int ibemu_modify_mad_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask);
int ibemu_destroy_mad_qp(struct ib_qp *ibqp);
int ibemu_post_mad_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr);
int ibemu_post_mad_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr);
void ibemu_deliver_mad(struct ibemu_dev *dev, const struct ibemu_ctl_mad_in *in);

/* ibemu_ctl.c: the control device */
int ibemu_ctl_register(void);
void ibemu_ctl_unregister(void);
/* Queues a message for the daemon driving `dev`, naming the device by its
 * index there; false when no daemon drives it. */
bool ibemu_ctl_send(struct ibemu_dev *dev, const void *msg, size_t len);
/* An SMP for the daemon's SMA; returns an enum ibemu_ctl_mad_result or < 0. */
int ibemu_ctl_process_mad(struct ibemu_dev *dev, u8 port, const void *mad,
			  void *reply);

#endif /* IBEMU_H */
