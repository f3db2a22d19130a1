// SPDX-License-Identifier: GPL-2.0
/*
 * The verbs ib_core and ib_uverbs call. A verbs program's QPs, MRs, SRQs and
 * AHs live in its provider and never reach the kernel; what does is its
 * context (for the async event file) and the CQs it binds to a completion
 * channel, whose events only the kernel can put on the channel. Kernel
 * consumers get real PDs, CQs (ibemu_cq.c), DMA and FRWR MRs (ibemu_mr.c),
 * AHs, QP0/QP1 (ibemu_mad_qp.c) and RC, UC and UD QPs (ibemu_kqp.c).
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/module.h>
#include <linux/uaccess.h>
#include <rdma/ib_mad.h>

#include "ibemu.h"

/*
 * The data channel passes these through as the engine's (ibemu_abi.h):
 * they must agree.
 */
static void __maybe_unused abi_checks(void)
{
	BUILD_BUG_ON(IB_ACCESS_LOCAL_WRITE != IBEMU_DATA_ACCESS_LOCAL_WRITE);
	BUILD_BUG_ON(IB_ACCESS_REMOTE_WRITE != IBEMU_DATA_ACCESS_REMOTE_WRITE);
	BUILD_BUG_ON(IB_ACCESS_REMOTE_READ != IBEMU_DATA_ACCESS_REMOTE_READ);
	BUILD_BUG_ON(IB_ACCESS_REMOTE_ATOMIC != IBEMU_DATA_ACCESS_REMOTE_ATOMIC);
	BUILD_BUG_ON(IB_QPT_RC != IBEMU_DATA_QPT_RC);
	BUILD_BUG_ON(IB_QPT_UC != IBEMU_DATA_QPT_UC);
	BUILD_BUG_ON(IB_QPT_UD != IBEMU_DATA_QPT_UD);
	BUILD_BUG_ON(IB_QPS_RESET != IBEMU_DATA_QPS_RESET);
	BUILD_BUG_ON(IB_QPS_ERR != IBEMU_DATA_QPS_ERR);
	BUILD_BUG_ON(IB_QP_STATE != IBEMU_DATA_QP_STATE);
	BUILD_BUG_ON(IB_QP_CUR_STATE != IBEMU_DATA_QP_CUR_STATE);
	BUILD_BUG_ON(IB_QP_EN_SQD_ASYNC_NOTIFY != IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY);
	BUILD_BUG_ON(IB_QP_ACCESS_FLAGS != IBEMU_DATA_QP_ACCESS_FLAGS);
	BUILD_BUG_ON(IB_QP_PKEY_INDEX != IBEMU_DATA_QP_PKEY_INDEX);
	BUILD_BUG_ON(IB_QP_PORT != IBEMU_DATA_QP_PORT);
	BUILD_BUG_ON(IB_QP_QKEY != IBEMU_DATA_QP_QKEY);
	BUILD_BUG_ON(IB_QP_AV != IBEMU_DATA_QP_AV);
	BUILD_BUG_ON(IB_QP_PATH_MTU != IBEMU_DATA_QP_PATH_MTU);
	BUILD_BUG_ON(IB_QP_TIMEOUT != IBEMU_DATA_QP_TIMEOUT);
	BUILD_BUG_ON(IB_QP_RETRY_CNT != IBEMU_DATA_QP_RETRY_CNT);
	BUILD_BUG_ON(IB_QP_RNR_RETRY != IBEMU_DATA_QP_RNR_RETRY);
	BUILD_BUG_ON(IB_QP_RQ_PSN != IBEMU_DATA_QP_RQ_PSN);
	BUILD_BUG_ON(IB_QP_MAX_QP_RD_ATOMIC != IBEMU_DATA_QP_MAX_QP_RD_ATOMIC);
	BUILD_BUG_ON(IB_QP_MIN_RNR_TIMER != IBEMU_DATA_QP_MIN_RNR_TIMER);
	BUILD_BUG_ON(IB_QP_SQ_PSN != IBEMU_DATA_QP_SQ_PSN);
	BUILD_BUG_ON(IB_QP_MAX_DEST_RD_ATOMIC != IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC);
	BUILD_BUG_ON(IB_QP_PATH_MIG_STATE != IBEMU_DATA_QP_PATH_MIG_STATE);
	BUILD_BUG_ON(IB_QP_DEST_QPN != IBEMU_DATA_QP_DEST_QPN);
	BUILD_BUG_ON(IB_SEND_FENCE != IBEMU_DATA_SEND_FENCE);
	BUILD_BUG_ON(IB_SEND_SIGNALED != IBEMU_DATA_SEND_SIGNALED);
	BUILD_BUG_ON(IB_SEND_SOLICITED != IBEMU_DATA_SEND_SOLICITED);
	BUILD_BUG_ON(IB_SEND_INLINE != IBEMU_DATA_SEND_INLINE);
	BUILD_BUG_ON(IB_WC_GENERAL_ERR != IBEMU_DATA_WC_GENERAL_ERR);
	BUILD_BUG_ON((int)IB_EVENT_CQ_ERR != (int)IBEMU_DATA_EVENT_CQ_ERR);
	BUILD_BUG_ON((int)IB_EVENT_QP_FATAL != (int)IBEMU_DATA_EVENT_QP_FATAL);
	BUILD_BUG_ON((int)IB_EVENT_QP_REQ_ERR != (int)IBEMU_DATA_EVENT_QP_REQ_ERR);
	BUILD_BUG_ON((int)IB_EVENT_QP_ACCESS_ERR != (int)IBEMU_DATA_EVENT_QP_ACCESS_ERR);
	BUILD_BUG_ON((int)IB_EVENT_COMM_EST != (int)IBEMU_DATA_EVENT_COMM_EST);
	BUILD_BUG_ON((int)IB_EVENT_SQ_DRAINED != (int)IBEMU_DATA_EVENT_SQ_DRAINED);
	BUILD_BUG_ON((int)IB_EVENT_SRQ_ERR != (int)IBEMU_DATA_EVENT_SRQ_ERR);
	BUILD_BUG_ON((int)IB_EVENT_SRQ_LIMIT_REACHED != (int)IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED);
	BUILD_BUG_ON((int)IB_EVENT_QP_LAST_WQE_REACHED != (int)IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED);
}

