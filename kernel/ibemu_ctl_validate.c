// SPDX-License-Identifier: (GPL-2.0 OR MIT)
/*
 * The checks every message written to /dev/ibemu passes before the module
 * acts on it, and those of the data channel's records, which each side
 * applies to what it receives. Plain C with no kernel dependency, so that
 * the same code runs in the daemon and is fuzzed in user space.
 */
#ifdef __KERNEL__
#include <linux/stddef.h>
#else
#include <stddef.h>
#endif
#include "ibemu_ctl_validate.h"

/* QPNs, PSNs and MR handles are 24-bit numbers. */
#define MAX_24_BITS 0xffffffu
#define MR_ACCESS_ALL \
	(IBEMU_DATA_ACCESS_LOCAL_WRITE | IBEMU_DATA_ACCESS_REMOTE_WRITE | \
	 IBEMU_DATA_ACCESS_REMOTE_READ | IBEMU_DATA_ACCESS_REMOTE_ATOMIC)
#define SEND_FLAGS_ALL \
	(IBEMU_DATA_SEND_FENCE | IBEMU_DATA_SEND_SIGNALED | \
	 IBEMU_DATA_SEND_SOLICITED | IBEMU_DATA_SEND_INLINE)
#define WC_FLAGS_ALL \
	(IBEMU_DATA_WC_GRH | IBEMU_DATA_WC_WITH_IMM | \
	 IBEMU_DATA_WC_WITH_INV)
#define MODIFY_QP_MASK_ALL \
	(IBEMU_DATA_QP_STATE | IBEMU_DATA_QP_CUR_STATE | \
	 IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY | IBEMU_DATA_QP_ACCESS_FLAGS | \
	 IBEMU_DATA_QP_PKEY_INDEX | IBEMU_DATA_QP_PORT | IBEMU_DATA_QP_QKEY | \
	 IBEMU_DATA_QP_AV | IBEMU_DATA_QP_PATH_MTU | IBEMU_DATA_QP_TIMEOUT | \
	 IBEMU_DATA_QP_RETRY_CNT | IBEMU_DATA_QP_RNR_RETRY | \
	 IBEMU_DATA_QP_RQ_PSN | IBEMU_DATA_QP_MAX_QP_RD_ATOMIC | \
	 IBEMU_DATA_QP_MIN_RNR_TIMER | IBEMU_DATA_QP_SQ_PSN | \
	 IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC | IBEMU_DATA_QP_PATH_MIG_STATE | \
	 IBEMU_DATA_QP_DEST_QPN)
/* The RDMA READs and atomics in flight a QP may allow (max_qp_rd_atom). */
#define MAX_RD_ATOMIC 16

static int terminated(const char *s, unsigned int size)
{
	unsigned int i;

	for (i = 0; i < size; i++)
		if (!s[i])
			return i > 0;
	return 0;
}

/* Past QP0 and QP1, short of the multicast QPN; or none at all. */
static int qpn_block_ok(__u32 first, __u32 count)
{
	if (!count)
		return !first;
	return first >= 2 && first < IBEMU_CTL_MULTICAST_QPN &&
	       count <= IBEMU_CTL_MULTICAST_QPN - first;
}

static int check_add_device(const struct ibemu_ctl_add_device *m)
{
	if (m->abi_version != IBEMU_CTL_ABI_VERSION)
		return -EINVAL;
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->num_ports < 1 ||
	    m->num_ports > IBEMU_CTL_MAX_PORTS)
		return -EINVAL;
	if (!terminated(m->name, sizeof(m->name)) ||
	    !terminated(m->node_desc, sizeof(m->node_desc)))
		return -EINVAL;
	/* ib_core expands a '%' in a device name into a number. */
	for (const char *c = m->name; *c; c++)
		if (*c == '%' || *c == '/' || *c <= ' ' || *c > '~')
			return -EINVAL;
	if (!m->max_cqe || !m->max_sge)
		return -EINVAL;
	if (!qpn_block_ok(m->kernel_qpn_first, m->kernel_qpn_count))
		return -EINVAL;
	if (m->max_fast_reg_pages > IBEMU_CTL_MAX_FAST_REG_PAGES ||
	    m->reserved2)
		return -EINVAL;
	for (int i = m->num_ports; i < IBEMU_CTL_MAX_PORTS; i++)
		if (m->port_guids[i])
			return -EINVAL;
	return 0;
}

