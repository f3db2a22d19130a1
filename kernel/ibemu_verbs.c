// SPDX-License-Identifier: GPL-2.0
/*
 * The verbs ib_core and ib_uverbs call. A verbs program's QPs, MRs, SRQs and
 * AHs live in its provider and never reach the kernel; what does is its
 * context (for the async event file) and the CQs it binds to a completion
 * channel, whose events only the kernel can put on the channel. Kernel
 * consumers (ib_mad) get real PDs, CQs, AHs and QP0/QP1.
 */
#include <linux/slab.h>
#include <linux/module.h>
#include <rdma/ib_mad.h>

#include "ibemu.h"

static int ibemu_query_device(struct ib_device *ibdev,
			      struct ib_device_attr *attr,
			      struct ib_udata *udata)
{
	const struct ibemu_ctl_add_device *info = &to_dev(ibdev)->info;

	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = info->fw_ver;
	attr->sys_image_guid = cpu_to_be64(info->sys_image_guid);
	attr->max_mr_size = info->max_mr_size;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_id = info->vendor_id;
	attr->vendor_part_id = info->vendor_part_id;
	attr->hw_ver = info->hw_ver;
	attr->max_qp = info->max_qp;
	attr->max_qp_wr = info->max_qp_wr;
	attr->device_cap_flags = IB_DEVICE_PORT_ACTIVE_EVENT |
				 IB_DEVICE_SYS_IMAGE_GUID |
				 IB_DEVICE_RC_RNR_NAK_GEN;
	/* ib_mad's buffers carry no key: ib_core maps them to virtual
	 * addresses, which is all the MAD QPs use. */
	attr->kernel_cap_flags = IBK_LOCAL_DMA_LKEY;
	attr->max_send_sge = info->max_sge;
	attr->max_recv_sge = info->max_sge;
	attr->max_sge_rd = info->max_sge;
	attr->max_cq = info->max_cq;
	attr->max_cqe = info->max_cqe;
	attr->max_mr = info->max_mr;
	attr->max_pd = info->max_pd;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->atomic_cap = IB_ATOMIC_HCA;
	attr->max_srq = info->max_srq;
	attr->max_srq_wr = info->max_srq_wr;
	attr->max_srq_sge = info->max_sge;
	attr->max_pkeys = IBEMU_CTL_MAX_PKEYS;
	attr->local_ca_ack_delay = 15;
	return 0;
}

static int ibemu_query_port(struct ib_device *ibdev, u32 port_num,
			    struct ib_port_attr *attr)
{
	struct ibemu_dev *dev = to_dev(ibdev);
	struct ibemu_port_attr p;
	unsigned long flags;

	spin_lock_irqsave(&dev->lock, flags);
	p = dev->ports[port_num - 1];
	spin_unlock_irqrestore(&dev->lock, flags);

	/* ib_core zeroed *attr and fills subnet_prefix from GID 0. */
	attr->state = p.state;
	attr->phys_state = p.phys_state;
	attr->max_mtu = p.max_mtu;
	attr->active_mtu = p.active_mtu;
	attr->phys_mtu = ib_mtu_enum_to_int(p.max_mtu);
	attr->gid_tbl_len = 1;
	attr->port_cap_flags = p.port_cap_flags;
	attr->max_msg_sz = 1U << 31;
	attr->pkey_tbl_len = IBEMU_CTL_MAX_PKEYS;
	attr->lid = p.lid;
	attr->sm_lid = p.sm_lid;
	attr->lmc = p.lmc;
	attr->max_vl_num = 1;
	attr->sm_sl = p.sm_sl;
	attr->subnet_timeout = 18;
	attr->active_width = p.active_width;
	attr->active_speed = p.active_speed;
	return 0;
}

static int ibemu_query_gid(struct ib_device *ibdev, u32 port_num, int index,
			   union ib_gid *gid)
{
	struct ibemu_dev *dev = to_dev(ibdev);
	unsigned long flags;

