// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel consumers' QPs that the daemon's engine carries out
 * (docs/design/kernel-consumers.md, sections 6.3, 6.5 and 6.8): UD for now
 * (IPoIB's datagram mode); RC and UC come next.
 *
 * The module holds the authoritative shadow of each QP: its state and
 * attributes, and rings of the records its WQEs became, each slot with the
 * wr_id and what its completion reports. Verbs check, update the shadow and
 * queue commands (CREATE_QP, MODIFY_QP, DESTROY_QP, MCAST_*); posts build
 * records in the rings' slots and ring the data channel's doorbell, which
 * allocates nothing. The engine's completions name a WQE by its token: the
 * QP's generation (bumped by each RESET), the queue, and the WQE's number.
 *
 * Locks: dev->obj_mutex (create, modify, destroy, multicast, replay,
 * channel loss) before the QP's spinlock (posts, completions, the shadow)
 * before the channel's. CQ handlers run with none held.
 */
#include <linux/log2.h>
#include <linux/rculist.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "ibemu.h"
#include "ibemu_ctl_validate.h"

/* The QP's generation in a token: 31 bits above the queue bit. */
#define TOKEN_GEN_MASK 0x7fffffffu

struct slot_meta {
	u64 wr_id;
	u16 len; /* bytes of the record in the slot */
	u8 wc_opcode; /* enum ib_wc_opcode of its completion */
	bool signaled;
};

struct ibemu_wq {
	struct ibemu_data_producer prod;
	struct ibemu_kqp *qp;
	bool recv;
	u32 size; /* slots, a power of two */
	u32 max_wr; /* outstanding WQEs at most */
	u32 max_sge;
	u32 slot_bytes;
	/* WQE numbers: the next to post, and the oldest outstanding. */
	u32 head, tail;
	struct slot_meta *meta;
	u8 *recs;
};

struct kqp_mcast {
	struct list_head node;
	union ib_gid gid;
	u16 lid;
};

struct ibemu_kqp {
	struct ibemu_qp *qp;
	struct ibemu_dev *dev;
	spinlock_t lock;
	/* Under lock: */
	enum ib_qp_state state;
	u32 gen;
	u32 modify_seq;
	/* The attributes modify_qp set, for query_qp and the replay. */
	u32 qkey;
	u32 sq_psn;
	u16 pkey_index;
	u8 port;
	bool sq_sig_all;
	u32 pd;
	u32 max_inline;
	struct ibemu_cq *send_cq, *recv_cq;
	struct ibemu_wq sq, rq;
	/* Under dev->obj_mutex: */
	struct list_head mcast;
	struct list_head node; /* dev->kqps */
	struct ibemu_data_cmd *destroy_cmd;
};

struct kqp_event_work {
	struct work_struct work;
	struct ibemu_kqp *k;
	enum ib_event_type event;
};

static inline u64 make_token(const struct ibemu_kqp *k, bool recv, u32 seq)
{
	return ((u64)(k->gen & TOKEN_GEN_MASK) << 33) | ((u64)recv << 32) | seq;
}

static inline void *slot(const struct ibemu_wq *wq, u32 seq)
{
	return wq->recs + (size_t)(seq & (wq->size - 1)) * wq->slot_bytes;
}

static inline struct slot_meta *meta(const struct ibemu_wq *wq, u32 seq)
{
	return &wq->meta[seq & (wq->size - 1)];
}

/* The channel's reader copies a record out (ibemu_data.h's rules). */
static unsigned int wq_emit(struct ibemu_data_producer *p, u32 seq, void *buf,
			    unsigned int room)
{
	struct ibemu_wq *wq = container_of(p, struct ibemu_wq, prod);
	unsigned int len = meta(wq, seq)->len;

	if (len > room)
		return 0;
	memcpy(buf, slot(wq, seq), len);
	return len;
}

static int wq_init(struct ibemu_wq *wq, struct ibemu_kqp *k, bool recv,
		   u32 max_wr, u32 max_sge, u32 slot_bytes)
{
	wq->qp = k;
	wq->recv = recv;
	wq->max_wr = max_wr;
	wq->max_sge = max_sge;
	wq->size = roundup_pow_of_two(max_t(u32, max_wr, 1));
	wq->slot_bytes = slot_bytes;
	wq->meta = kvcalloc(wq->size, sizeof(*wq->meta), GFP_KERNEL);
	wq->recs = kvcalloc(wq->size, slot_bytes, GFP_KERNEL);
	if (!wq->meta || !wq->recs)
		return -ENOMEM;
	ibemu_data_producer_init(&wq->prod, k->dev, wq_emit);
	return 0;
}

static void wq_free(struct ibemu_wq *wq)
{
	kvfree(wq->meta);
	kvfree(wq->recs);
}

/*
 * Completes the outstanding WQEs of a queue in the module (no engine has
 * them): with `status`, signaled sends and every receive, or every WQE when
 * it is an error. Under the QP's lock, with the producer idle. Returns
 * whether the CQ's handler is due.
 */
static bool complete_locally(struct ibemu_kqp *k, struct ibemu_wq *wq,
			     enum ib_wc_status status)
{
	struct ibemu_cq *cq = wq->recv ? k->recv_cq : k->send_cq;
	bool due = false;

	lockdep_assert_held(&k->lock);
	for (; wq->tail != wq->head; wq->tail++) {
		const struct slot_meta *m = meta(wq, wq->tail);
		struct ib_wc wc = {
			.wr_id = m->wr_id,
			.status = status,
			.opcode = m->wc_opcode,
			.qp = &k->qp->ibqp,
			.port_num = k->port,
		};

		if (status == IB_WC_SUCCESS && !wq->recv && !m->signaled)
			continue;
		due |= ibemu_cq_add(cq, &wc);
	}
	return due;
}

/* ---- create, modify, query, destroy ---- */

static u32 send_slot_bytes(u32 max_sge, u32 max_inline)
{
	return max(ibemu_data_send_wqe_length(max_sge, 0),
		   ibemu_data_send_wqe_length(0, max_inline));
}

int ibemu_create_kqp(struct ib_qp *ibqp, struct ib_qp_init_attr *init)
{
	struct ibemu_dev *dev = to_dev(ibqp->device);
	struct ibemu_qp *qp = to_qp(ibqp);
	struct ibemu_data_create_qp create = {
		.hdr.type = IBEMU_DATA_CREATE_QP,
		.hdr.length = sizeof(create),
		.qp_type = IBEMU_DATA_QPT_UD,
	};
	struct ibemu_data_destroy_qp destroy = {
		.hdr.type = IBEMU_DATA_DESTROY_QP,
		.hdr.length = sizeof(destroy),
	};
	struct ib_qp_cap *cap = &init->cap;
	u32 first = dev->info.kernel_qpn_first;
	u32 count = dev->info.kernel_qpn_count;
	struct ibemu_kqp *k;
	int qpn, err;

	if (init->qp_type != IB_QPT_UD)
		return -EOPNOTSUPP;
	if (init->create_flags || init->srq || !init->send_cq || !init->recv_cq)
		return -EINVAL;
	if (to_cq(init->send_cq)->user || to_cq(init->recv_cq)->user)
		return -EINVAL;
	if (cap->max_send_wr > ibemu_max_qp_wr(dev) ||
	    cap->max_recv_wr > ibemu_max_qp_wr(dev) ||
	    cap->max_send_sge > ibemu_max_sge(dev) ||
	    cap->max_recv_sge > ibemu_max_sge(dev) ||
	    cap->max_inline_data > IBEMU_DATA_MAX_INLINE)
		return -EINVAL;
	if (!count)
		return -ENOSPC;

	k = kzalloc(sizeof(*k), GFP_KERNEL);
	if (!k)
		return -ENOMEM;
	k->qp = qp;
	k->dev = dev;
	spin_lock_init(&k->lock);
	INIT_LIST_HEAD(&k->mcast);
	k->state = IB_QPS_RESET;
	k->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	k->pd = to_pd(ibqp->pd)->number;
	k->max_inline = cap->max_inline_data;
	k->send_cq = to_cq(init->send_cq);
	k->recv_cq = to_cq(init->recv_cq);
	k->port = 1;
	err = wq_init(&k->sq, k, false, cap->max_send_wr, cap->max_send_sge,
		      send_slot_bytes(cap->max_send_sge, k->max_inline));
	if (!err)
		err = wq_init(&k->rq, k, true, cap->max_recv_wr,
			      cap->max_recv_sge,
			      ibemu_data_recv_wqe_length(cap->max_recv_sge));
	if (err)
		goto free;

	mutex_lock(&dev->obj_mutex);
	qpn = idr_alloc_cyclic(&dev->qpns, k, first, first + count,
			       GFP_KERNEL);
	if (qpn < 0) {
		err = qpn == -ENOSPC ? -ENOMEM : qpn;
		goto unlock;
	}
	destroy.qpn = qpn;
	k->destroy_cmd = ibemu_data_cmd_alloc(&destroy, sizeof(destroy),
					      GFP_KERNEL);
	if (IS_ERR(k->destroy_cmd)) {
		err = PTR_ERR(k->destroy_cmd);
		goto remove;
	}
	create.qpn = qpn;
	create.pd = k->pd;
	create.send_cq = k->send_cq->handle;
	create.recv_cq = k->recv_cq->handle;
	create.max_send_wr = cap->max_send_wr;
	create.max_recv_wr = cap->max_recv_wr;
	create.max_send_sge = cap->max_send_sge;
	create.max_recv_sge = cap->max_recv_sge;
	create.max_inline_data = k->max_inline;
	create.sq_sig_all = k->sq_sig_all;
	err = ibemu_data_queue_command(dev, &create, sizeof(create),
				       GFP_KERNEL);
	if (err)
		goto free_cmd;
	list_add_tail(&k->node, &dev->kqps);
	qp->dev = dev;
	qp->kqp = k;
	ibqp->qp_num = qpn;
	mutex_unlock(&dev->obj_mutex);
	/* What was asked is what there is (the rings may be larger). */
	return 0;

free_cmd:
	ibemu_data_cmd_free(k->destroy_cmd);
remove:
	idr_remove(&dev->qpns, qpn);
unlock:
	mutex_unlock(&dev->obj_mutex);
free:
	wq_free(&k->sq);
	wq_free(&k->rq);
	kfree(k);
	return err;
}

/* The attributes a kernel QP's modify may name (IB_QP_ALT_PATH, IB_QP_CAP
 * and IB_QP_RATE_LIMIT are not among them). */
#define KQP_MODIFY_MASK                                                      \
	(IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_EN_SQD_ASYNC_NOTIFY |          \
	 IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY |    \
	 IB_QP_AV | IB_QP_PATH_MTU | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |        \
	 IB_QP_RNR_RETRY | IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC |            \
	 IB_QP_PATH_MIG_STATE | IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN |          \
	 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_DEST_QPN)

static void fill_av(struct ibemu_data_av *av, const struct ibemu_ah *ah)
{
	memset(av, 0, sizeof(*av));
	av->dlid = ah->dlid;
	av->sl = ah->sl & 0xf;
	av->src_path_bits = ah->path_bits & 0x7f;
	av->port = ah->port_num <= IBEMU_CTL_MAX_PORTS ? ah->port_num : 0;
	av->is_global = ah->has_grh;
	if (ah->has_grh) {
		memcpy(av->dgid, ah->grh.dgid.raw, sizeof(av->dgid));
		av->flow_label = ah->grh.flow_label & 0xfffff;
		av->sgid_index = ah->grh.sgid_index;
		av->hop_limit = ah->grh.hop_limit;
		av->traffic_class = ah->grh.traffic_class;
	}
}

static void fill_av_attr(struct ibemu_data_av *av,
			 const struct rdma_ah_attr *attr)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(attr);

	memset(av, 0, sizeof(*av));
	av->dlid = rdma_ah_get_dlid(attr);
	av->sl = rdma_ah_get_sl(attr) & 0xf;
	av->src_path_bits = rdma_ah_get_path_bits(attr) & 0x7f;
	av->port = rdma_ah_get_port_num(attr);
	if (rdma_ah_get_ah_flags(attr) & IB_AH_GRH) {
		av->is_global = 1;
		memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
		av->flow_label = grh->flow_label & 0xfffff;
		av->sgid_index = grh->sgid_index;
		av->hop_limit = grh->hop_limit;
		av->traffic_class = grh->traffic_class;
	}
}