static int check_set_port(const struct ibemu_ctl_set_port *m)
{
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->port < 1 ||
	    m->port > IBEMU_CTL_MAX_PORTS)
		return -EINVAL;
	if (m->state < IBEMU_PORT_DOWN || m->state > IBEMU_PORT_ACTIVE_DEFER)
		return -EINVAL;
	if (m->phys_state < 1 || m->phys_state > 7)
		return -EINVAL;
	if (m->max_mtu < 1 || m->max_mtu > 5 || m->active_mtu < 1 ||
	    m->active_mtu > m->max_mtu)
		return -EINVAL;
	if (m->lmc > 7 || m->sm_sl > 15)
		return -EINVAL;
	return 0;
}

static int check_mad_in(const struct ibemu_ctl_mad_in *m)
{
	if (m->index >= IBEMU_CTL_MAX_DEVICES || m->port < 1 ||
	    m->port > IBEMU_CTL_MAX_PORTS || m->qpn > 1)
		return -EINVAL;
	if (m->sl > 15 || m->has_grh > 1 || m->src_qp > 0xffffff)
		return -EINVAL;
	return 0;
}

static int check_reply(const struct ibemu_ctl_process_mad_reply *m)
{
	if (m->hdr.seq == 0 || m->result > IBEMU_CTL_MAD_REPLY)
		return -EINVAL;
	return 0;
}

int ibemu_ctl_validate(const void *msg, unsigned long len)
{
	const struct ibemu_ctl_hdr *hdr = msg;

	if (len < sizeof(*hdr) || hdr->length != len)
		return -EINVAL;
	switch (hdr->type) {
	case IBEMU_CTL_ADD_DEVICE:
		return len == sizeof(struct ibemu_ctl_add_device) ?
			       check_add_device(msg) :
			       -EINVAL;
	case IBEMU_CTL_SET_PORT:
		return len == sizeof(struct ibemu_ctl_set_port) ?
			       check_set_port(msg) :
			       -EINVAL;
	case IBEMU_CTL_MAD_IN:
		return len == sizeof(struct ibemu_ctl_mad_in) ?
			       check_mad_in(msg) :
			       -EINVAL;
	case IBEMU_CTL_PROCESS_MAD_REPLY:
		return len == sizeof(struct ibemu_ctl_process_mad_reply) ?
			       check_reply(msg) :
			       -EINVAL;
	default:
		return -EINVAL;
	}
}

static int all_zero(const void *p, unsigned long size)
{
	const unsigned char *b = p;
	unsigned long i;

	for (i = 0; i < size; i++)
		if (b[i])
			return 0;
	return 1;
}

/* The QPNs of the data channel's QPs: neither QP0/QP1 nor multicast. */
static int kernel_qpn(__u32 qpn)
{
	return qpn >= 2 && qpn < IBEMU_CTL_MULTICAST_QPN;
}

static int mr_access_ok(__u32 access)
{
	if (access & ~MR_ACCESS_ALL)
		return 0;
	return !(access & (IBEMU_DATA_ACCESS_REMOTE_WRITE |
			   IBEMU_DATA_ACCESS_REMOTE_ATOMIC)) ||
	       (access & IBEMU_DATA_ACCESS_LOCAL_WRITE);
}

static int qp_state_ok(__u8 state)
{
	return state <= IBEMU_DATA_QPS_ERR;
}

/* An unused AV (RC/UC sends) is all zero, which passes with used == 0. */
static int av_ok(const struct ibemu_data_av *av, int used)
{
	if (!all_zero(av->reserved, sizeof(av->reserved)))
		return 0;
	if (av->sl > 15 || av->src_path_bits > 127 || av->is_global > 1 ||
	    av->flow_label > 0xfffff || av->port > IBEMU_CTL_MAX_PORTS)
		return 0;
	return !used || av->port >= 1;
}

static int check_create_cq(const struct ibemu_data_create_cq *r)
{
	if (!r->cq || !r->cqe || r->cqe > IBEMU_DATA_MAX_CQE)
		return -EINVAL;
	return 0;
}

static int check_destroy_cq(const struct ibemu_data_destroy_cq *r)
{
	return r->cq && !r->reserved ? 0 : -EINVAL;
}

static int check_reg_dma_mr(const struct ibemu_data_reg_dma_mr *r)
{
	if ((r->key & 0xff) || !mr_access_ok(r->access) || r->reserved)
		return -EINVAL;
	return 0;
}