	if (index != 0)
		return -EINVAL;
	spin_lock_irqsave(&dev->lock, flags);
	gid->global.subnet_prefix =
		cpu_to_be64(dev->ports[port_num - 1].subnet_prefix);
	gid->global.interface_id =
		cpu_to_be64(dev->ports[port_num - 1].port_guid);
	spin_unlock_irqrestore(&dev->lock, flags);
	return 0;
}

static int ibemu_query_pkey(struct ib_device *ibdev, u32 port_num, u16 index,
			    u16 *pkey)
{
	struct ibemu_dev *dev = to_dev(ibdev);
	unsigned long flags;

	if (index >= IBEMU_CTL_MAX_PKEYS)
		return -EINVAL;
	spin_lock_irqsave(&dev->lock, flags);
	*pkey = dev->ports[port_num - 1].pkeys[index];
	spin_unlock_irqrestore(&dev->lock, flags);
	return 0;
}

/* ib_umad's issm file sets and clears IsSM through here; the daemon's SMA
 * holds the capability mask, so the change goes there. */
static int ibemu_modify_port(struct ib_device *ibdev, u32 port_num, int mask,
			     struct ib_port_modify *props)
{
	struct ibemu_ctl_port_cap msg = {
		.hdr.type = IBEMU_CTL_PORT_CAP,
		.hdr.length = sizeof(msg),
		.port = port_num,
		.set_mask = props->set_port_cap_mask,
		.clear_mask = props->clr_port_cap_mask,
	};

	if (mask & (IB_PORT_SHUTDOWN | IB_PORT_INIT_TYPE))
		return -EOPNOTSUPP;
	if ((msg.set_mask | msg.clear_mask) & ~IB_PORT_SM)
		return -EOPNOTSUPP;
	if (!msg.set_mask && !msg.clear_mask)
		return 0;
	return ibemu_ctl_send(to_dev(ibdev), &msg, sizeof(msg)) ? 0 : -ENODEV;
}

static int ibemu_get_port_immutable(struct ib_device *ibdev, u32 port_num,
				    struct ib_port_immutable *immutable)
{
	immutable->pkey_tbl_len = IBEMU_CTL_MAX_PKEYS;
	immutable->gid_tbl_len = 1;
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_IB;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static void ibemu_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u64 v = to_dev(ibdev)->info.fw_ver;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u",
		 (u32)(v >> 32), (u32)(v >> 16) & 0xffff, (u32)v & 0xffff);
}

/* The SMPs ib_mad would have an HCA's firmware answer (a directed-route SMP
 * for this very port) and the PMA queries behind sysfs counters go to the
 * daemon, which holds the SMA and the PMA. MADs that came from the fabric
 * (they carry a GRH buffer) were the daemon's already: pass them on. */
static int ibemu_process_mad(struct ib_device *ibdev, int flags, u32 port,
			     const struct ib_wc *in_wc,
			     const struct ib_grh *in_grh,
			     const struct ib_mad *in, struct ib_mad *out,
			     size_t *out_mad_size, u16 *out_mad_pkey_index)
{
	int ret;

	if (in_grh)
		return IB_MAD_RESULT_SUCCESS;
	if (*out_mad_size < IBEMU_CTL_MAD_SIZE)
		return IB_MAD_RESULT_FAILURE;
	ret = ibemu_ctl_process_mad(to_dev(ibdev), port, in, out);
	switch (ret) {
	case IBEMU_CTL_MAD_REPLY:
		*out_mad_size = IBEMU_CTL_MAD_SIZE;
		*out_mad_pkey_index = 0;
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
	case IBEMU_CTL_MAD_CONSUMED:
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_CONSUMED;
	case IBEMU_CTL_MAD_IGNORED:
		return IB_MAD_RESULT_SUCCESS;
	default:
		return IB_MAD_RESULT_FAILURE;
	}
}

/* ---- contexts and PDs: nothing of theirs lives in the kernel ---- */

static int ibemu_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	return 0;
}

static void ibemu_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

static int ibemu_alloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return 0;
}

static int ibemu_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return 0;
}

/* ---- CQs ---- */