/* Kernel QPs and CQs: the daemon's limits, within the data channel's. */
u32 ibemu_max_qp_wr(const struct ibemu_dev *dev)
{
	return min_t(u32, dev->info.max_qp_wr, IBEMU_DATA_MAX_WR);
}

u32 ibemu_max_sge(const struct ibemu_dev *dev)
{
	return min_t(u32, dev->info.max_sge, IBEMU_DATA_MAX_SGE);
}

u32 ibemu_max_cqe(const struct ibemu_dev *dev)
{
	return min_t(u32, dev->info.max_cqe, IBEMU_DATA_MAX_CQE);
}

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
	/* Kernel QPs are numbered from the kernel QPN block. */
	attr->max_qp = min(info->max_qp, info->kernel_qpn_count);
	attr->max_qp_wr = ibemu_max_qp_wr(to_dev(ibdev));
	attr->device_cap_flags = IB_DEVICE_PORT_ACTIVE_EVENT |
				 IB_DEVICE_SYS_IMAGE_GUID |
				 IB_DEVICE_RC_RNR_NAK_GEN;
	/* Fast registration (ibemu_mr.c) up to the daemon's page list. */
	attr->max_fast_reg_page_list_len = info->max_fast_reg_pages;
	if (info->max_fast_reg_pages)
		attr->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
	/* No IBK_LOCAL_DMA_LKEY: each PD gets a DMA MR (get_dma_mr) whose
	 * key is valid in that PD only, as the engine's keys are. */
	attr->kernel_cap_flags = 0;
	attr->max_send_sge = ibemu_max_sge(to_dev(ibdev));
	attr->max_recv_sge = attr->max_send_sge;
	attr->max_sge_rd = attr->max_send_sge;
	attr->max_cq = info->max_cq;
	attr->max_cqe = ibemu_max_cqe(to_dev(ibdev));
	attr->max_mr = info->max_mr;
	attr->max_pd = info->max_pd;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->atomic_cap = IB_ATOMIC_HCA;
	/* Kernel consumers' SRQs (ibemu_srq.c); a program's come from its
	 * provider, which answers its own query_device. */
	attr->max_srq = info->max_srq;
	attr->max_srq_wr = ibemu_max_srq_wr(to_dev(ibdev));
	attr->max_srq_sge = ibemu_max_sge(to_dev(ibdev));
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
	if (mask & (IB_PORT_SHUTDOWN | IB_PORT_INIT_TYPE))
		return -EOPNOTSUPP;
	/* Any PortInfo:CapabilityMask bit, as ConnectX takes them: ib_cm
	 * sets IsCommunicationManagementSupported and fails to add a device
	 * that refuses it, which leaves rdma_cm without a CM (EINVAL). */
	if (props->set_port_cap_mask || props->clr_port_cap_mask)
		ibemu_ctl_port_caps(to_dev(ibdev), port_num,
				    props->set_port_cap_mask,
				    props->clr_port_cap_mask);
	return 0;
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

/* ---- contexts and PDs ---- */

static int ibemu_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
	return 0;
}

static void ibemu_dealloc_ucontext(struct ib_ucontext *uctx)
{
}

/* A program's PD lives in its provider; a kernel consumer's PD is a
 * number its MRs and QPs carry to the engine. */
static int ibemu_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct ibemu_pd *pd = to_pd(ibpd);
	int number;

	if (udata)
		return 0;
	number = ida_alloc_range(&to_dev(ibpd->device)->pd_numbers, 1,
				 INT_MAX, GFP_KERNEL);
	if (number < 0)
		return number;
	pd->number = number;
	return 0;
}