/* Range checks ib_modify_qp_is_ok() leaves to the driver. */
static int check_attr(struct ibemu_dev *dev, const struct ib_qp_attr *attr,
		      int mask, u8 qp_port)
{
	u8 port = (mask & IB_QP_PORT) ? attr->port_num : qp_port;
	enum ib_mtu port_max_mtu = IB_MTU_4096;
	unsigned long flags;

	if ((mask & IB_QP_PORT) &&
	    (attr->port_num < 1 || attr->port_num > dev->info.num_ports))
		return -EINVAL;
	if (port >= 1 && port <= dev->info.num_ports) {
		spin_lock_irqsave(&dev->lock, flags);
		port_max_mtu = dev->ports[port - 1].max_mtu;
		spin_unlock_irqrestore(&dev->lock, flags);
	}
	if ((mask & IB_QP_PKEY_INDEX) && attr->pkey_index >= IBEMU_CTL_MAX_PKEYS)
		return -EINVAL;
	if ((mask & IB_QP_PATH_MTU) &&
	    (attr->path_mtu < IB_MTU_256 || attr->path_mtu > port_max_mtu))
		return -EINVAL;
	if ((mask & IB_QP_TIMEOUT) && attr->timeout > 31)
		return -EINVAL;
	if ((mask & IB_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IB_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IB_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return -EINVAL;
	if ((mask & IB_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16)
		return -EINVAL;
	if ((mask & IB_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16)
		return -EINVAL;
	if ((mask & IB_QP_RQ_PSN) && attr->rq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_SQ_PSN) && attr->sq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_EN_SQD_ASYNC_NOTIFY) && attr->en_sqd_async_notify > 1)
		return -EINVAL;
	/* IB_QP_PATH_MIG_STATE: any value (there is one path, migrated). */
	if (mask & IB_QP_AV) {
		u32 port = rdma_ah_get_port_num(&attr->ah_attr);

		if (port < 1 || port > dev->info.num_ports)
			return -EINVAL;
	}
	return 0;
}

static void fill_modify(struct ibemu_data_modify_qp *r, u32 qpn, u32 seq,
			const struct ib_qp_attr *attr, int mask)
{
	memset(r, 0, sizeof(*r));
	r->hdr.type = IBEMU_DATA_MODIFY_QP;
	r->hdr.length = sizeof(*r);
	r->qpn = qpn;
	/* Engine and kernel share the bits (checked at build time); the
	 * migration state has no value: there is one path, migrated. */
	r->attr_mask = mask & KQP_MODIFY_MASK;
	r->modify_seq = seq;
	if (mask & IB_QP_STATE)
		r->qp_state = attr->qp_state;
	if (mask & IB_QP_CUR_STATE)
		r->cur_qp_state = attr->cur_qp_state;
	if (mask & IB_QP_EN_SQD_ASYNC_NOTIFY)
		r->en_sqd_async_notify = attr->en_sqd_async_notify;
	if (mask & IB_QP_ACCESS_FLAGS)
		r->access_flags = attr->qp_access_flags &
				  (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC);
	if (mask & IB_QP_PKEY_INDEX)
		r->pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		r->port = attr->port_num;
	if (mask & IB_QP_QKEY)
		r->qkey = attr->qkey;
	if (mask & IB_QP_AV)
		fill_av_attr(&r->av, &attr->ah_attr);
	if (mask & IB_QP_PATH_MTU)
		r->path_mtu = attr->path_mtu;
	if (mask & IB_QP_TIMEOUT)
		r->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		r->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		r->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		r->rq_psn = attr->rq_psn;
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		r->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		r->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		r->sq_psn = attr->sq_psn;
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		r->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		r->dest_qpn = attr->dest_qp_num;
}

/* Empties the rings without completions (a move to RESET). */
static void reset_queues(struct ibemu_kqp *k)
{
	struct ibemu_wq *wqs[] = { &k->sq, &k->rq };
	int i;

	lockdep_assert_held(&k->lock);
	for (i = 0; i < ARRAY_SIZE(wqs); i++) {
		ibemu_data_producer_stop(&wqs[i]->prod);
		wqs[i]->head = wqs[i]->tail = 0;
		wqs[i]->prod.posted = wqs[i]->prod.delivered = 0;
	}
	k->gen++; /* completions of the old WQEs are stale */
}

static bool channel_open(struct ibemu_dev *dev)
{
	return rcu_access_pointer(dev->chan) != NULL;
}

int ibemu_modify_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_dev *dev = k->dev;
	struct ibemu_data_modify_qp rec;
	enum ib_qp_state cur, next;
	bool sdue = false, rdue = false;
	int err;

	if (mask & ~KQP_MODIFY_MASK)
		return -EOPNOTSUPP;
	mutex_lock(&dev->obj_mutex);
	err = check_attr(dev, attr, mask, k->port);
	if (err)
		goto out;
	spin_lock_irq(&k->lock);
	cur = k->state;
	spin_unlock_irq(&k->lock);
	if ((mask & IB_QP_CUR_STATE) && attr->cur_qp_state != cur) {
		err = -EINVAL;
		goto out;
	}
	next = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask)) {
		err = -EINVAL;
		goto out;
	}
	fill_modify(&rec, ibqp->qp_num, k->modify_seq + 1, attr, mask);
	err = ibemu_data_queue_command(dev, &rec, sizeof(rec), GFP_KERNEL);
	if (err)
		goto out;

	spin_lock_irq(&k->lock);
	k->modify_seq++;
	if (mask & IB_QP_QKEY)
		k->qkey = attr->qkey;
	if (mask & IB_QP_PKEY_INDEX)
		k->pkey_index = attr->pkey_index;
	if (mask & IB_QP_PORT)
		k->port = attr->port_num;
	if (mask & IB_QP_SQ_PSN)
		k->sq_psn = attr->sq_psn;
	k->state = next;
	if (next == IB_QPS_RESET) {
		reset_queues(k);
	} else if (next == IB_QPS_ERR && !channel_open(dev)) {
		/* No engine to flush them: the module does (design 6.8). */
		sdue = complete_locally(k, &k->sq, IB_WC_WR_FLUSH_ERR);
		rdue = complete_locally(k, &k->rq, IB_WC_WR_FLUSH_ERR);
	}
	spin_unlock_irq(&k->lock);