static int ibemu_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
			   IBEMU_CREATE_CQ_ARG)
{
	struct ibemu_cq *cq = to_cq(ibcq);

	if (attr->flags || attr->comp_vector >= ibcq->device->num_comp_vectors)
		return -EINVAL;
	if (attr->cqe < 1 || attr->cqe > to_dev(ibcq->device)->info.max_cqe)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	cq->user = from_user != NULL;
	ibcq->cqe = attr->cqe;
	if (cq->user)
		return 0;
	cq->size = attr->cqe;
	cq->wcs = kcalloc(cq->size, sizeof(*cq->wcs), GFP_KERNEL);
	return cq->wcs ? 0 : -ENOMEM;
}

static int ibemu_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	kfree(to_cq(ibcq)->wcs);
	return 0;
}

static int ibemu_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct ibemu_cq *cq = to_cq(ibcq);
	unsigned long flags;
	int n = 0;

	spin_lock_irqsave(&cq->lock, flags);
	while (n < num_entries && cq->count) {
		wc[n++] = cq->wcs[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

/*
 * A user CQ's entries are in its provider, which alone knows when one lands
 * on an armed CQ: it says so with REQ_NOTIFY_CQ, and the kernel's part is to
 * put the event on the CQ's completion channel.
 */
static int ibemu_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct ibemu_cq *cq = to_cq(ibcq);
	unsigned long irqflags;
	int missed = 0;

	if (cq->user) {
		if (ibcq->comp_handler)
			ibcq->comp_handler(ibcq, ibcq->cq_context);
		return 0;
	}
	spin_lock_irqsave(&cq->lock, irqflags);
	cq->armed = true;
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && cq->count)
		missed = 1;
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return missed;
}

/* A completion of a kernel QP; dropped if the CQ is full (an overrun). */
void ibemu_cq_push(struct ibemu_cq *cq, const struct ib_wc *wc)
{
	unsigned long flags;
	bool notify = false;

	spin_lock_irqsave(&cq->lock, flags);
	if (cq->count < cq->size) {
		cq->wcs[(cq->head + cq->count) % cq->size] = *wc;
		cq->count++;
		notify = cq->armed;
		cq->armed = false;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	if (notify && cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
}

/* ---- MRs and AHs of kernel consumers ---- */

/*
 * ib_alloc_pd asks for this MR when a consumer wants an unsafe global rkey
 * (SRP, and iSER when told not to always register); its rkey becomes the
 * PD's, and consumers take 0 for "none" (ib_srp warns). Keys are
 * IBA-shaped: an index in bits 8-31, never 0, and a key byte the consumer
 * may change.
 */
static struct ib_mr *ibemu_get_dma_mr(struct ib_pd *pd, int access)
{
	struct ibemu_dev *dev = to_dev(pd->device);
	struct ib_mr *mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	int index;

	if (!mr)
		return ERR_PTR(-ENOMEM);
	index = ida_alloc_range(&dev->mr_indexes, 1, 0xffffff, GFP_KERNEL);
	if (index < 0) {
		kfree(mr);
		return ERR_PTR(index);
	}
	mr->lkey = (u32)index << 8;
	mr->rkey = mr->lkey;
	return mr;
}

/* A program's memory regions are registered in its provider. */
static struct ib_mr *ibemu_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
				       u64 virt_addr, int access,
				       struct ib_udata *udata)
{
	return ERR_PTR(-EOPNOTSUPP);
}

static int ibemu_dereg_mr(struct ib_mr *mr, struct ib_udata *udata)
{
	ida_free(&to_dev(mr->device)->mr_indexes, mr->lkey >> 8);
	kfree(mr);
	return 0;
}

static int ibemu_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
			   struct ib_udata *udata)
{
	struct ibemu_ah *ah = to_ah(ibah);

	const struct rdma_ah_attr *attr = init->ah_attr;

	if (udata)
		return -EOPNOTSUPP;
	ah->dlid = rdma_ah_get_dlid(attr);
	ah->sl = rdma_ah_get_sl(attr);
	ah->path_bits = rdma_ah_get_path_bits(attr);
	ah->port_num = rdma_ah_get_port_num(attr);
	ah->static_rate = rdma_ah_get_static_rate(attr);
	ah->has_grh = rdma_ah_get_ah_flags(attr) & IB_AH_GRH;
	if (ah->has_grh)
		ah->grh = *rdma_ah_read_grh(attr);
	return 0;
}

