// SPDX-License-Identifier: GPL-2.0
/*
 * QP0 and QP1 of kernel consumers (ib_mad, and through it ib_umad's users:
 * opensm, smpquery, perfquery, ibping). A MAD they send goes to the daemon,
 * which routes it as its own umad clients' MADs; a MAD the daemon has for
 * them lands in the next receive WQE, as a UD receive with a GRH buffer
 * (IBA 11.4.1.2). Buffers are kernel virtual addresses (no DMA device).
 */
#include <linux/slab.h>
#include <linux/string.h>

#include "ibemu.h"

#define MAD_QP_MAX_RECV_WR 4096

static u8 special_qpn(const struct ibemu_qp *qp)
{
	return qp->ibqp.qp_type == IB_QPT_SMI ? 0 : 1;
}

int ibemu_create_mad_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init)
{
	struct ibemu_qp *qp = to_qp(ibqp);
	struct ibemu_dev *dev = to_dev(ibqp->device);
	u8 port = init->port_num;
	int err = 0;

	if (port < 1 || port > dev->info.num_ports)
		return -EINVAL;
	if (init->cap.max_recv_wr > MAD_QP_MAX_RECV_WR ||
	    init->cap.max_recv_sge > IBEMU_MAD_QP_MAX_SGE ||
	    init->cap.max_send_sge > IBEMU_MAD_QP_MAX_SGE)
		return -EINVAL;
	qp->dev = dev;
	qp->port = port;
	qp->state = IB_QPS_RESET;
	qp->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	spin_lock_init(&qp->lock);
	qp->rq_size = max_t(u32, init->cap.max_recv_wr, 1);
	qp->rq = kcalloc(qp->rq_size, sizeof(*qp->rq), GFP_KERNEL);
	if (!qp->rq)
		return -ENOMEM;
	ibqp->qp_num = init->qp_type == IB_QPT_SMI ? 0 : 1;

	spin_lock_irq(&dev->lock);
	if (dev->mad_qp[port - 1][ibqp->qp_num])
		err = -EBUSY;
	else
		dev->mad_qp[port - 1][ibqp->qp_num] = qp;
	spin_unlock_irq(&dev->lock);
	if (err)
		kfree(qp->rq);
	return err;
}

/* Receive WQEs of a QP entering the error state complete as flushed. */
static void flush_receives(struct ibemu_qp *qp)
{
	struct ib_wc wc = {
		.status = IB_WC_WR_FLUSH_ERR,
		.opcode = IB_WC_RECV,
		.qp = &qp->ibqp,
	};

	while (qp->rq_count) {
		wc.wr_id = qp->rq[qp->rq_head].wr_id;
		qp->rq_head = (qp->rq_head + 1) % qp->rq_size;
		qp->rq_count--;
		ibemu_cq_push(to_cq(qp->ibqp.recv_cq), &wc);
	}
}

int ibemu_modify_mad_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask)
{
	struct ibemu_qp *qp = to_qp(ibqp);
	unsigned long flags;

	spin_lock_irqsave(&qp->lock, flags);
	if (mask & IB_QP_QKEY)
		qp->qkey = attr->qkey;
	if (mask & IB_QP_STATE) {
		qp->state = attr->qp_state;
		if (qp->state == IB_QPS_ERR)
			flush_receives(qp);
		else if (qp->state == IB_QPS_RESET)
			qp->rq_head = qp->rq_count = 0;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	return 0;
}

int ibemu_destroy_mad_qp(struct ib_qp *ibqp)
{
	struct ibemu_qp *qp = to_qp(ibqp);
	struct ibemu_dev *dev = qp->dev;

	/* Under dev->lock no delivery is using the QP any more. */
	spin_lock_irq(&dev->lock);
	dev->mad_qp[qp->port - 1][ibqp->qp_num] = NULL;
	spin_unlock_irq(&dev->lock);
	kfree(qp->rq);
	return 0;
}

int ibemu_post_mad_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct ibemu_qp *qp = to_qp(ibqp);
	struct ibemu_recv_wqe *wqe;
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&qp->lock, flags);
	for (; wr; wr = wr->next) {
		if (qp->state == IB_QPS_RESET ||
		    wr->num_sge > IBEMU_MAD_QP_MAX_SGE || wr->num_sge < 0) {
			err = -EINVAL;
			break;
		}
		if (qp->rq_count == qp->rq_size) {
			err = -ENOMEM;
			break;
		}
		wqe = &qp->rq[(qp->rq_head + qp->rq_count) % qp->rq_size];
		wqe->wr_id = wr->wr_id;
		wqe->num_sge = wr->num_sge;
		memcpy(wqe->sge, wr->sg_list, wr->num_sge * sizeof(*wr->sg_list));
		qp->rq_count++;
	}
	spin_unlock_irqrestore(&qp->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}

/* Gathers a send WR's MAD into `mad`; false if it is not one MAD long. */
static bool gather_mad(const struct ib_send_wr *wr, u8 *mad)
{
	size_t done = 0;
	int i;

	for (i = 0; i < wr->num_sge; i++) {
		const struct ib_sge *sge = &wr->sg_list[i];

		if (sge->length > IBEMU_CTL_MAD_SIZE - done)
			return false;
		memcpy(mad + done, (void *)(uintptr_t)sge->addr, sge->length);
		done += sge->length;
	}
	return done == IBEMU_CTL_MAD_SIZE;
}