out:
	mutex_unlock(&dev->obj_mutex);
	if (sdue)
		ibemu_cq_fire(k->send_cq);
	if (rdue)
		ibemu_cq_fire(k->recv_cq);
	return err;
}

int ibemu_query_kqp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		    struct ib_qp_init_attr *init)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	unsigned long flags;

	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	spin_lock_irqsave(&k->lock, flags);
	attr->qp_state = k->state;
	attr->cur_qp_state = k->state;
	attr->qkey = k->qkey;
	attr->sq_psn = k->sq_psn;
	attr->pkey_index = k->pkey_index;
	attr->port_num = k->port;
	spin_unlock_irqrestore(&k->lock, flags);
	attr->path_mtu = IB_MTU_4096;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->cap.max_send_wr = k->sq.max_wr;
	attr->cap.max_recv_wr = k->rq.max_wr;
	attr->cap.max_send_sge = k->sq.max_sge;
	attr->cap.max_recv_sge = k->rq.max_sge;
	attr->cap.max_inline_data = k->max_inline;
	init->qp_type = ibqp->qp_type;
	init->send_cq = &k->send_cq->ibcq;
	init->recv_cq = &k->recv_cq->ibcq;
	init->cap = attr->cap;
	init->sq_sig_type = k->sq_sig_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	init->port_num = k->port;
	return 0;
}