static int check_alloc_mr(const struct ibemu_data_alloc_mr *r)
{
	if (!r->max_pages || r->max_pages > IBEMU_CTL_MAX_FAST_REG_PAGES ||
	    r->reserved)
		return -EINVAL;
	return 0;
}

static int check_dereg_mr(const struct ibemu_data_dereg_mr *r)
{
	return r->mr <= MAX_24_BITS && !r->reserved ? 0 : -EINVAL;
}

static int check_create_srq(const struct ibemu_data_create_srq *r)
{
	if (!r->srq || !r->max_wr || r->max_wr > IBEMU_DATA_MAX_WR ||
	    !r->max_sge || r->max_sge > IBEMU_DATA_MAX_SGE ||
	    r->srq_limit > r->max_wr || r->reserved)
		return -EINVAL;
	return 0;
}

static int check_modify_srq(const struct ibemu_data_modify_srq *r)
{
	return r->srq && r->srq_limit <= IBEMU_DATA_MAX_WR ? 0 : -EINVAL;
}

static int check_destroy_srq(const struct ibemu_data_destroy_srq *r)
{
	return r->srq && !r->reserved ? 0 : -EINVAL;
}

static int check_create_qp(const struct ibemu_data_create_qp *r)
{
	if (!kernel_qpn(r->qpn) || !r->send_cq || !r->recv_cq)
		return -EINVAL;
	if (r->qp_type != IBEMU_DATA_QPT_RC &&
	    r->qp_type != IBEMU_DATA_QPT_UC && r->qp_type != IBEMU_DATA_QPT_UD)
		return -EINVAL;
	if (r->max_send_wr > IBEMU_DATA_MAX_WR ||
	    r->max_recv_wr > IBEMU_DATA_MAX_WR ||
	    r->max_send_sge > IBEMU_DATA_MAX_SGE ||
	    r->max_recv_sge > IBEMU_DATA_MAX_SGE ||
	    r->max_inline_data > IBEMU_DATA_MAX_INLINE)
		return -EINVAL;
	/* Receives of a QP on an SRQ come from the SRQ only. */
	if (r->srq && (r->max_recv_wr || r->max_recv_sge))
		return -EINVAL;
	if (r->sq_sig_all > 1 || !all_zero(r->reserved, sizeof(r->reserved)))
		return -EINVAL;
	return 0;
}

static int check_modify_qp(const struct ibemu_data_modify_qp *r)
{
	__u32 mask = r->attr_mask;

	if (!kernel_qpn(r->qpn) || !r->modify_seq || (mask & ~MODIFY_QP_MASK_ALL))
		return -EINVAL;
	if (!all_zero(r->reserved, sizeof(r->reserved)))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_STATE) && !qp_state_ok(r->qp_state))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_CUR_STATE) && !qp_state_ok(r->cur_qp_state))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_EN_SQD_ASYNC_NOTIFY) &&
	    r->en_sqd_async_notify > 1)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_ACCESS_FLAGS) &&
	    (r->access_flags & ~MR_ACCESS_ALL))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_PKEY_INDEX) &&
	    r->pkey_index >= IBEMU_CTL_MAX_PKEYS)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_PORT) &&
	    (r->port < 1 || r->port > IBEMU_CTL_MAX_PORTS))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_AV) && !av_ok(&r->av, 1))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_PATH_MTU) &&
	    (r->path_mtu < 1 || r->path_mtu > 5))
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_TIMEOUT) && r->timeout > 31)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_RETRY_CNT) && r->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_RNR_RETRY) && r->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_RQ_PSN) && r->rq_psn > MAX_24_BITS)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_SQ_PSN) && r->sq_psn > MAX_24_BITS)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_MAX_QP_RD_ATOMIC) &&
	    r->max_rd_atomic > MAX_RD_ATOMIC)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_MAX_DEST_RD_ATOMIC) &&
	    r->max_dest_rd_atomic > MAX_RD_ATOMIC)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_MIN_RNR_TIMER) && r->min_rnr_timer > 31)
		return -EINVAL;
	if ((mask & IBEMU_DATA_QP_DEST_QPN) && r->dest_qpn > MAX_24_BITS)
		return -EINVAL;
	return 0;
}

static int check_destroy_qp(const struct ibemu_data_destroy_qp *r)
{
	return kernel_qpn(r->qpn) && !r->reserved ? 0 : -EINVAL;
}