/* ib_mad matches a response to its request by the request's AH. */
static int ibemu_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	struct ibemu_ah *ah = to_ah(ibah);

	memset(attr, 0, sizeof(*attr));
	attr->type = ibah->type;
	rdma_ah_set_dlid(attr, ah->dlid);
	rdma_ah_set_sl(attr, ah->sl);
	rdma_ah_set_path_bits(attr, ah->path_bits);
	rdma_ah_set_port_num(attr, ah->port_num);
	rdma_ah_set_static_rate(attr, ah->static_rate);
	if (ah->has_grh)
		rdma_ah_set_grh(attr, &ah->grh.dgid, ah->grh.flow_label,
				ah->grh.sgid_index, ah->grh.hop_limit,
				ah->grh.traffic_class);
	return 0;
}

static int ibemu_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}

/* ---- QPs: only QP0 and QP1 of kernel consumers ---- */

static const char *qp_type_name(enum ib_qp_type type)
{
	switch (type) {
	case IB_QPT_RC:
		return "RC";
	case IB_QPT_UC:
		return "UC";
	case IB_QPT_UD:
		return "UD";
	case IB_QPT_XRC_INI:
		return "XRC initiator";
	case IB_QPT_XRC_TGT:
		return "XRC target";
	case IB_QPT_RAW_PACKET:
		return "raw packet";
	default:
		return "driver-specific";
	}
}

static int ibemu_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
			   struct ib_udata *udata)
{
	if (udata)
		return -EOPNOTSUPP;
	if (init->qp_type != IB_QPT_SMI && init->qp_type != IB_QPT_GSI) {
		/* Consumers report only an errno, often a misleading one
		 * (IPoIB: -ENOMEM): say what is missing, and whose QP. */
		ibdev_notice_ratelimited(ibqp->device,
			"%s: kernel %s QPs are not supported yet, only QP0 and QP1 (see ibemu's docs/kernel-mode.md)\n",
			ibqp->res.kern_name ? ibqp->res.kern_name : "a kernel consumer",
			qp_type_name(init->qp_type));
		return -EOPNOTSUPP;
	}
	return ibemu_create_mad_qp(ibqp, init);
}

static int ibemu_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			   int mask, struct ib_udata *udata)
{
	return ibemu_modify_mad_qp(ibqp, attr, mask);
}

static int ibemu_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	return ibemu_destroy_mad_qp(ibqp);
}

const struct ib_device_ops ibemu_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = IBEMU_UVERBS_ABI_VERSION,

	.alloc_pd = ibemu_alloc_pd,
	.alloc_ucontext = ibemu_alloc_ucontext,
	.create_ah = ibemu_create_ah,
	.create_cq = ibemu_create_cq,
	.create_qp = ibemu_create_qp,
	.dealloc_pd = ibemu_dealloc_pd,
	.dealloc_ucontext = ibemu_dealloc_ucontext,
	.dereg_mr = ibemu_dereg_mr,
	.destroy_ah = ibemu_destroy_ah,
	.destroy_cq = ibemu_destroy_cq,
	.destroy_qp = ibemu_destroy_qp,
	.get_dev_fw_str = ibemu_get_dev_fw_str,
	.get_dma_mr = ibemu_get_dma_mr,
	.get_port_immutable = ibemu_get_port_immutable,
	.modify_port = ibemu_modify_port,
	.modify_qp = ibemu_modify_qp,
	.poll_cq = ibemu_poll_cq,
	.post_recv = ibemu_post_mad_recv,
	.post_send = ibemu_post_mad_send,
	.process_mad = ibemu_process_mad,
	.query_device = ibemu_query_device,
	.query_ah = ibemu_query_ah,
	.query_gid = ibemu_query_gid,
	.query_pkey = ibemu_query_pkey,
	.query_port = ibemu_query_port,
	.reg_user_mr = ibemu_reg_user_mr,
	.req_notify_cq = ibemu_req_notify_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, ibemu_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, ibemu_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_pd, ibemu_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, ibemu_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, ibemu_ucontext, ibuc),
};