static int send_one(struct ibemu_qp *qp, const struct ib_send_wr *wr)
{
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct ibemu_ctl_mad_out out = {
		.hdr.type = IBEMU_CTL_MAD_OUT,
		.hdr.length = sizeof(out),
		.port = qp->port,
		.qpn = special_qpn(qp),
	};
	struct ib_wc wc = {
		.wr_id = wr->wr_id,
		.status = IB_WC_SUCCESS,
		.opcode = IB_WC_SEND,
		.qp = &qp->ibqp,
		.port_num = qp->port,
	};

	if (wr->opcode != IB_WR_SEND || !ud->ah ||
	    wr->num_sge > IBEMU_MAD_QP_MAX_SGE)
		return -EINVAL;
	if (!gather_mad(wr, out.mad))
		return -EINVAL;
	out.remote_qpn = ud->remote_qpn;
	out.remote_qkey = ud->remote_qkey;
	out.pkey_index = ud->pkey_index;
	out.dlid = to_ah(ud->ah)->dlid;
	out.sl = to_ah(ud->ah)->sl;
	/* With no daemon the port is down and the MAD is lost on the way,
	 * as on an unplugged cable: a UD send still completes. */
	ibemu_ctl_send(qp->dev, &out, sizeof(out));
	if (qp->sq_sig_all || (wr->send_flags & IB_SEND_SIGNALED))
		ibemu_cq_push(to_cq(qp->ibqp.send_cq), &wc);
	return 0;
}

int ibemu_post_mad_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	struct ibemu_qp *qp = to_qp(ibqp);
	enum ib_qp_state state;
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&qp->lock, flags);
	state = qp->state;
	spin_unlock_irqrestore(&qp->lock, flags);
	for (; wr; wr = wr->next) {
		err = state == IB_QPS_RTS ? send_one(qp, wr) : -EINVAL;
		if (err)
			break;
	}
	if (err)
		*bad_wr = wr;
	return err;
}

/* Scatters GRH and MAD into a receive WQE's buffers. */
static u32 scatter(const struct ibemu_recv_wqe *wqe, const u8 *grh,
		   const u8 *mad)
{
	size_t total = IBEMU_CTL_GRH_SIZE + IBEMU_CTL_MAD_SIZE, done = 0;
	int i;

	for (i = 0; i < wqe->num_sge && done < total; i++) {
		u8 *to = (u8 *)(uintptr_t)wqe->sge[i].addr;
		size_t room = wqe->sge[i].length;

		while (room && done < total) {
			const u8 *from = done < IBEMU_CTL_GRH_SIZE ?
						 grh + done :
						 mad + done - IBEMU_CTL_GRH_SIZE;
			size_t n = done < IBEMU_CTL_GRH_SIZE ?
					   IBEMU_CTL_GRH_SIZE - done :
					   total - done;

			n = min(n, room);
			memcpy(to, from, n);
			to += n;
			room -= n;
			done += n;
		}
	}
	return done;
}

/* Called in process context (a write() of the control device). */
void ibemu_deliver_mad(struct ibemu_dev *dev, const struct ibemu_ctl_mad_in *in)
{
	static const u8 no_grh[IBEMU_CTL_GRH_SIZE];
	struct ib_wc wc = {
		.status = IB_WC_SUCCESS,
		.opcode = IB_WC_RECV,
		.src_qp = in->src_qp,
		.slid = in->slid,
		.sl = in->sl,
		.pkey_index = in->pkey_index,
		.dlid_path_bits = in->dlid_path_bits,
		.port_num = in->port,
		.wc_flags = in->has_grh ? IB_WC_GRH : 0,
	};
	struct ibemu_recv_wqe wqe;
	struct ibemu_qp *qp;
	bool taken = false;

	spin_lock_irq(&dev->lock);
	qp = dev->mad_qp[in->port - 1][in->qpn];
	if (qp) {
		spin_lock(&qp->lock);
		/* A UD QP with no receive WQE drops the packet (IBA 9.7.2). */
		if (qp->state >= IB_QPS_RTR && qp->state <= IB_QPS_SQE &&
		    qp->rq_count) {
			wqe = qp->rq[qp->rq_head];
			qp->rq_head = (qp->rq_head + 1) % qp->rq_size;
			qp->rq_count--;
			taken = true;
		}
		spin_unlock(&qp->lock);
	}
	if (taken) {
		wc.wr_id = wqe.wr_id;
		wc.qp = &qp->ibqp;
		wc.byte_len = scatter(&wqe, in->has_grh ? in->grh : no_grh,
				      in->mad);
		if (wc.byte_len < IBEMU_CTL_GRH_SIZE + IBEMU_CTL_MAD_SIZE)
			wc.status = IB_WC_LOC_LEN_ERR;
		ibemu_cq_push(to_cq(qp->ibqp.recv_cq), &wc);
	}
	spin_unlock_irq(&dev->lock);
}