/* Does not wait for the daemon: the engine's QP goes when DESTROY_QP is
 * read, and what the daemon still says of it is dropped. */
int ibemu_destroy_kqp(struct ib_qp *ibqp)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_dev *dev = k->dev;
	struct kqp_mcast *m, *next;

	mutex_lock(&dev->obj_mutex);
	idr_remove(&dev->qpns, ibqp->qp_num);
	list_del(&k->node);
	spin_lock_irq(&k->lock);
	ibemu_data_producer_stop(&k->sq.prod);
	ibemu_data_producer_stop(&k->rq.prod);
	spin_unlock_irq(&k->lock);
	ibemu_data_cmd_submit(dev, k->destroy_cmd);
	mutex_unlock(&dev->obj_mutex);
	/* No COMPLETE still holds it, and its events have run. */
	synchronize_rcu();
	flush_workqueue(dev->event_wq);
	/* wc.qp must not dangle (as HCAs clean a destroyed QP's CQEs). */
	ibemu_cq_purge_qp(k->send_cq, ibqp);
	if (k->recv_cq != k->send_cq)
		ibemu_cq_purge_qp(k->recv_cq, ibqp);
	list_for_each_entry_safe(m, next, &k->mcast, node)
		kfree(m);
	wq_free(&k->sq);
	wq_free(&k->rq);
	to_qp(ibqp)->kqp = NULL;
	kfree(k);
	return 0;
}