static int check_mcast(const struct ibemu_data_mcast *r)
{
	if (!kernel_qpn(r->qpn) || r->mgid[0] != 0xff || r->mlid < 0xc000 ||
	    r->mlid > 0xfffe || r->reserved)
		return -EINVAL;
	return 0;
}

static int inline_allowed(__u8 opcode)
{
	switch (opcode) {
	case IBEMU_DATA_WR_RDMA_WRITE:
	case IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM:
	case IBEMU_DATA_WR_SEND:
	case IBEMU_DATA_WR_SEND_WITH_IMM:
	case IBEMU_DATA_WR_SEND_WITH_INV:
		return 1;
	default:
		return 0;
	}
}

static int known_wr_opcode(__u8 opcode)
{
	switch (opcode) {
	case IBEMU_DATA_WR_RDMA_WRITE:
	case IBEMU_DATA_WR_RDMA_WRITE_WITH_IMM:
	case IBEMU_DATA_WR_SEND:
	case IBEMU_DATA_WR_SEND_WITH_IMM:
	case IBEMU_DATA_WR_RDMA_READ:
	case IBEMU_DATA_WR_ATOMIC_CMP_AND_SWP:
	case IBEMU_DATA_WR_ATOMIC_FETCH_AND_ADD:
	case IBEMU_DATA_WR_LOCAL_INV:
	case IBEMU_DATA_WR_SEND_WITH_INV:
	case IBEMU_DATA_WR_REG_MR:
		return 1;
	default:
		return 0;
	}
}

static int fast_reg_ok(const struct ibemu_data_fast_reg *reg)
{
	if (!mr_access_ok(reg->access) || !reg->generation)
		return 0;
	if (reg->page_size < IBEMU_DATA_MIN_PAGE_SIZE ||
	    reg->page_size > IBEMU_DATA_MAX_PAGE_SIZE ||
	    (reg->page_size & (reg->page_size - 1)))
		return 0;
	return reg->iova + reg->length >= reg->iova;
}

unsigned int ibemu_data_send_wqe_length(unsigned int num_sge,
					unsigned int inline_len)
{
	return offsetof(struct ibemu_data_send_wqe, sge) +
	       num_sge * sizeof(struct ibemu_data_sge) +
	       ((inline_len + 7) & ~7u);
}

unsigned int ibemu_data_recv_wqe_length(unsigned int num_sge)
{
	return offsetof(struct ibemu_data_recv_wqe, sge) +
	       num_sge * sizeof(struct ibemu_data_sge);
}

static int check_send_wqe(const struct ibemu_data_send_wqe *r,
			  unsigned long len)
{
	const int is_inline = !!(r->flags & IBEMU_DATA_SEND_INLINE);
	const int no_sge = r->opcode == IBEMU_DATA_WR_LOCAL_INV ||
			   r->opcode == IBEMU_DATA_WR_REG_MR;

	if (!kernel_qpn(r->qpn) || !known_wr_opcode(r->opcode) ||
	    (r->flags & ~SEND_FLAGS_ALL) || r->reserved)
		return -EINVAL;
	if (r->num_sge > IBEMU_DATA_MAX_SGE ||
	    r->inline_len > IBEMU_DATA_MAX_INLINE)
		return -EINVAL;
	if (is_inline ? r->num_sge || !inline_allowed(r->opcode) :
			r->inline_len)
		return -EINVAL;
	if (no_sge && r->num_sge)
		return -EINVAL;
	if (len != ibemu_data_send_wqe_length(r->num_sge, r->inline_len))
		return -EINVAL;
	/* The padding after inline bytes, so that records compare whole. */
	if (is_inline &&
	    !all_zero(r->inline_data + r->inline_len,
		      len - offsetof(struct ibemu_data_send_wqe, inline_data) -
			      r->inline_len))
		return -EINVAL;
	if (r->remote_qpn > MAX_24_BITS || !av_ok(&r->av, 0))
		return -EINVAL;
	if (r->opcode == IBEMU_DATA_WR_REG_MR ? !fast_reg_ok(&r->reg) :
						!all_zero(&r->reg, sizeof(r->reg)))
		return -EINVAL;
	return 0;
}

static int check_recv_wqe(const struct ibemu_data_recv_wqe *r,
			  unsigned long len)
{
	/* A QP's receive queue or an SRQ, never both. */
	if (r->qpn ? !kernel_qpn(r->qpn) || r->srq : !r->srq)
		return -EINVAL;
	if (r->num_sge > IBEMU_DATA_MAX_SGE ||
	    !all_zero(r->reserved, sizeof(r->reserved)))
		return -EINVAL;
	return len == ibemu_data_recv_wqe_length(r->num_sge) ? 0 : -EINVAL;
}