static int ibemu_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct ibemu_pd *pd = to_pd(ibpd);

	if (pd->number)
		ida_free(&to_dev(ibpd->device)->pd_numbers, pd->number);
	return 0;
}

/* ---- MRs (kernel consumers' are in ibemu_mr.c) and AHs ---- */

/* A program's memory regions are registered in its provider. */
static struct ib_mr *ibemu_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
				       u64 virt_addr, int access,
				       struct ib_udata *udata)
{
	return ERR_PTR(-EOPNOTSUPP);
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

/* ---- QPs of kernel consumers: QP0, QP1, RC, UC and UD ---- */

static const char *qp_type_name(enum ib_qp_type type)
{
	switch (type) {
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
	switch (init->qp_type) {
	case IB_QPT_SMI:
	case IB_QPT_GSI:
		return ibemu_create_mad_qp(ibqp, init);
	case IB_QPT_RC:
	case IB_QPT_UC:
	case IB_QPT_UD:
		return ibemu_create_kqp(ibqp, init);
	default:
		/* Consumers report only an errno, often a misleading one:
		 * say what is missing, and whose QP. */
		ibdev_notice_ratelimited(ibqp->device,
			"%s: kernel %s QPs are not supported yet, only RC, UC, UD, QP0 and QP1 (see ibemu's docs/kernel-mode.md)\n",
			ibqp->res.kern_name ? ibqp->res.kern_name : "a kernel consumer",
			qp_type_name(init->qp_type));
		return -EOPNOTSUPP;
	}
}

static int ibemu_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			   int mask, struct ib_udata *udata)
{
	if (to_qp(ibqp)->kqp)
		return ibemu_modify_kqp(ibqp, attr, mask);
	return ibemu_modify_mad_qp(ibqp, attr, mask);
}

static int ibemu_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
			  int mask, struct ib_qp_init_attr *init)
{
	if (to_qp(ibqp)->kqp)
		return ibemu_query_kqp(ibqp, attr, mask, init);
	return -EOPNOTSUPP;
}

static int ibemu_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	if (to_qp(ibqp)->kqp)
		return ibemu_destroy_kqp(ibqp);
	return ibemu_destroy_mad_qp(ibqp);
}

static int ibemu_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			   const struct ib_send_wr **bad_wr)
{
	if (to_qp(ibqp)->kqp)
		return ibemu_post_kqp_send(ibqp, wr, bad_wr);
	return ibemu_post_mad_send(ibqp, wr, bad_wr);
}

static int ibemu_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			   const struct ib_recv_wr **bad_wr)
{
	if (to_qp(ibqp)->kqp)
		return ibemu_post_kqp_recv(ibqp, wr, bad_wr);
	return ibemu_post_mad_recv(ibqp, wr, bad_wr);
}

const struct ib_device_ops ibemu_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = IBEMU_UVERBS_ABI_VERSION,

	.alloc_mr = ibemu_alloc_mr,
	.alloc_pd = ibemu_alloc_pd,
	.alloc_ucontext = ibemu_alloc_ucontext,
	.attach_mcast = ibemu_attach_mcast,
	.create_ah = ibemu_create_ah,
	.create_cq = ibemu_create_cq,
	.create_qp = ibemu_create_qp,
	.create_srq = ibemu_create_srq,
	.dealloc_pd = ibemu_dealloc_pd,
	.dealloc_ucontext = ibemu_dealloc_ucontext,
	.dereg_mr = ibemu_dereg_mr,
	.destroy_ah = ibemu_destroy_ah,
	.destroy_cq = ibemu_destroy_cq,
	.destroy_qp = ibemu_destroy_qp,
	.destroy_srq = ibemu_destroy_srq,
	.detach_mcast = ibemu_detach_mcast,
	.get_dev_fw_str = ibemu_get_dev_fw_str,
	.get_dma_mr = ibemu_get_dma_mr,
	.get_port_immutable = ibemu_get_port_immutable,
	.map_mr_sg = ibemu_map_mr_sg,
	.modify_port = ibemu_modify_port,
	.modify_qp = ibemu_modify_qp,
	.modify_srq = ibemu_modify_srq,
	.poll_cq = ibemu_poll_cq,
	.post_recv = ibemu_post_recv,
	.post_send = ibemu_post_send,
	.post_srq_recv = ibemu_post_srq_recv,
	.process_mad = ibemu_process_mad,
	.query_device = ibemu_query_device,
	.query_ah = ibemu_query_ah,
	.query_gid = ibemu_query_gid,
	.query_pkey = ibemu_query_pkey,
	.query_port = ibemu_query_port,
	.query_qp = ibemu_query_qp,
	.query_srq = ibemu_query_srq,
	.reg_user_mr = ibemu_reg_user_mr,
	.req_notify_cq = ibemu_req_notify_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, ibemu_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, ibemu_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_pd, ibemu_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, ibemu_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, ibemu_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, ibemu_ucontext, ibuc),
};