/* ---- posting ---- */

#define KQP_SEND_FLAGS \
	(IB_SEND_FENCE | IB_SEND_SIGNALED | IB_SEND_SOLICITED | IB_SEND_INLINE)

/* Builds a UD send's record in its slot; 0 or -EINVAL. */

/* A WR's scatter/gather list as the record carries it. */
static void copy_sges(struct ibemu_data_sge *to, const struct ib_sge *from,
		      int num_sge)
{
	int i;

	for (i = 0; i < num_sge; i++) {
		to[i].addr = from[i].addr;
		to[i].length = from[i].length;
		to[i].lkey = from[i].lkey;
	}
}
static int build_send(struct ibemu_kqp *k, const struct ib_send_wr *wr,
		      u32 seq)
{
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct ibemu_data_send_wqe *r = slot(&k->sq, seq);
	struct slot_meta *m = meta(&k->sq, seq);
	bool is_inline = wr->send_flags & IB_SEND_INLINE;
	unsigned int len, total = 0;
	u8 opcode;
	int i;

	if (wr->send_flags & ~KQP_SEND_FLAGS)
		return -EINVAL;
	switch (wr->opcode) {
	case IB_WR_SEND:
		opcode = IBEMU_DATA_WR_SEND;
		break;
	case IB_WR_SEND_WITH_IMM:
		opcode = IBEMU_DATA_WR_SEND_WITH_IMM;
		break;
	default:
		return -EINVAL;
	}
	if (!ud->ah || wr->num_sge < 0)
		return -EINVAL;
	if (is_inline) {
		for (i = 0; i < wr->num_sge; i++) {
			if (wr->sg_list[i].length > k->max_inline - total)
				return -EINVAL;
			total += wr->sg_list[i].length;
		}
		len = ibemu_data_send_wqe_length(0, total);
	} else {
		if (wr->num_sge > k->sq.max_sge)
			return -EINVAL;
		len = ibemu_data_send_wqe_length(wr->num_sge, 0);
	}
	memset(r, 0, len);
	r->hdr.type = IBEMU_DATA_SEND_WQE;
	r->hdr.length = len;
	r->token = make_token(k, false, seq);
	r->qpn = k->qp->ibqp.qp_num;
	r->flags = wr->send_flags & KQP_SEND_FLAGS;
	r->opcode = opcode;
	if (wr->opcode == IB_WR_SEND_WITH_IMM)
		r->imm_or_rkey = (__force u32)wr->ex.imm_data;
	r->remote_qpn = ud->remote_qpn & 0xffffff;
	r->remote_qkey = ud->remote_qkey;
	fill_av(&r->av, to_ah(ud->ah));
	if (is_inline) {
		/* SGE addresses are kernel virtual addresses (no DMA
		 * device), copied now: the WR's buffers are free on return. */
		total = 0;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(r->inline_data + total,
			       (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			total += wr->sg_list[i].length;
		}
		r->inline_len = total;
	} else {
		r->num_sge = wr->num_sge;
		copy_sges(r->sge, wr->sg_list, wr->num_sge);
	}
	m->wr_id = wr->wr_id;
	m->len = len;
	m->wc_opcode = IB_WC_SEND;
	m->signaled = k->sq_sig_all || (wr->send_flags & IB_SEND_SIGNALED);
	return 0;
}

static bool send_state_ok(enum ib_qp_state s)
{
	return s == IB_QPS_RTS || s == IB_QPS_SQD || s == IB_QPS_SQE ||
	       s == IB_QPS_ERR;
}

int ibemu_post_kqp_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
			const struct ib_send_wr **bad_wr)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_wq *sq = &k->sq;
	unsigned long flags;
	bool due = false;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&k->lock, flags);
	start = sq->head;
	for (; wr; wr = wr->next) {
		if (!send_state_ok(k->state)) {
			err = -EINVAL;
			break;
		}
		if (sq->head - sq->tail >= sq->max_wr) {
			err = -ENOMEM;
			break;
		}
		err = build_send(k, wr, sq->head);
		if (err)
			break;
		sq->head++;
	}
	/*
	 * With no daemon a datagram is lost on the way, as on an unplugged
	 * cable, and the send completes (design 6.8); in ERR it flushes.
	 */
	if (sq->head != start && !ibemu_data_ring_doorbell(&sq->prod, sq->head))
		due = complete_locally(k, sq, k->state == IB_QPS_ERR ?
					      IB_WC_WR_FLUSH_ERR :
					      IB_WC_SUCCESS);
	spin_unlock_irqrestore(&k->lock, flags);
	if (due)
		ibemu_cq_fire(k->send_cq);
	if (err)
		*bad_wr = wr;
	return err;
}