static int known_wc_opcode(__u8 opcode)
{
	switch (opcode) {
	case IBEMU_DATA_WC_SEND:
	case IBEMU_DATA_WC_RDMA_WRITE:
	case IBEMU_DATA_WC_RDMA_READ:
	case IBEMU_DATA_WC_COMP_SWAP:
	case IBEMU_DATA_WC_FETCH_ADD:
	case IBEMU_DATA_WC_LOCAL_INV:
	case IBEMU_DATA_WC_REG_MR:
	case IBEMU_DATA_WC_RECV:
	case IBEMU_DATA_WC_RECV_RDMA_WITH_IMM:
		return 1;
	default:
		return 0;
	}
}

static int check_cqe(const struct ibemu_data_cqe *r)
{
	if (!r->cq || !kernel_qpn(r->qpn) ||
	    r->status > IBEMU_DATA_WC_GENERAL_ERR || !known_wc_opcode(r->opcode))
		return -EINVAL;
	/* imm_or_rkey holds one of the two. */
	if ((r->flags & ~WC_FLAGS_ALL) ||
	    ((r->flags & IBEMU_DATA_WC_WITH_IMM) &&
	     (r->flags & IBEMU_DATA_WC_WITH_INV)))
		return -EINVAL;
	if (r->src_qp > MAX_24_BITS || r->pkey_index >= IBEMU_CTL_MAX_PKEYS ||
	    r->sl > 15 || r->dlid_path_bits > 127 || r->solicited > 1)
		return -EINVAL;
	return all_zero(r->reserved, sizeof(r->reserved)) ? 0 : -EINVAL;
}

static int check_event(const struct ibemu_data_event *r)
{
	if (!all_zero(r->reserved, sizeof(r->reserved)))
		return -EINVAL;
	switch (r->object) {
	case IBEMU_DATA_EVENT_ON_QP:
		if (!kernel_qpn(r->handle) || !qp_state_ok(r->qp_state))
			return -EINVAL;
		switch (r->event) {
		case IBEMU_DATA_EVENT_QP_FATAL:
		case IBEMU_DATA_EVENT_QP_REQ_ERR:
		case IBEMU_DATA_EVENT_QP_ACCESS_ERR:
		case IBEMU_DATA_EVENT_COMM_EST:
		case IBEMU_DATA_EVENT_SQ_DRAINED:
		case IBEMU_DATA_EVENT_QP_LAST_WQE_REACHED:
		case IBEMU_DATA_EVENT_QP_STATE:
			return 0;
		default:
			return -EINVAL;
		}
	case IBEMU_DATA_EVENT_ON_SRQ:
		if (r->event != IBEMU_DATA_EVENT_SRQ_ERR &&
		    r->event != IBEMU_DATA_EVENT_SRQ_LIMIT_REACHED)
			return -EINVAL;
		break;
	case IBEMU_DATA_EVENT_ON_CQ:
		if (r->event != IBEMU_DATA_EVENT_CQ_ERR)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	/* A QP's fields, on an SRQ or a CQ. */
	return r->handle && !r->modify_seq && !r->qp_state ? 0 : -EINVAL;
}

/* A record of a fixed size is its struct exactly. */
#define FIXED(type, check) \
	(len == sizeof(type) ? check((const type *)rec) : -EINVAL)

static int check_to_daemon(const void *rec, unsigned long len, __u16 type)
{
	switch (type) {
	case IBEMU_DATA_CREATE_CQ:
		return FIXED(struct ibemu_data_create_cq, check_create_cq);
	case IBEMU_DATA_DESTROY_CQ:
		return FIXED(struct ibemu_data_destroy_cq, check_destroy_cq);
	case IBEMU_DATA_REG_DMA_MR:
		return FIXED(struct ibemu_data_reg_dma_mr, check_reg_dma_mr);
	case IBEMU_DATA_ALLOC_MR:
		return FIXED(struct ibemu_data_alloc_mr, check_alloc_mr);
	case IBEMU_DATA_DEREG_MR:
		return FIXED(struct ibemu_data_dereg_mr, check_dereg_mr);
	case IBEMU_DATA_CREATE_SRQ:
		return FIXED(struct ibemu_data_create_srq, check_create_srq);
	case IBEMU_DATA_MODIFY_SRQ:
		return FIXED(struct ibemu_data_modify_srq, check_modify_srq);
	case IBEMU_DATA_DESTROY_SRQ:
		return FIXED(struct ibemu_data_destroy_srq, check_destroy_srq);
	case IBEMU_DATA_CREATE_QP:
		return FIXED(struct ibemu_data_create_qp, check_create_qp);
	case IBEMU_DATA_MODIFY_QP:
		return FIXED(struct ibemu_data_modify_qp, check_modify_qp);
	case IBEMU_DATA_DESTROY_QP:
		return FIXED(struct ibemu_data_destroy_qp, check_destroy_qp);
	case IBEMU_DATA_MCAST_ATTACH:
	case IBEMU_DATA_MCAST_DETACH:
		return FIXED(struct ibemu_data_mcast, check_mcast);
	case IBEMU_DATA_SEND_WQE:
		/* Its fixed part first: num_sge and inline_len say the rest. */
		if (len < offsetof(struct ibemu_data_send_wqe, sge))
			return -EINVAL;
		return check_send_wqe(rec, len);
	case IBEMU_DATA_RECV_WQE:
		if (len < offsetof(struct ibemu_data_recv_wqe, sge))
			return -EINVAL;
		return check_recv_wqe(rec, len);
	default:
		return -EINVAL;
	}
}

static int check_to_module(const void *rec, unsigned long len, __u16 type)
{
	switch (type) {
	case IBEMU_DATA_CQE:
		return FIXED(struct ibemu_data_cqe, check_cqe);
	case IBEMU_DATA_EVENT:
		return FIXED(struct ibemu_data_event, check_event);
	default:
		return -EINVAL;
	}
}

int ibemu_data_record_valid(const void *rec, unsigned long len,
			    enum ibemu_data_direction dir)
{
	const struct ibemu_data_hdr *hdr = rec;

	if (len < sizeof(*hdr) || len % 8 || hdr->length != len)
		return -EINVAL;
	if (hdr->index >= IBEMU_CTL_MAX_DEVICES ||
	    !all_zero(hdr->reserved, sizeof(hdr->reserved)))
		return -EINVAL;
	switch (dir) {
	case IBEMU_DATA_TO_DAEMON:
		return check_to_daemon(rec, len, hdr->type);
	case IBEMU_DATA_TO_MODULE:
		return check_to_module(rec, len, hdr->type);
	default:
		return -EINVAL;
	}
}

int ibemu_data_batch_valid(const void *buf, unsigned long len,
			   enum ibemu_data_direction dir)
{
	const unsigned char *p = buf;

	if (!len)
		return -EINVAL;
	while (len) {
		const struct ibemu_data_hdr *hdr = (const void *)p;
		int err;

		if (len < sizeof(*hdr) || hdr->length < sizeof(*hdr) ||
		    hdr->length > len)
			return -EINVAL;
		err = ibemu_data_record_valid(p, hdr->length, dir);
		if (err)
			return err;
		p += hdr->length;
		len -= hdr->length;
	}
	return 0;
}

int ibemu_data_complete_valid(const struct ibemu_data_complete *arg)
{
	if (arg->length < sizeof(struct ibemu_data_hdr) ||
	    arg->length > IBEMU_DATA_MAX_BATCH || arg->length % 8 ||
	    arg->reserved)
		return -EINVAL;
	return 0;
}

int ibemu_data_copy_valid(const struct ibemu_data_copy *arg)
{
	if (!arg->count || arg->count > IBEMU_DATA_MAX_COPY_SEGMENTS ||
	    arg->done)
		return -EINVAL;
	return 0;
}

int ibemu_data_copy_segment_valid(const struct ibemu_data_copy_segment *seg)
{
	if (seg->index >= IBEMU_CTL_MAX_DEVICES || seg->mr > MAX_24_BITS ||
	    seg->reserved)
		return -EINVAL;
	if (seg->direction != IBEMU_DATA_COPY_TO_KERNEL &&
	    seg->direction != IBEMU_DATA_COPY_FROM_KERNEL)
		return -EINVAL;
	if (!seg->length || seg->length > IBEMU_DATA_MAX_COPY_LENGTH)
		return -EINVAL;
	if (seg->iova + (seg->length - 1) < seg->iova ||
	    seg->buffer + (seg->length - 1) < seg->buffer)
		return -EINVAL;
	return 0;
}