int ibemu_post_kqp_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
			const struct ib_recv_wr **bad_wr)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct ibemu_wq *rq = &k->rq;
	unsigned long flags;
	bool due = false;
	u32 start;
	int err = 0;

	spin_lock_irqsave(&k->lock, flags);
	start = rq->head;
	for (; wr; wr = wr->next) {
		struct ibemu_data_recv_wqe *r = slot(rq, rq->head);
		struct slot_meta *m = meta(rq, rq->head);
		unsigned int len;

		if (k->state == IB_QPS_RESET || wr->num_sge < 0 ||
		    wr->num_sge > rq->max_sge) {
			err = -EINVAL;
			break;
		}
		if (rq->head - rq->tail >= rq->max_wr) {
			err = -ENOMEM;
			break;
		}
		len = ibemu_data_recv_wqe_length(wr->num_sge);
		memset(r, 0, len);
		r->hdr.type = IBEMU_DATA_RECV_WQE;
		r->hdr.length = len;
		r->token = make_token(k, true, rq->head);
		r->qpn = ibqp->qp_num;
		r->num_sge = wr->num_sge;
		copy_sges(r->sge, wr->sg_list, wr->num_sge);
		m->wr_id = wr->wr_id;
		m->len = len;
		m->wc_opcode = IB_WC_RECV;
		m->signaled = true;
		rq->head++;
	}
	/* With no daemon receives wait for the next one (its replay), or
	 * flush in ERR. */
	if (rq->head != start &&
	    !ibemu_data_ring_doorbell(&rq->prod, rq->head) &&
	    k->state == IB_QPS_ERR)
		due = complete_locally(k, rq, IB_WC_WR_FLUSH_ERR);
	spin_unlock_irqrestore(&k->lock, flags);
	if (due)
		ibemu_cq_fire(k->recv_cq);
	if (err)
		*bad_wr = wr;
	return err;
}

/* ---- multicast ---- */

static int mcast_cmd(struct ibemu_kqp *k, u16 type, const union ib_gid *gid,
		     u16 lid, struct ibemu_data_cmd **cmd)
{
	struct ibemu_data_mcast rec = {
		.hdr.type = type,
		.hdr.length = sizeof(rec),
		.qpn = k->qp->ibqp.qp_num,
		.mlid = lid,
	};

	memcpy(rec.mgid, gid->raw, sizeof(rec.mgid));
	if (cmd) {
		*cmd = ibemu_data_cmd_alloc(&rec, sizeof(rec), GFP_KERNEL);
		return PTR_ERR_OR_ZERO(*cmd);
	}
	return ibemu_data_queue_command(k->dev, &rec, sizeof(rec), GFP_KERNEL);
}

static struct kqp_mcast *find_mcast(struct ibemu_kqp *k,
				    const union ib_gid *gid, u16 lid)
{
	struct kqp_mcast *m;

	list_for_each_entry(m, &k->mcast, node)
		if (m->lid == lid && !memcmp(m->gid.raw, gid->raw, 16))
			return m;
	return NULL;
}

static int mcast_check(struct ib_qp *ibqp, const union ib_gid *gid, u16 lid)
{
	if (!to_qp(ibqp)->kqp || ibqp->qp_type != IB_QPT_UD)
		return -EOPNOTSUPP;
	if (lid < 0xc000 || lid > 0xfffe || gid->raw[0] != 0xff)
		return -EINVAL;
	return 0;
}

int ibemu_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct kqp_mcast *m;
	int err = mcast_check(ibqp, gid, lid);

	if (err)
		return err;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->gid = *gid;
	m->lid = lid;
	mutex_lock(&k->dev->obj_mutex);
	if (find_mcast(k, gid, lid))
		err = -EEXIST;
	else
		err = mcast_cmd(k, IBEMU_DATA_MCAST_ATTACH, gid, lid, NULL);
	if (!err)
		list_add_tail(&m->node, &k->mcast);
	mutex_unlock(&k->dev->obj_mutex);
	if (err)
		kfree(m);
	return err;
}

int ibemu_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	struct ibemu_kqp *k = to_qp(ibqp)->kqp;
	struct kqp_mcast *m;
	int err = mcast_check(ibqp, gid, lid);

	if (err)
		return err;
	mutex_lock(&k->dev->obj_mutex);
	m = find_mcast(k, gid, lid);
	if (!m)
		err = -ENOENT;
	else
		err = mcast_cmd(k, IBEMU_DATA_MCAST_DETACH, gid, lid, NULL);
	if (!err)
		list_del(&m->node);
	mutex_unlock(&k->dev->obj_mutex);
	if (!err)
		kfree(m);
	return err;
}

/* ---- what the daemon hands back ---- */

static u8 recv_wc_opcode(u8 opcode)
{
	return opcode == IBEMU_DATA_WC_RECV_RDMA_WITH_IMM ?
		       IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV;
}

void ibemu_kqp_cqe(struct ibemu_dev *dev, const struct ibemu_data_cqe *c,
		   struct list_head *fire)
{
	u32 gen = c->token >> 33, seq = (u32)c->token;
	bool recv = (c->token >> 32) & 1;
	struct ibemu_kqp *k = idr_find(&dev->qpns, c->qpn);
	struct ibemu_wq *wq;
	struct ibemu_cq *cq;
	struct slot_meta *m;
	unsigned long flags;
	struct ib_wc wc;
	bool due;

	if (!k)
		goto drop;
	wq = recv ? &k->rq : &k->sq;
	cq = recv ? k->recv_cq : k->send_cq;
	spin_lock_irqsave(&k->lock, flags);
	/* Only a WQE the engine got: outstanding and delivered. */
	if (gen != (k->gen & TOKEN_GEN_MASK) || cq->handle != c->cq ||
	    seq - wq->tail >= wq->head - wq->tail ||
	    seq - wq->tail >= READ_ONCE(wq->prod.delivered) - wq->tail) {
		spin_unlock_irqrestore(&k->lock, flags);
		goto drop;
	}
	m = meta(wq, seq);
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = m->wr_id;
	wc.status = c->status;
	wc.opcode = recv ? recv_wc_opcode(c->opcode) : m->wc_opcode;
	wc.vendor_err = c->vendor_err;
	wc.byte_len = c->byte_len;
	wc.qp = &k->qp->ibqp;
	if (c->flags & IBEMU_DATA_WC_WITH_IMM) {
		wc.wc_flags |= IB_WC_WITH_IMM;
		wc.ex.imm_data = (__force __be32)c->imm_or_rkey;
	} else if (c->flags & IBEMU_DATA_WC_WITH_INV) {
		wc.wc_flags |= IB_WC_WITH_INVALIDATE;
		wc.ex.invalidate_rkey = c->imm_or_rkey;
	}
	if (c->flags & IBEMU_DATA_WC_GRH)
		wc.wc_flags |= IB_WC_GRH;
	wc.src_qp = c->src_qp;
	wc.pkey_index = c->pkey_index;
	wc.slid = c->slid;
	wc.sl = c->sl;
	wc.dlid_path_bits = c->dlid_path_bits;
	wc.port_num = k->port;
	/* It and the unsignaled sends before it are done. */
	wq->tail = seq + 1;
	due = ibemu_cq_add_solicited(cq, &wc, c->solicited);
	spin_unlock_irqrestore(&k->lock, flags);
	if (due && !cq->fire) {
		cq->fire = true;
		list_add_tail(&cq->fire_node, fire);
	}
	return;
drop:
	atomic_inc(&dev->dropped_records);
}

static void event_work(struct work_struct *work)
{
	struct kqp_event_work *w = container_of(work, struct kqp_event_work,
						work);
	struct ib_qp *ibqp = &w->k->qp->ibqp;
	struct ib_event ev = {
		.device = ibqp->device,
		.element.qp = ibqp,
		.event = w->event,
	};

	if (ibqp->event_handler)
		ibqp->event_handler(&ev, ibqp->qp_context);
	kfree(w);
}

void ibemu_kqp_event(struct ibemu_dev *dev, const struct ibemu_data_event *e)
{
	struct kqp_event_work *w;
	struct ibemu_kqp *k;
	unsigned long flags;

	/* No SRQ or CQ of the engine raises events yet. */
	if (e->object != IBEMU_DATA_EVENT_ON_QP)
		goto drop;
	k = idr_find(&dev->qpns, e->handle);
	if (!k)
		goto drop;
	spin_lock_irqsave(&k->lock, flags);
	/* A state the ULP has not changed since (else the engine's news
	 * is older than the ULP's modify, which wins). */
	if (e->modify_seq == k->modify_seq && k->state != IB_QPS_RESET)
		k->state = e->qp_state;
	spin_unlock_irqrestore(&k->lock, flags);
	if (e->event == IBEMU_DATA_EVENT_QP_STATE)
		return;
	w = kmalloc(sizeof(*w), GFP_ATOMIC);
	if (!w)
		goto drop;
	INIT_WORK(&w->work, event_work);
	w->k = k;
	w->event = e->event;
	queue_work(dev->event_wq, &w->work);
	return;
drop:
	atomic_inc(&dev->dropped_records);
}

/* ---- daemon loss and replay (design 6.8) ---- */

void ibemu_kqp_channel_lost(struct ibemu_dev *dev)
{
	struct ibemu_kqp *k;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(k, &dev->kqps, node) {
		bool sdue, rdue = false;

		spin_lock_irq(&k->lock);
		if (k->state == IB_QPS_ERR) {
			/* The engine that would have flushed them is gone. */
			sdue = complete_locally(k, &k->sq, IB_WC_WR_FLUSH_ERR);
			rdue = complete_locally(k, &k->rq, IB_WC_WR_FLUSH_ERR);
		} else {
			/* Datagrams lost on a dead link; receives stay
			 * posted for the next daemon. */
			sdue = complete_locally(k, &k->sq, IB_WC_SUCCESS);
		}
		spin_unlock_irq(&k->lock);
		if (sdue)
			ibemu_cq_fire(k->send_cq);
		if (rdue)
			ibemu_cq_fire(k->recv_cq);
	}
}

static void submit(struct ibemu_dev *dev, const void *rec, size_t len)
{
	struct ibemu_data_cmd *cmd = ibemu_data_cmd_alloc(rec, len, GFP_KERNEL);

	if (IS_ERR(cmd)) {
		ibdev_err(&dev->ibdev, "a kernel QP was not replayed: out of memory\n");
		return;
	}
	ibemu_data_cmd_submit(dev, cmd);
}

/* One step of the drive from RESET to the saved state. */
static void replay_modify(struct ibemu_kqp *k, enum ib_qp_state state,
			  int mask)
{
	struct ib_qp_attr attr = {
		.qp_state = state,
		.qkey = k->qkey,
		.pkey_index = k->pkey_index,
		.port_num = k->port,
		.sq_psn = k->sq_psn,
	};
	struct ibemu_data_modify_qp rec;
	u32 seq;

	spin_lock_irq(&k->lock);
	seq = ++k->modify_seq;
	spin_unlock_irq(&k->lock);
	fill_modify(&rec, k->qp->ibqp.qp_num, seq, &attr, mask | IB_QP_STATE);
	submit(k->dev, &rec, sizeof(rec));
}

/*
 * The UD QPs of a device for a new channel, under obj_mutex while the
 * channel delivers no WQE (ibemu_data.c): each is created, driven from
 * RESET to its state with its saved attributes, attached to its groups,
 * and its posted receives go again. An SQE QP is driven to RTS (there is
 * no modify into SQE); its shadow says SQE until the ULP recovers it.
 */
void ibemu_kqp_replay(struct ibemu_dev *dev)
{
	struct ibemu_kqp *k;

	lockdep_assert_held(&dev->obj_mutex);
	list_for_each_entry(k, &dev->kqps, node) {
		struct ibemu_data_create_qp create = {
			.hdr.type = IBEMU_DATA_CREATE_QP,
			.hdr.length = sizeof(create),
			.qpn = k->qp->ibqp.qp_num,
			.pd = k->pd,
			.send_cq = k->send_cq->handle,
			.recv_cq = k->recv_cq->handle,
			.max_send_wr = k->sq.max_wr,
			.max_recv_wr = k->rq.max_wr,
			.max_send_sge = k->sq.max_sge,
			.max_recv_sge = k->rq.max_sge,
			.max_inline_data = k->max_inline,
			.qp_type = IBEMU_DATA_QPT_UD,
			.sq_sig_all = k->sq_sig_all,
		};
		enum ib_qp_state state;
		struct kqp_mcast *m;

		submit(dev, &create, sizeof(create));
		spin_lock_irq(&k->lock);
		state = k->state;
		spin_unlock_irq(&k->lock);
		if (state == IB_QPS_ERR) {
			replay_modify(k, IB_QPS_ERR, 0);
		} else if (state != IB_QPS_RESET) {
			replay_modify(k, IB_QPS_INIT, IB_QP_PKEY_INDEX |
				      IB_QP_PORT | IB_QP_QKEY);
			if (state != IB_QPS_INIT)
				replay_modify(k, IB_QPS_RTR, 0);
			if (state != IB_QPS_INIT && state != IB_QPS_RTR)
				replay_modify(k, IB_QPS_RTS, IB_QP_SQ_PSN);
			if (state == IB_QPS_SQD)
				replay_modify(k, IB_QPS_SQD, 0);
		}
		list_for_each_entry(m, &k->mcast, node) {
			struct ibemu_data_cmd *cmd;

			if (!mcast_cmd(k, IBEMU_DATA_MCAST_ATTACH, &m->gid,
				       m->lid, &cmd))
				ibemu_data_cmd_submit(dev, cmd);
		}
		/* The receives the last engine held, and those posted since:
		 * all outstanding ones, again, after the commands. */
		spin_lock_irq(&k->lock);
		ibemu_data_producer_stop(&k->rq.prod);
		k->rq.prod.posted = k->rq.prod.delivered = k->rq.tail;
		if (k->rq.head != k->rq.tail && state != IB_QPS_RESET)
			ibemu_data_ring_doorbell(&k->rq.prod, k->rq.head);
		spin_unlock_irq(&k->lock);
	}
}
